"""Top-k pruning: which runs read from the log can hold a query's first n nodes by one key.

A query sorted by one numeric key with a limit (``find().has(k).sort(k).limit(10)``) over many
runs that are not in the view would fold every run. Instead, one Polars scan of those runs'
segments takes the ``m`` rows of that key that come first in the sort (raw records: no fold,
so a rewritten or superseded record may be among them), and only the runs holding one of them
are folded. The answer is exact whenever it proves itself: every run left out holds that key
only in records that sort at or after the ``m``-th raw row (the ``bound``), and the node a run
left out could contribute is one of those records; so when the pruned query returns n nodes
whose last value sorts strictly before the bound, no left-out node can enter the first n.
Otherwise (ties at the bound, many superseded records, nodes lacking the key) the caller runs
the query over every run.

The scan runs in a Polars thread (no GIL) while the caller parses the segment footers.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, NamedTuple

import polars as pl

from theseus.store.reader import HIVE

MIN_RUNS = 64  # fewer runs read from the log fold faster than a scan of their segments
ROWS_PER_RESULT = 4  # raw rows taken per result row asked, plus SLACK_ROWS
SLACK_ROWS = 32


class Pruned(NamedTuple):
    """The runs to fold (``runs``), the value of the last raw row taken (``bound``), and whether
    every raw row of the key was taken (``complete``: then no left-out run holds the key at all)."""

    runs: set[tuple[str, str]]
    bound: float | None
    complete: bool


def value_expr() -> pl.Expr:
    """A numeric key's value in a raw row, as a float (int folds into float).

    >>> pl.DataFrame({"float": [None, 1.5], "int": [2, None]}).select(value_expr())["value"].to_list()
    [2.0, 1.5]
    """
    return pl.coalesce(pl.col("float"), pl.col("int").cast(pl.Float64)).alias("value")


def start(paths: list[str], key: str, ascending: bool, rows: int,
          condition: Callable[[pl.Expr], pl.Expr] | None = None) -> Future:
    """Start scanning local segments ``paths`` for the first ``rows`` raw records of ``key`` in sort
    order (``condition``: a filter on their value, the query's ``where`` on that key), in a
    background thread; its result is a :class:`Pruned`.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> start(store._index.segments(), "loss", True, 5).result().runs == {(n.name, n.nonce)}
    True
    """
    scan = pl.scan_parquet(paths, hive_partitioning=True, hive_schema=HIVE).filter(pl.col("key") == key)
    value = value_expr()
    scan = scan.select("name", "nonce", value)
    if condition is not None:
        scan = scan.filter(condition(pl.col("value")))
    # the same order as the query's sort (NaN after every number, nulls last), so that a row
    # left out sorts at or after the last one taken
    top = scan.sort("value", descending=not ascending, nulls_last=True).head(rows)
    pool = ThreadPoolExecutor(1)
    future = pool.submit(lambda: _pruned(top.collect(), rows))
    pool.shutdown(wait=False)
    return future


def _pruned(top: pl.DataFrame, rows: int) -> Pruned:
    runs = set(top.select("name", "nonce").unique().iter_rows())
    complete = top.height < rows
    return Pruned(runs, None if complete else top["value"][-1], complete)


def proves(pruned: Pruned, count: int, last: float | None, limit: int, ascending: bool, required: bool) -> bool:
    """Whether a pruned query's answer is the whole query's: it returned ``count`` nodes, the last
    with ``last`` as its key's value, for a ``limit``; ``required``: the query keeps only nodes
    holding the key (``has`` or ``where`` on it).

    >>> cut = Pruned(set(), 5.0, False)
    >>> proves(cut, 10, 4.0, 10, True, True), proves(cut, 10, 5.0, 10, True, True), proves(cut, 9, 4.0, 10, True, True)
    (True, False, False)
    >>> proves(Pruned(set(), None, True), 3, 1.0, 10, True, True)  # every raw row taken, only key holders wanted
    True
    """
    if pruned.complete and required:
        return True
    if count < limit or last is None:
        return False
    return pruned.complete or (pruned.bound is not None and before(float(last), pruned.bound, ascending))


def before(a: float, b: float, ascending: bool) -> bool:
    """Whether ``a`` sorts strictly before ``b`` in Polars' order (NaN after every number).

    >>> before(1.0, 2.0, True), before(float("nan"), 2.0, True), before(2.0, float("nan"), True)
    (True, False, True)
    >>> before(float("nan"), 2.0, False), before(2.0, 1.0, False), before(1.0, 1.0, False)
    (True, True, False)
    """
    na, nb = math.isnan(a), math.isnan(b)
    if ascending:
        return not na and (nb or a < b)
    return (na and not nb) or (not na and not nb and a > b)


def rows_for(limit: int) -> int:
    """How many raw rows are taken for a ``limit``.

    >>> rows_for(10)
    72
    """
    return ROWS_PER_RESULT * limit + SLACK_ROWS
