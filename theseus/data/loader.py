"""The deterministic loader: batch k is a pure function of (data, seed, batch size, block size, k).

There is no iterator state. Row r of step k of a contiguous dataset starts at
a hash of (seed, k, r); row r of step k of a padded dataset is position
``k * batch_size + r`` of a hash-ordered permutation of the rows for its
epoch. Any host or device can therefore build exactly its own rows of any
step (``batch(k, rows=slice(4, 8))``), and a resumed run sees the same batches
as an uninterrupted one whatever the topology.

A packed dataset's batches also carry ``segment_ids`` and ``positions``
(``theseus.data.packing``).
"""

from __future__ import annotations

import numpy as np

from theseus.data.hashing import below, hash64
from theseus.data.packing import packed_batch
from theseus.data.store import Dataset
from theseus.errors import BadInput

_PERMS_CACHED = 2


class EpochOrders:
    """Each epoch's visiting order of ``n`` items, hashed from (seed, epoch), the latest epochs kept: the one
    order every loader of rows shares, so a step's rows are a pure function of the seed and the step.

    >>> orders = EpochOrders(seed=0)
    >>> sorted(orders(3, 5).tolist()), orders(3, 5) is orders(3, 5)
    ([0, 1, 2, 3, 4], True)
    """

    def __init__(self, seed: int):
        self.seed = seed
        self._cached: dict[int, np.ndarray] = {}

    def __call__(self, epoch: int, n: int) -> np.ndarray:
        if epoch not in self._cached:
            if len(self._cached) >= _PERMS_CACHED:
                self._cached.pop(next(iter(self._cached)))
            keys = hash64(self.seed, epoch, np.arange(n, dtype=np.uint64))
            self._cached[epoch] = np.argsort(keys, kind="stable")
        return self._cached[epoch]


def check_step(k) -> int:
    """``k`` as an int if it is a valid step (a non-negative integer).

    >>> check_step(3)
    3
    """
    if int(k) != k or k < 0:
        raise BadInput(f"step k must be a non-negative integer, got {k!r}")
    return int(k)


def global_rows(rows, batch_size: int) -> np.ndarray:
    """The global row indices ``rows`` names in a batch of ``batch_size`` rows: None (all),
    a slice, or an index array (each in ``[0, batch_size)``).

    >>> global_rows(slice(2, 4), 8).tolist(), global_rows(None, 3).tolist(), global_rows([5, 1], 8).tolist()
    ([2, 3], [0, 1, 2], [5, 1])
    """
    if rows is None:
        return np.arange(batch_size, dtype=np.int64)
    if isinstance(rows, slice):
        return np.arange(batch_size, dtype=np.int64)[rows]
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= batch_size):
        raise BadInput(f"rows must be in [0, {batch_size}), got {rows.min()}..{rows.max()}")
    return rows


def check_single_rows(dataset: Dataset) -> None:
    """Refuse ``dataset`` when it holds preference pairs (``meta.json`` ``pairs``: a chosen and a rejected row
    each, `theseus.data.preference`) where its rows would be read one by one: a pretraining or SFT job would
    train on the rejected answers as on the chosen ones.

    >>> import tempfile
    >>> from theseus.data.store import DatasetWriter, open_dataset
    >>> root = tempfile.mkdtemp()
    >>> with DatasetWriter(root, "prefs", "padded") as w:
    ...     w.append("train", np.ones((2, 4)), np.ones((2, 4), bool)); w.update(pairs=True)
    >>> check_single_rows(open_dataset(root, "prefs"))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: dataset 'prefs' holds preference pairs (a chosen and a rejected row each): ...
    """
    if dataset.meta.get("pairs"):
        raise BadInput(f"dataset {dataset.name!r} holds preference pairs (a chosen and a rejected row each): "
                       "this job would train on the rejected rows as on the chosen ones; tune on it with a DPO "
                       "job (gpt/train/dpo or <family>/train/dpo)")


