"""Loaders of single rows (`Loader`, a `MixtureLoader`'s sources) refuse a preference dataset, whose rows come in
chosen/rejected pairs; the `PairLoader` reads it."""

from __future__ import annotations

import numpy as np
import pytest

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader
from theseus.data.preference import PairLoader
from theseus.data.store import DatasetWriter, open_dataset
from theseus.errors import BadInput

REFUSED = "dataset 'prefs' holds preference pairs .* tune on it with a DPO job"


@pytest.fixture
def datasets(tmp_path):
    root = str(tmp_path)
    with DatasetWriter(root, "prefs", "padded") as w:
        w.append("train", np.ones((4, 8)), np.ones((4, 8), bool))
        w.update(pairs=True)
    with DatasetWriter(root, "text", "contiguous") as w:
        w.append("train", np.arange(100))
    return open_dataset(root, "prefs"), open_dataset(root, "text")


def test_a_loader_of_single_rows_refuses_pairs_and_the_pair_loader_reads_them(datasets):
    prefs, text = datasets
    with pytest.raises(BadInput, match=REFUSED):
        Loader(prefs, batch_size=2, block_size=8)
    with pytest.raises(BadInput, match=REFUSED):
        MixtureLoader([(text, 0.5), (prefs, 0.5)], batch_size=2, block_size=8).batch(0)
    assert PairLoader(prefs, batch_size=2, block_size=8).batch(0)["x"].shape == (2, 8)
