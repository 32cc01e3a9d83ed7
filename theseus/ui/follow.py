"""Following a root's log: list each run's segments, read only the ones not read before, keep
each run folded (one row per node and key, the latest record winning, as the store folds).

A :class:`Follower` is the app's only reader of log records. Segments are immutable, so a
segment read once never needs reading again; a compaction publishes a merged segment (read
once more: folding is idempotent) and retires the old ones (forgotten). Each poll costs one
listing of the log folders (local listings are reused while their ctime proves them current)
plus the reads of new segments only.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.follow.run")
>>> with store.writer() as w:
...     w.write(n, {"train/loss": 2.0})
>>> follower = Follower(store)
>>> [run.nonce for run in follower.poll()] == [n.nonce]
True
>>> with store.writer() as w:
...     w.write(n.next(), {"train/loss": 1.5})
>>> changed = follower.poll()
>>> [run.nonce for run in changed], changed[0].values("train/loss")
(['...'], {0: 2.0, 1: 1.5})
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field

import polars as pl

from theseus.store import Store, schema
from theseus.store import fs as rootfs
from theseus.store.nonces import AmbiguousNonce, ambiguous
from theseus.store.reader import latest_records, scan
from theseus.store.schema import merge_types
from theseus.store.segments import CorruptSegment, Listings, list_runs, retry_vanished, vanished
from theseus.store.summary import UnreadableRun

# the runs table's columns and the config its conditions test: their latest values are kept per run
FACT_KEYS = frozenset({schema.JOB, schema.STATUS, schema.FINISHED, schema.ERROR, schema.CONFIG, "train/loss",
                       "val/loss", "train/tokens"})
KEEP = ["node", "seq", "parent", "stamp", "writer", "key", "float", "int", "bool", "str"]
EMPTY = pl.DataFrame(schema={"node": pl.String, "seq": pl.Int64, "parent": pl.String, "stamp": pl.Int64,
                             "writer": pl.String, "key": pl.String, "float": pl.Float64, "int": pl.Int64,
                             "bool": pl.Boolean, "str": pl.String})


@dataclass
class RunLog:
    """One run's folded records (``rows``: one per node and key) and the segments read into them.

    ``version`` grows by one each time new records land, so a client can ask for what changed.

    >>> run = RunLog("a.b.c", "abcdef")
    >>> run.label, run.version, run.values("train/loss")
    ('a.b.c:abcdef', 0, {})
    """

    name: str
    nonce: str
    segments: set[str] = field(default_factory=set)
    rows: pl.DataFrame = field(default_factory=lambda: EMPTY)
    version: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)  # segment path -> why it cannot be read
    facts: Facts = field(default_factory=lambda: NO_FACTS)
    shared: tuple[str, ...] = ()  # the other names whose records are under this nonce (a collision)

    @property
    def label(self) -> str:
        """``name:nonce``, how the app names a run."""
        return f"{self.name}:{self.nonce}"

    def fold(self, new: pl.DataFrame) -> None:
        """Fold new raw records on top of the kept ones (latest write stamp per node and key wins)."""
        both = pl.concat([self.rows, new.select(KEEP)], how="vertical_relaxed")
        self.rows = latest_records(both.lazy()).collect().sort("seq", "key")
        self.facts = facts_of(self.rows.with_columns(pl.lit(self.nonce).alias("nonce"))).get(self.nonce, NO_FACTS)
        self.version += 1

    def latest(self, key: str):
        """The value of ``key`` in its latest record across the run (by write stamp), or None.

        >>> RunLog("a", "abcdef").latest("_status") is None
        True
        """
        if key in FACT_KEYS:
            return self.facts.latest.get(key)
        rows = self.rows.filter(pl.col("key") == key)
        if rows.height == 0:
            return None
        row = rows.sort("stamp", "writer").row(-1, named=True)
        return _value(row)

    def values(self, key: str) -> dict[int, object]:
        """``{seq: value}`` of ``key`` at each node holding it (seq order).

        >>> RunLog("a", "abcdef").values("x")
        {}
        """
        rows = self.rows.filter(pl.col("key") == key)
        return {row["seq"]: _value(row) for row in rows.iter_rows(named=True)}

    def keys(self) -> set[str]:
        """The keys this run logged (reserved ones included).

        >>> RunLog("a", "abcdef").keys()
        set()
        """
        return set(self.facts.keys)


@dataclass(frozen=True)
class Facts:
    """What the runs table, the charts' key list and the lineage tree need of a run, worked out once
    per fold for every run folded together (one Polars pass, not one per run): the last write stamp,
    the node count, the last seq, the id of the node it branched from (``origin``), the latest value
    of each of ``FACT_KEYS``, its keys, its numeric user keys, the read type of each user key and the
    range (least, greatest; NaN left out) of each int or float one.

    >>> NO_FACTS.nodes, NO_FACTS.latest
    (0, {})
    """

    written: int = 0
    nodes: int = 0
    last_seq: int | None = None
    origin: str | None = None
    latest: dict = field(default_factory=dict)
    keys: frozenset = frozenset()
    numeric: frozenset = frozenset()
    types: dict = field(default_factory=dict)
    ranges: dict = field(default_factory=dict)


NO_FACTS = Facts()


def facts_of(folded: pl.DataFrame) -> dict[str, Facts]:
    """The :class:`Facts` of each run (by nonce) of folded records with a ``nonce`` column, in
    (seq, key) order within each run.

    >>> frame = EMPTY.vstack(pl.DataFrame({"node": ["n"], "seq": [0], "parent": [None], "stamp": [5], "writer": ["w"],
    ...     "key": ["train/loss"], "float": [1.5], "int": [None], "bool": [None], "str": [None]}, schema=EMPTY.schema))
    >>> facts = facts_of(frame.with_columns(pl.lit("abcdef").alias("nonce")))["abcdef"]
    >>> facts.nodes, facts.latest, sorted(facts.numeric), facts.types, facts.ranges
    (1, {'train/loss': 1.5}, ['train/loss'], {'train/loss': 'float'}, {'train/loss': (1.5, 1.5)})
    """
    first = (pl.col("seq") == pl.col("seq").min()) & pl.col("parent").is_not_null() & (pl.col("parent") != "")
    base = folded.group_by("nonce").agg(
        pl.col("stamp").max().alias("written"), pl.col("seq").n_unique().alias("nodes"),
        pl.col("seq").max().alias("last"), pl.col("parent").filter(first).first().alias("origin"),
        pl.col("key").unique().alias("keys"))
    latest: dict[str, dict] = {}
    wanted = folded.filter(pl.col("key").is_in(FACT_KEYS)).sort("stamp", "writer")
    for nonce, key, *values in (wanted.group_by("nonce", "key").last()
                                .select("nonce", "key", "float", "int", "bool", "str").iter_rows()):
        latest.setdefault(nonce, {})[key] = next((v for v in values if v is not None), None)
    number = pl.coalesce(pl.col("float"), pl.col("int").cast(pl.Float64))
    used = [pl.col(c).is_not_null().any().alias(c) for c in ("str", "bool", "int", "float")]
    per_key = folded.filter(~pl.col("key").str.starts_with("_")).group_by("nonce", "key").agg(
        *used, number.filter(~number.is_nan()).min().alias("lo"), number.filter(~number.is_nan()).max().alias("hi"))
    types: dict[str, dict] = {}
    ranges: dict[str, dict] = {}
    numeric: dict[str, set] = {}  # keys with a number (or bool) at some node: what a chart can draw
    for nonce, key, *flags, lo, hi in per_key.iter_rows():
        if any(flags[1:]):
            numeric.setdefault(nonce, set()).add(key)
        kind = None
        for column, there in zip(("str", "bool", "int", "float"), flags):
            if there:
                kind = column if kind is None else merge_types(kind, column)
        if kind is not None:
            types.setdefault(nonce, {})[key] = kind
        if kind in ("int", "float") and lo is not None:
            ranges.setdefault(nonce, {})[key] = (lo, hi)
    return {nonce: Facts(written or 0, nodes, last, origin, latest.get(nonce, {}), frozenset(keys),
                         frozenset(numeric.get(nonce, ())),
                         types.get(nonce, {}), ranges.get(nonce, {}))
            for nonce, written, nodes, last, origin, keys in base.iter_rows()}


def _value(row: dict):
    for column in ("float", "int", "bool", "str"):
        if row[column] is not None:
            return row[column]
    return None


class Follower:
    """The runs of one root, each folded from its segments, refreshed by :meth:`poll`.

    Thread-safe: one poll at a time; readers get the :class:`RunLog` objects, replaced
    frames and all, never a half-folded one.

    >>> import tempfile
    >>> Follower(Store(tempfile.mkdtemp())).poll()
    []
    """

    def __init__(self, store: Store):
        self.store = store
        self.runs: dict[str, RunLog] = {}  # by nonce
        self.polls = 0
        self.segments_read = 0
        self._listings = Listings(store.path() if rootfs.is_local(store.fs) else None)
        self._seen: dict[tuple[str, str], object] = {}  # the last poll's listing, by run
        self._lock = threading.Lock()

    def poll(self) -> list[RunLog]:
        """List the log, read the segments not read before, and return the runs that changed."""
        with self._lock:
            return retry_vanished(self._poll)

    def _poll(self) -> list[RunLog]:
        self.polls += 1
        listed = list_runs(self.store.fs, self.store.path(), listings=self._listings)
        # a run folder whose listing is the very tuple seen last poll (a ctime-proven listing) is unchanged
        everything, seen = listed, self._seen
        if seen.keys() == listed.keys():
            listed = {run: paths for run, paths in listed.items() if paths is not seen[run]}
        new: dict[str, list[str]] = {}
        changed = {}
        for (name, nonce), paths in listed.items():
            run = self.runs.get(nonce)
            if run is None:
                run = self.runs[nonce] = RunLog(name, nonce)
            elif name != run.name and name not in run.shared:  # a nonce collision: named, never merged silently
                run.shared += (name,)
                run.version += 1
                changed[nonce] = run
            fresh = [p for p in paths if p not in run.segments and p not in run.unreadable]
            if fresh:
                new.setdefault(nonce, []).extend(fresh)
        if new:
            # one fold of every changed run together: the new records on top of the kept ones
            kept = [self.runs[n].rows.with_columns(pl.lit(n).alias("nonce")) for n in new if self.runs[n].rows.height]
            both = pl.concat([*kept, self._read(new)], how="vertical_relaxed")
            folded = latest_records(both.lazy()).collect().sort("nonce", "seq", "key")
            facts = facts_of(folded)
            frames = folded.partition_by("nonce", as_dict=True, include_key=False)
            for nonce, paths in new.items():
                run = self.runs[nonce]
                paths = [p for p in paths if p not in run.unreadable]
                run.rows, run.facts = frames.get((nonce,), EMPTY), facts.get(nonce, NO_FACTS)
                run.version += 1  # a run with only unreadable new segments changes too: its row shows them
                run.segments.update(paths)
                self.segments_read += len(paths)
                changed[nonce] = run
        touched = {nonce for _, nonce in listed}
        published: dict[str, set[str]] = {}  # by nonce: two names sharing a nonce keep both their segments
        for (name, nonce), paths in everything.items():
            if nonce in touched:
                published.setdefault(nonce, set()).update(paths)
        for nonce, paths in published.items():  # retired segments (a compaction) are forgotten
            run = self.runs[nonce]
            run.segments.intersection_update(paths)
            if run.unreadable.keys() - paths:  # an unreadable segment removed: the run's row changes
                run.unreadable = {p: why for p, why in run.unreadable.items() if p in paths}
                run.version += 1
                changed[nonce] = run
        self._seen = everything  # only once this poll is applied: a retried poll compares with the last whole one
        return list(changed.values())

    def _read(self, new: dict[str, list[str]]) -> pl.DataFrame:
        """The records of the segments ``new`` (by nonce), with a nonce column; a segment that cannot be read (not a
        regular file, truncated, damaged) goes to its run's ``unreadable`` with a warning naming it, and
        costs only that run: the others are read whole."""
        paths = [p for run in new.values() for p in run]
        try:
            frame = scan(self.store.fs, paths).select([*KEEP, "nonce"]).collect()
        except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
            if vanished(e):
                raise
            frame = pl.concat([self._read_run(nonce, run) for nonce, run in new.items()], how="vertical_relaxed")
        return frame

    def _read_run(self, nonce: str, paths: list[str]) -> pl.DataFrame:
        """The records of one run's segments ``paths``, one segment at a time, leaving out (and noting
        in the run's ``unreadable``) each that cannot be read."""
        parts = [EMPTY.with_columns(pl.lit(None, pl.String).alias("nonce"))]
        for path in paths:
            try:
                parts.append(scan(self.store.fs, [path]).select([*KEEP, "nonce"]).collect())
            except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
                if vanished(e):
                    raise
                why = str(e) if isinstance(e, CorruptSegment) else f"corrupt or truncated segment {path}: {e}"
                self.runs[nonce].unreadable[path] = why
                warnings.warn(f"run {self.runs[nonce].label}: {why}", UnreadableRun, stacklevel=2)
        return pl.concat(parts, how="vertical_relaxed")

    def run(self, nonce: str) -> RunLog:
        """The run ``nonce`` as last polled; a KeyError naming it when the root has no such run.

        >>> import tempfile
        >>> Follower(Store(tempfile.mkdtemp())).run("abcdef")
        Traceback (most recent call last):
        ...
        KeyError: 'no run with nonce abcdef in this root'
        """
        if nonce not in self.runs:
            raise KeyError(f"no run with nonce {nonce} in this root")
        run = self.runs[nonce]
        if run.shared:  # several runs under one nonce: the page of one of them cannot be told apart
            raise AmbiguousNonce(ambiguous(nonce, sorted((run.name, *run.shared))))
        return run


class PerVersion:
    """``fn(run)`` worked out once per version of each run (runs change only when new records land).

    >>> keys = PerVersion(lambda run: run.keys())
    >>> keys.union([RunLog("a", "abcdef")])
    []
    """

    def __init__(self, fn):
        self.fn = fn
        self._cache: dict[str, tuple[int, object]] = {}

    def get(self, run: RunLog):
        """``fn(run)``, from the cache while the run is unchanged."""
        hit = self._cache.get(run.nonce)
        if hit is None or hit[0] != run.version:
            hit = self._cache[run.nonce] = (run.version, self.fn(run))
        return hit[1]

    def union(self, runs) -> list:
        """The sorted union of ``fn(run)`` (an iterable) over ``runs``."""
        found: set = set()
        for run in runs:
            found.update(self.get(run))
        return sorted(found)
