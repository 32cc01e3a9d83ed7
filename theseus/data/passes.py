"""How many batches of a loader read its split once: the most a validation pass reads.

A contiguous split of n tokens holds n / block_size rows' worth of tokens (its rows start at
hashed offsets, so a pass is as many tokens as the split holds); a padded split holds its rows
(batches 0.. of one epoch visit each once). A mixture's pass ends when its scarcest source, at
its rate, has been read once, so no source is read twice over. Passes round up to whole batches.
"""

from __future__ import annotations

import math
from typing import Any

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader


def split_rows(tokens: Any, block_size: int) -> int:
    """Rows a split holds: a padded split's rows (2-d ``tokens``), a contiguous one's tokens over
    ``block_size`` (rounded up).

    >>> import numpy as np
    >>> split_rows(np.arange(4583), 32), split_rows(np.zeros((7, 64)), 32)
    (144, 7)
    """
    if len(tokens.shape) == 2:
        return int(tokens.shape[0])
    return max(1, math.ceil(int(tokens.shape[0]) / block_size))


def one_pass(loader: Loader | MixtureLoader) -> int:
    """Batches of ``loader`` that read its split once (at least one).

    >>> import tempfile, numpy as np
    >>> from theseus.data.store import DatasetWriter, open_dataset
    >>> root = tempfile.mkdtemp()
    >>> for name, n in (("a", 4583), ("b", 1000)):
    ...     with DatasetWriter(root, name, "contiguous") as w:
    ...         w.append("train", np.arange(100)); w.append("val", np.arange(n))
    >>> one_pass(Loader(open_dataset(root, "a"), "val", batch_size=8, block_size=32))  # 4583 tokens, 256 a batch
    18
    >>> mix = MixtureLoader([(open_dataset(root, "a"), 0.5), (open_dataset(root, "b"), 0.5)], "val", batch_size=8,
    ...                     block_size=32)
    >>> one_pass(mix)  # b's 32 rows at half of each batch of 8
    8
    """
    if isinstance(loader, MixtureLoader):
        rows = [split_rows(stream.tokens, loader.block_size) for stream in loader._streams]
        total = min(r / rate for r, rate in zip(rows, loader.rates) if rate > 0)
    else:
        total = split_rows(loader.tokens, loader.block_size)
    return max(1, math.ceil(total / loader.batch_size))
