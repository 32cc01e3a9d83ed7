"""Validation reads at most one pass of each validation split, with ``training.validation_steps``
as the cap, and says which of the two bounds it in its log line."""

from __future__ import annotations

import math

import pytest

from tests.train._helpers import ListLog, config
from theseus.data.loader import Loader

VAL_TOKENS = 4000  # the val split of the test dataset (tests/train/_helpers.write_dataset)


@pytest.fixture
def val_batches(monkeypatch):
    """The batch numbers read from val splits."""
    read: list[int] = []
    real = Loader.batch

    def batch(self, k, rows=None):
        if self.split == "val":
            read.append(k)
        return real(self, k, rows)

    monkeypatch.setattr(Loader, "batch", batch)
    return read


def test_validation_reads_one_pass_of_a_small_split_not_validation_steps_batches(make_trainer, val_batches):
    log = ListLog()
    trainer = make_trainer(config(training={"validation_steps": 2048}), log=log)
    trainer.validate()
    rows, block = trainer.micro_rows, trainer.block_size
    whole = math.ceil(math.ceil(VAL_TOKENS / block) / rows)  # the split's rows of block tokens, in batches
    assert sorted(set(val_batches)) == list(range(whole)) and whole < 2048
    [line] = log.messages("VALIDATION |")
    assert f"{whole} batches of {rows} x {block} tokens (one pass of the split" in line


def test_validation_steps_caps_the_pass(make_trainer, val_batches):
    log = ListLog()
    trainer = make_trainer(config(training={"validation_steps": 3}), log=log)
    trainer.validate()
    trainer.validate()  # the same pass again: logged once
    assert sorted(set(val_batches)) == [0, 1, 2]
    [line] = log.messages("VALIDATION |")
    assert "3 batches" in line and "(training.validation_steps; one pass of the split is" in line
