"""Which record wins: the one with the highest write stamp, ties going to the highest writer id.

Every reader that folds records (the cursor's fold, run summaries, the footers' latest entries,
``theseus ls``, the UI, audits) picks the winner through this module, in the form it holds its
records in: Polars frames and expressions, or NumPy/Arrow arrays. A writer's stamps strictly
increase, so ``(stamp, writer)`` names one record: two rows that tie on both are copies of one
record (a compaction seen half-way), and whichever is kept holds the same value.

>>> frame = pl.DataFrame({"node": ["a", "a", "b"], "key": ["x"] * 3, "stamp": [5, 5, 1], "writer": ["u", "w", "u"],
...                       "float": [1.0, 2.0, 3.0]})
>>> latest_rows(frame, ["node", "key"]).sort("node")["float"].to_list()
[2.0, 3.0]
>>> latest_index(frame["stamp"].to_numpy(), frame["writer"].to_numpy())
1
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

ORDER = ("stamp", "writer")  # the columns that rank records, most significant first

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def latest_rows(frame: Frame, by: list[str]) -> Frame:
    """Per group of ``by`` (``["node", "key"]``: a node's value of a key), only its latest record.

    One sort and one pass (the last record of each group in that order); folding is idempotent,
    so duplicated records change nothing.

    >>> raw = pl.LazyFrame({"node": ["a", "a", "a"], "key": ["x"] * 3, "stamp": [1, 2, 2], "writer": ["w", "u", "v"]})
    >>> latest_rows(raw, ["node", "key"]).collect().rows()
    [('a', 'x', 2, 'v')]
    """
    return frame.sort(*ORDER).unique(subset=by, keep="last")


def latest_of(values: pl.Expr, where: pl.Expr | None = None) -> pl.Expr:
    """Inside a ``group_by``'s ``agg``: ``values`` at the group's latest record (of the rows ``where``
    holds, when given). ``values`` may name several columns (``pl.col("stamp", "float")``).

    >>> frame = pl.DataFrame({"g": [1, 1, 1], "stamp": [3, 3, 9], "writer": ["v", "w", "a"], "key": ["x", "x", "y"],
    ...                       "float": [1.0, 2.0, 3.0]})
    >>> frame.group_by("g").agg(latest_of(pl.col("float"), pl.col("key") == "x"))["float"].to_list()
    [2.0]
    """
    if where is None:
        return values.sort_by(*ORDER).last()
    return values.filter(where).sort_by(*(pl.col(c).filter(where) for c in ORDER)).last()


def latest_row(frame: pl.DataFrame) -> dict:
    """The latest record of ``frame`` (not empty), as a dict of its columns.

    >>> latest_row(pl.DataFrame({"stamp": [4, 4, 2], "writer": ["b", "a", "z"], "float": [1.0, 2.0, 3.0]}))["float"]
    1.0
    """
    return frame.row(latest_index(frame["stamp"].to_numpy(), frame["writer"]), named=True)


def latest_index(stamps: np.ndarray, writers) -> int:
    """The position of the latest record among ``stamps`` (not empty) and their ``writers`` (a NumPy
    array, an Arrow array or a Polars series of strings).

    >>> latest_index(np.array([7, 9, 9]), pa.array(["z", "a", "b"]))
    2
    """
    top = np.flatnonzero(stamps == stamps.max())
    if len(top) == 1:
        return int(top[0])
    tied = [str(w) for w in (writers.take(pa.array(top)).to_pylist() if isinstance(writers, (pa.Array, pa.ChunkedArray))
                             else list(writers[top] if isinstance(writers, np.ndarray) else writers.gather(top)))]
    return int(top[max(range(len(tied)), key=tied.__getitem__)])


def latest_per_group(groups: np.ndarray, stamps, writers) -> np.ndarray:
    """The positions of each group's latest record, groups ascending (``groups``: the seq of each
    record of one key; ``stamps`` and ``writers``: NumPy or Arrow arrays).

    >>> latest_per_group(np.array([1, 0, 1, 0]), np.array([5, 2, 5, 3]), pa.array(["a", "w", "b", "v"]))
    array([3, 2])
    """
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
    table = pa.table({"group": groups, "stamp": stamps, "writer": writers})
    order = pc.sort_indices(table, [("group", "ascending"), *((c, "ascending") for c in ORDER)]).to_numpy()
    return order[last_of_each(groups[order])].astype(np.int64)


def last_of_each(groups: np.ndarray) -> np.ndarray:
    """A mask of the last row of each run of equal ``groups``: each group's latest record where the
    rows are already in (group, stamp, writer) order, as a segment's block keeps them.

    >>> last_of_each(np.array([0, 0, 1, 2, 2])).tolist()
    [False, True, True, False, True]
    """
    keep = np.ones(len(groups), bool)
    keep[:-1] = groups[1:] != groups[:-1]
    return keep


def later(a: tuple | None, b: tuple) -> tuple:
    """The later of two ``(value, stamp, writer)`` records (``a`` may be None: no record yet).

    >>> later((1.0, 5, "a"), (2.0, 5, "b")), later(None, (2.0, 1, "a")), later((1.0, 6, "a"), (2.0, 5, "z"))
    ((2.0, 5, 'b'), (2.0, 1, 'a'), (1.0, 6, 'a'))
    """
    return b if a is None or b[1:] > a[1:] else a