class Loader:
    """Batches of ``batch_size`` rows of ``block_size`` tokens from ``dataset``'s ``split``.

    >>> import tempfile
    >>> from theseus.data.store import DatasetWriter, open_dataset
    >>> root = tempfile.mkdtemp()
    >>> with DatasetWriter(root, "toy", "contiguous") as w:
    ...     w.append("train", np.arange(100)); w.append("val", np.arange(10))
    >>> loader = Loader(open_dataset(root, "toy"), seed=0, batch_size=4, block_size=8)
    >>> b = loader.batch(3)
    >>> b["x"].shape, b["x"].dtype, bool((b["y"][:, :-1] == b["x"][:, 1:]).all())
    ((4, 8), dtype('int32'), True)
    >>> bool((loader.batch(3, rows=slice(2, 4))["x"] == b["x"][2:]).all())
    True
    """

    #: whether batches keep a preference pair's two rows together (`theseus.data.preference.PairLoader`);
    #: a loader of single rows refuses a pairs dataset (`check_single_rows`)
    READS_PAIRS = False

    def __init__(self, dataset: Dataset, split: str = "train", seed: int = 0, batch_size: int = 8,
                 block_size: int = 512):
        if batch_size < 1 or block_size < 1:
            raise BadInput(f"batch_size and block_size must be >= 1, got {batch_size} and {block_size}")
        if not self.READS_PAIRS:
            check_single_rows(dataset)
        self.dataset, self.split, self.seed = dataset, split, int(seed)
        self.batch_size, self.block_size = int(batch_size), int(block_size)
        self.tokens = dataset.tokens(split)
        self.kind = dataset.kind
        self._orders = EpochOrders(self.seed)
        if self.kind == "contiguous":
            n = self.tokens.shape[0]
            if n < self.block_size + 1:
                raise BadInput(f"block_size {self.block_size} is too long for dataset {dataset.name!r} {split}: "
                                 f"a row needs {self.block_size + 1} tokens and the split has {n}")
            self.n_starts = n - self.block_size  # starts in [0, n - block_size - 1]
        else:
            self.mask, self.segments = dataset.mask(split), dataset.segments(split)
            self.n_rows, width = self.tokens.shape
            if self.block_size > width:
                raise BadInput(f"block_size {self.block_size} is longer than the rows of padded dataset "
                                 f"{dataset.name!r} ({width} tokens)")
            if self.n_rows == 0:
                raise BadInput(f"dataset {dataset.name!r} has no {split} rows")
            self.eot = int((dataset.tokenizer or {}).get("eot", 0))

    def _global_rows(self, rows) -> np.ndarray:
        return global_rows(rows, self.batch_size)

    def batch(self, k: int, rows=None) -> dict[str, np.ndarray]:
        """Rows ``rows`` (a slice or index array of global rows; default all) of the batch of step ``k``:
        ``x``, ``y`` (int32 ``[R, block_size]``, y the next tokens) and ``padding_mask``
        (bool, True where y counts in the loss); for a packed dataset also ``segment_ids`` and
        ``positions`` (int32, per token of x).

        >>> loader.batch(0)["padding_mask"].all()            # doctest: +SKIP
        True
        """
        k, r = check_step(k), self._global_rows(rows)
        if self.kind == "contiguous":
            return self._contiguous(k, r)
        return self._padded(k, r)

    def starts(self, k: int, rows=None) -> np.ndarray:
        """Token offsets of the rows of step ``k`` (contiguous datasets).

        >>> loader.starts(0).shape                            # doctest: +SKIP
        (8,)
        """
        if self.kind != "contiguous":
            raise BadInput("starts() is for contiguous datasets; padded datasets use row_indices()")
        return below(self.n_starts, self.seed, k, self._global_rows(rows))

    def _contiguous(self, k: int, r: np.ndarray) -> dict[str, np.ndarray]:
        T = self.block_size
        windows = np.lib.stride_tricks.sliding_window_view(self.tokens, T)  # a view: nothing is read yet
        starts = below(self.n_starts, self.seed, k, r)
        return {
            "x": windows[starts].astype(np.int32),  # reads only these rows
            "y": windows[starts + 1].astype(np.int32),
            "padding_mask": np.ones((len(r), T), dtype=bool),
        }

    def row_indices(self, k: int, rows=None) -> np.ndarray:
        """Dataset row indices of the rows of step ``k`` (padded datasets): each epoch
        visits every row once, in an order hashed from (seed, epoch).

        >>> loader.row_indices(0)                             # doctest: +SKIP
        array([...])
        """
        if self.kind != "padded":
            raise BadInput("row_indices() is for padded datasets; contiguous datasets use starts()")
        g = k * self.batch_size + self._global_rows(rows)
        epochs, pos = g // self.n_rows, g % self.n_rows
        out = np.empty_like(g)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            out[sel] = self._orders(e, self.n_rows)[pos[sel]]
        return out

    def _padded(self, k: int, r: np.ndarray) -> dict[str, np.ndarray]:
        idx = self.row_indices(k, r)
        T, width = self.block_size, self.tokens.shape[1]
        tokens, mask = np.asarray(self.tokens[idx]), np.asarray(self.mask[idx])
        segments = None if self.segments is None else np.asarray(self.segments[idx])
        if T == width:  # y needs one token past the row: pad it, out of the loss
            tokens = np.concatenate([tokens, np.full((len(r), 1), self.eot, tokens.dtype)], axis=1)
            mask = np.concatenate([mask, np.zeros((len(r), 1), bool)], axis=1)
            if segments is not None:
                segments = np.concatenate([segments, np.zeros((len(r), 1), segments.dtype)], axis=1)
        if segments is not None:
            return packed_batch(tokens, mask, segments, T)
        return {
            "x": tokens[:, :T].astype(np.int32),
            "y": tokens[:, 1:T + 1].astype(np.int32),
            "padding_mask": np.ascontiguousarray(mask[:, 1:T + 1]),
        }

    def __repr__(self) -> str:
        return (f"Loader({self.dataset.name!r}, split={self.split!r}, seed={self.seed}, "
                f"batch_size={self.batch_size}, block_size={self.block_size})")
