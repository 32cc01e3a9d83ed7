"""Data mixtures: batches whose rows come from several tokenized datasets at set rates.

The batch of step k is a pure function of (datasets, rates, seed, batch size, block
size, k), as for the single-dataset ``Loader``, and is built without walking earlier steps:

- **How many rows** of step k each source gets: of the first n rows of the run, source 0
  holds ``round(p_0 n)``, source 1 ``round(p_1 / (p_1 + ... + p_{S-1}) m)`` of the m rows
  left, and so on, the last source holding what is left (p_s the normalised rates, exact
  fractions; halves round up). Each count grows with n, so every step's count is
  non-negative however small a rate is against the batch, and after every step each of S
  sources is at most (S - 1) / 2 rows from its rate (at most one row for up to 3 sources).
- **Which rows** of step k go to which source: a permutation of the rows hashed from
  (seed, k) hands out the step's counts.
- **What a row holds**: source s reads its own stream of samples. Its i-th row of the run
  (counting its rows of earlier steps, then its earlier rows of this step in row order) is
  sample i, which is what row 0 of step i of a ``Loader`` of that dataset with
  ``batch_size=1`` and the source's own seed (a hash of (seed, s)) reads: a hashed window of
  a contiguous dataset, or position i of the hashed epoch permutations of a padded one, so
  a padded source visits every row once per epoch without gaps, and two sources holding the
  same data read different samples.

A mixture with a packed dataset (``theseus.data.packing``) gives every batch ``segment_ids`` and
``positions``: the rows of the other datasets are one segment each.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from theseus.data.hashing import below, hash64
from theseus.data.loader import EpochOrders, check_single_rows, check_step, global_rows
from theseus.data.packing import packed_batch, positions
from theseus.data.store import Dataset, check_name, open_dataset
from theseus.errors import BadInput

_ORDER_STREAM = 0  # hash key of the stream that assigns the rows of a step to sources
_SOURCE_STREAM = 1  # hash key of the streams that seed each source


def _check_rate(dataset: str, rate) -> float:
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) or rate <= 0:
        raise BadInput(f"sampling rate of dataset {dataset!r} must be a finite number > 0, got {rate!r}")
    return float(rate)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """A tokenized dataset under ``<root>/data/`` and its sampling rate in a mixture.

    Rates are relative: a mixture normalises them, so they need not sum to 1.

    >>> DATA = [Sampling("fineweb", 0.7), Sampling("pydoc", 0.3)]
    >>> DATA[1].dataset, DATA[1].rate
    ('pydoc', 0.3)
    >>> Sampling("pydoc", 0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: sampling rate of dataset 'pydoc' must be a finite number > 0, got 0
    """

    dataset: str
    rate: float

    def __post_init__(self):
        check_name(self.dataset)
        _check_rate(self.dataset, self.rate)


class _Stream:
    """The samples of one source: sample i is row 0 of step i of ``Loader(dataset, split, seed,
    batch_size=1, block_size)``, except that padded rows narrower than the block are padded
    up to it with eot (out of the loss)."""

    def __init__(self, dataset: Dataset, split: str, seed: int, block_size: int):
        check_single_rows(dataset)  # a sample is one row: a preference pair's two would train alike
        self.dataset, self.seed, self.block_size = dataset, seed, block_size
        self.tokens = dataset.tokens(split)
        self._orders = EpochOrders(seed)
        if dataset.kind == "contiguous":
            n = self.tokens.shape[0]
            if n < block_size + 1:
                raise BadInput(f"block_size {block_size} is too long for dataset {dataset.name!r} {split}: "
                                 f"a row needs {block_size + 1} tokens and the split has {n}")
            self.windows = np.lib.stride_tricks.sliding_window_view(self.tokens, block_size + 1)  # nothing read yet
        else:
            self.mask, self.segments = dataset.mask(split), dataset.segments(split)
            self.n_rows = self.tokens.shape[0]
            if self.n_rows == 0:
                raise BadInput(f"dataset {dataset.name!r} has no {split} rows")
            self.eot = int((dataset.tokenizer or {}).get("eot", 0))

    def read(self, samples: np.ndarray, at: np.ndarray, out: dict[str, np.ndarray]) -> None:
        """Write samples ``samples`` into rows ``at`` of the batch arrays ``out``."""
        T = self.block_size
        if self.dataset.kind == "contiguous":
            rows = self.windows[below(self.windows.shape[0], self.seed, samples, 0)]  # reads only these rows
            out["x"][at] = rows[:, :T]
            out["y"][at] = rows[:, 1:]
            return
        epochs, pos = samples // self.n_rows, samples % self.n_rows
        idx = np.empty_like(samples)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            idx[sel] = self._orders(e, self.n_rows)[pos[sel]]
        width = min(self.tokens.shape[1], T + 1)  # y needs one token past the row: pad it, out of the loss
        tokens = np.full((len(idx), T + 1), self.eot, dtype=self.tokens.dtype)
        mask = np.zeros((len(idx), T + 1), dtype=bool)
        tokens[:, :width] = self.tokens[idx, :width]
        mask[:, :width] = self.mask[idx, :width]
        if self.segments is not None:
            segments = np.zeros((len(idx), T + 1), dtype=self.segments.dtype)
            segments[:, :width] = self.segments[idx, :width]
            batch = packed_batch(tokens, mask, segments, T)
            for key in ("x", "y", "padding_mask", "segment_ids"):  # positions: of the whole batch, at its end
                out[key][at] = batch[key]
            return
        out["x"][at] = tokens[:, :T]
        out["y"][at] = tokens[:, 1:]
        out["padding_mask"][at] = mask[:, 1:]


class MixtureLoader:
    """Batches of ``batch_size`` rows of ``block_size`` tokens drawn from several datasets'
    ``split`` at the given rates, with the interface of ``Loader``.

    ``sources`` is a sequence of ``(dataset, rate)``. Rates are normalised, so they need not
    sum to 1: ``(a, 2), (b, 1)`` gives a two thirds of the rows. Contiguous and padded
    datasets mix in one batch; a padded dataset whose rows are narrower than ``block_size``
    is padded up to it with its eot token, out of the loss (``padding_mask`` False), where
    the single-dataset ``Loader`` refuses it. The caller checks that the datasets share one
    tokenizer's vocabulary; this checks only that the block fits each dataset's split.

    >>> import tempfile
    >>> from theseus.data.store import DatasetWriter, open_dataset
    >>> root = tempfile.mkdtemp()
    >>> for name, first in (("a", 0), ("b", 1000)):
    ...     with DatasetWriter(root, name, "contiguous") as w:
    ...         w.append("train", np.arange(first, first + 100)); w.append("val", np.arange(10))
    >>> mix = MixtureLoader([(open_dataset(root, "a"), 3), (open_dataset(root, "b"), 1)], batch_size=4, block_size=8)
    >>> mix.names, mix.rates
    (('a', 'b'), (0.75, 0.25))
    >>> b = mix.batch(2)
    >>> b["x"].shape, b["x"].dtype, sorted(mix.source(2).tolist())
    ((4, 8), dtype('int32'), [0, 0, 0, 1])
    >>> bool(((b["x"] >= 1000) == (mix.source(2) == 1)[:, None]).all())
    True
    >>> bool((mix.batch(2, rows=slice(1, 3))["y"] == b["y"][1:3]).all())
    True
    """

    def __init__(self, sources: Sequence[tuple[Dataset, float]], split: str = "train", seed: int = 0,
                 batch_size: int = 8, block_size: int = 512):
        sources = list(sources)
        if not sources:
            raise BadInput("a mixture needs at least one (dataset, rate) source")
        if batch_size < 1 or block_size < 1:
            raise BadInput(f"batch_size and block_size must be >= 1, got {batch_size} and {block_size}")
        for source in sources:
            if not (isinstance(source, (tuple, list)) and len(source) == 2 and isinstance(source[0], Dataset)):
                raise TypeError(f"a MixtureLoader takes (Dataset, rate) pairs, got {source!r}; "
                                "open_mixture(root, [Sampling(name, rate), ...]) opens datasets by name")
        self.datasets = tuple(dataset for dataset, _ in sources)
        self.names = tuple(dataset.name for dataset in self.datasets)
        twice = sorted({name for name in self.names if self.names.count(name) > 1})
        if twice:
            raise BadInput(f"dataset(s) {', '.join(map(repr, twice))} named more than once in the mixture; "
                             "list each dataset once with its whole rate")
        # each rate as the decimal it prints as, so that 0.7 / 0.3 mixes exactly as 7 / 3 does
        exact = [Fraction(repr(_check_rate(dataset.name, rate))) for dataset, rate in sources]
        total = sum(exact)
        self.rates = tuple(float(r / total) for r in exact)
        shares, left = [], total
        for r in exact[:-1]:
            shares.append(((r / left).numerator, (r / left).denominator))
            left -= r
        self._shares = shares  # source s's share of the rows sources 0..s-1 leave; the last takes the rest
        self.split, self.seed = split, int(seed)
        self.batch_size, self.block_size = int(batch_size), int(block_size)
        self._order_seed = int(hash64(self.seed, _ORDER_STREAM))
        self.source_seeds = tuple(int(hash64(self.seed, _SOURCE_STREAM, s)) for s in range(len(sources)))
        self._streams = [_Stream(dataset, split, s_seed, self.block_size)
                         for (dataset, _), s_seed in zip(sources, self.source_seeds)]
        self.packed = any(dataset.packed for dataset in self.datasets)

    def _counts_before(self, n_rows: int) -> np.ndarray:
        """Rows of each source among the first ``n_rows`` rows of the run."""
        counts, left = [], n_rows
        for num, den in self._shares:
            counts.append((2 * num * left + den) // (2 * den))  # round(num / den * left), halves up
            left -= counts[-1]
        return np.array([*counts, left], dtype=np.int64)

    def _plan(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The source of each row of step ``k`` and the sample of that source it reads."""
        B = self.batch_size
        before = self._counts_before(k * B)
        counts = self._counts_before((k + 1) * B) - before
        order = np.argsort(hash64(self._order_seed, k, np.arange(B, dtype=np.uint64)), kind="stable")
        source = np.empty(B, dtype=np.int64)
        source[order] = np.repeat(np.arange(len(counts)), counts)
        grouped = np.argsort(source, kind="stable")  # rows by source, in row order within one
        first_of_source = np.cumsum(counts) - counts
        sample = np.empty(B, dtype=np.int64)
        sample[grouped] = np.repeat(before - first_of_source, counts) + np.arange(B)
        return source, sample

    def source(self, k: int, rows=None) -> np.ndarray:
        """The index (into ``names``) of the dataset each row of step ``k`` comes from.

        >>> import tempfile
        >>> from theseus.data.store import DatasetWriter, open_dataset
        >>> root = tempfile.mkdtemp()
        >>> for name in ("a", "b"):
        ...     with DatasetWriter(root, name, "contiguous") as w:
        ...         w.append("train", np.arange(100)); w.append("val", np.arange(10))
        >>> mix = MixtureLoader([(open_dataset(root, "a"), 0.9), (open_dataset(root, "b"), 0.1)], batch_size=5,
        ...                     block_size=4)
        >>> [mix.source(k).tolist().count(1) for k in range(6)]  # b holds a tenth: a row every other step
        [0, 1, 0, 1, 0, 1]
        """
        k, r = check_step(k), global_rows(rows, self.batch_size)
        return self._plan(k)[0][r]

    def batch(self, k: int, rows=None) -> dict[str, np.ndarray]:
        """Rows ``rows`` (a slice or index array of global rows; default all) of the batch of step ``k``:
        ``x``, ``y`` (int32 ``[R, block_size]``, y the next tokens) and ``padding_mask``
        (bool, True where y counts in the loss); with a packed dataset also ``segment_ids`` and
        ``positions`` (int32, per token of x).

        A padded row narrower than the block is padded with eot, out of the loss:

        >>> import tempfile
        >>> from theseus.data.store import DatasetWriter, open_dataset
        >>> root = tempfile.mkdtemp()
        >>> with DatasetWriter(root, "qa", "padded") as w:
        ...     w.set_tokenizer({"eot": 9})
        ...     w.append("train", [[1, 2, 3]], [[False, True, True]]); w.append("val", [[1, 2, 3]], [[True] * 3])
        >>> b = MixtureLoader([(open_dataset(root, "qa"), 1.0)], batch_size=1, block_size=5).batch(0)
        >>> b["x"].tolist(), b["y"].tolist(), b["padding_mask"].tolist()
        ([[1, 2, 3, 9, 9]], [[2, 3, 9, 9, 9]], [[True, True, False, False, False]])
        """
        k, r = check_step(k), global_rows(rows, self.batch_size)
        source, sample = self._plan(k)
        source, sample = source[r], sample[r]
        T = self.block_size
        out = {"x": np.empty((len(r), T), np.int32), "y": np.empty((len(r), T), np.int32),
               "padding_mask": np.ones((len(r), T), bool)}
        if self.packed:
            out["segment_ids"] = np.ones((len(r), T), np.int32)
        for s, stream in enumerate(self._streams):
            at = np.flatnonzero(source == s)
            if at.size:
                stream.read(sample[at], at, out)
        if self.packed:
            out["positions"] = positions(out["segment_ids"])
        return out

    def __repr__(self) -> str:
        parts = ", ".join(f"{name!r}: {rate:.4g}" for name, rate in zip(self.names, self.rates))
        return (f"MixtureLoader({{{parts}}}, split={self.split!r}, seed={self.seed}, "
                f"batch_size={self.batch_size}, block_size={self.block_size})")


def open_mixture(root: str, sources: Sequence[Sampling], split: str = "train", seed: int = 0,
                 batch_size: int = 8, block_size: int = 512, suffix: str = "") -> MixtureLoader:
    """A ``MixtureLoader`` over the datasets ``sources`` names under ``<root>/data/``.

    Each dataset is opened as ``name + suffix``; a missing one raises ``DatasetNotFound``
    naming the tokenize job that makes it (``data/tokenize/<name>``). An empty list or a
    dataset named twice is refused.

    >>> import tempfile
    >>> from theseus.data.store import DatasetNotFound, DatasetWriter
    >>> root = tempfile.mkdtemp()
    >>> with DatasetWriter(root, "pydoc", "contiguous") as w:
    ...     w.append("train", np.arange(100)); w.append("val", np.arange(10))
    >>> open_mixture(root, [Sampling("pydoc", 1.0)], batch_size=2, block_size=8).batch(0)["x"].shape
    (2, 8)
    >>> try:
    ...     open_mixture(root, [Sampling("pydoc", 0.3), Sampling("fineweb", 0.7)])
    ... except DatasetNotFound as e:
    ...     print(str(e).split("; ")[1].split(" <")[0])
    run the tokenize job first: theseus run data/tokenize/fineweb
    """
    sources = list(sources)
    if not sources:
        raise BadInput("a data mixture needs at least one Sampling(dataset, rate)")
    for sampling in sources:
        if not isinstance(sampling, Sampling):
            raise TypeError(f"a data mixture takes Sampling(dataset, rate) entries, got {sampling!r}")
    names = [sampling.dataset for sampling in sources]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise BadInput(f"dataset(s) {', '.join(map(repr, twice))} named more than once in the mixture; "
                         "list each dataset once with its whole rate")
    datasets = [open_dataset(root, s.dataset + suffix, hint=f"data/tokenize/{s.dataset}") for s in sources]
    return MixtureLoader([(d, s.rate) for d, s in zip(datasets, sources)], split=split, seed=seed,
                         batch_size=batch_size, block_size=block_size)
