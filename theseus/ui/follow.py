"""Following a root's log: list each run's segments and keep, per run, its summary (the node count,
last write, latest status, job and main metrics: what the runs table shows), not its records.

A :class:`Follower` answers the runs table from the store's run summaries (``Store.summaries``: the
compacted view's summary entry, else the segments' footers; no block read where those answer), so
starting on a root costs what ``Store.runs()`` costs, whatever its records. A run's records are read
when something needs them (its page, its charts, a column the summaries do not hold) into a bounded
cache (``theseus.ui.records``). Each poll costs one listing of the log folders (local listings are
reused while their ctime proves them current) plus the footers of the runs whose segments changed.
A run holding a segment that cannot be read is read segment by segment, that file left out and named.

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
>>> [run.nonce for run in changed], changed[0].latest("train/loss"), changed[0].values("train/loss")
(['...'], 1.5, {0: 2.0, 1: 1.5})
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field

import polars as pl

from theseus.errors import NotFound
from theseus.store import Store, schema
from theseus.store import fs as rootfs
from theseus.store.listing import Listings, list_runs, retry_vanished, vanished
from theseus.store.nonces import AmbiguousNonce, ambiguous
from theseus.store.recency import latest_rows
from theseus.store.segments import CorruptSegment
from theseus.store.summary import MARKS, SUMMARY_KEYS, Summary, UnreadableRun
from theseus.ui.records import EMPTY, Records, latest_value, read_segments

# the latest values a run's records answer at once (the table's columns, its config and failure)
FACT_KEYS = frozenset({schema.JOB, schema.STATUS, schema.FINISHED, schema.ERROR, schema.CONFIG, "train/loss",
                       "val/loss", "train/tokens", schema.TAGS, schema.NOTE, schema.HIDDEN})
NUMERIC = ("int", "float", "bool")  # read types a chart can draw


@dataclass(frozen=True)
class Facts:
    """What the runs table and the charts' key list need of a run: the last write stamp, the node
    count, the last seq, the latest value of some keys (``covered``: the keys whose latest value is
    in ``latest`` whenever the run logged them), its keys and its numeric user keys.

    >>> NO_FACTS.nodes, NO_FACTS.latest
    (0, {})
    """

    written: int = 0
    nodes: int = 0
    last_seq: int | None = None
    latest: dict = field(default_factory=dict)
    keys: frozenset = frozenset()
    numeric: frozenset = frozenset()
    covered: frozenset = FACT_KEYS


NO_FACTS = Facts()


def summary_facts(summary: Summary) -> Facts:
    """The :class:`Facts` of a run's store summary (``theseus.store.summary``).

    >>> facts = summary_facts(Summary(3, 2, 7, {"train/loss": (1.5, 7, "w")}, {"train/loss": "float", "_job": "str"}))
    >>> facts.nodes, facts.last_seq, facts.latest, sorted(facts.numeric)
    (3, 2, {'train/loss': 1.5}, ['train/loss'])
    """
    return Facts(summary.written, summary.nodes, summary.last_seq if summary.nodes else None,
                 {key: record[0] for key, record in summary.latest.items()}, frozenset(summary.keys),
                 frozenset(k for k, t in summary.keys.items() if t in NUMERIC and not k.startswith("_")),
                 frozenset(SUMMARY_KEYS))


def facts_of(folded: pl.DataFrame) -> Facts:
    """The :class:`Facts` of one run's folded records.

    >>> frame = EMPTY.vstack(pl.DataFrame({"node": ["n"], "seq": [0], "parent": [None], "stamp": [5], "writer": ["w"],
    ...     "key": ["train/loss"], "float": [1.5], "int": [None], "bool": [None], "str": [None]}, schema=EMPTY.schema))
    >>> facts = facts_of(frame)
    >>> facts.nodes, facts.latest, sorted(facts.numeric)
    (1, {'train/loss': 1.5}, ['train/loss'])
    """
    if folded.height == 0:
        return NO_FACTS
    keys = frozenset(folded["key"].unique().to_list())
    numbers = folded.filter(~pl.col("key").str.starts_with("_") & pl.any_horizontal(
        pl.col(c).is_not_null() for c in NUMERIC))
    # the last write of the run's own records, as its store summary counts it: marks leave it alone
    own = folded.filter(~pl.col("key").is_in(MARKS))["stamp"]
    written = int(own.max()) if own.len() else int(folded["stamp"].max())
    return Facts(written, folded["seq"].n_unique(), int(folded["seq"].max()),
                 {key: latest_value(folded, key) for key in FACT_KEYS & keys}, keys,
                 frozenset(numbers["key"].unique().to_list()))


@dataclass(eq=False)
class RunLog:
    """One run as the app knows it: its segments, its :class:`Facts`, and its records on demand.

    ``version`` grows by one each time its segments change, so a client can ask for what changed.
    ``held``: the records of a run kept whole (one holding a segment that cannot be read, or a nonce
    several runs share); any other run's records come from the bounded cache (``records``).

    >>> run = RunLog("a.b.c", "abcdef")
    >>> run.label, run.version, run.values("train/loss"), run.latest("_status")
    ('a.b.c:abcdef', 0, {}, None)
    """

    name: str
    nonce: str
    segments: set[str] = field(default_factory=set)
    version: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)  # segment path -> why it cannot be read
    facts: Facts = field(default_factory=lambda: NO_FACTS)
    shared: tuple[str, ...] = ()  # the other names whose records are under this nonce (a collision)
    held: pl.DataFrame | None = field(default=None, repr=False)
    records: Records | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """``name:nonce``, how the app names a run."""
        return f"{self.name}:{self.nonce}"

    @property
    def rows(self) -> pl.DataFrame:
        """The run's folded records (one row per node and key), read when first asked."""
        if self.held is not None:
            return self.held
        return EMPTY if self.records is None else self.records.rows(self)

    def latest(self, key: str):
        """The value of ``key`` in its latest record across the run (by write stamp), or None.

        >>> RunLog("a", "abcdef").latest("_status") is None
        True
        """
        if key in self.facts.latest:
            return self.facts.latest[key]
        if key in self.facts.covered or key not in self.facts.keys:
            return None
        if self.records is None or self.held is not None:
            return latest_value(self.rows, key)
        return self.records.latest(key, [self])[self.nonce]

    def values(self, key: str) -> dict[int, object]:
        """``{seq: value}`` of ``key`` at each node holding it (seq order).

        >>> RunLog("a", "abcdef").values("x")
        {}
        """
        if key not in self.facts.keys:
            return {}
        rows = self.rows.filter(pl.col("key") == key)
        return {row["seq"]: next((row[c] for c in ("float", "int", "bool", "str") if row[c] is not None), None)
                for row in rows.iter_rows(named=True)}

    def keys(self) -> set[str]:
        """The keys this run logged (reserved ones included).

        >>> RunLog("a", "abcdef").keys()
        set()
        """
        return set(self.facts.keys)


class Follower:
    """The runs of one root, each with its summary, refreshed by :meth:`poll`; their records through
    ``records`` (bounded).

    Thread-safe: one poll at a time; readers get :class:`RunLog` objects whose facts are replaced
    whole, never half-updated.

    >>> import tempfile
    >>> Follower(Store(tempfile.mkdtemp())).poll()
    []
    """

    def __init__(self, store: Store, records: Records | None = None):
        self.store = store
        self.records = records or Records(store.fs)
        self.runs: dict[str, RunLog] = {}  # by nonce
        self.polls = 0
        self.segments_read = 0  # segments taken in (summarised from their footers, or read)
        self._listings = Listings(store.path() if rootfs.is_local(store.fs) else None)
        self._seen: dict[tuple[str, str], object] = {}  # the last poll's listing, by run
        self._origins: dict[str, tuple[int, str | None]] = {}  # nonce -> (version, parent id of its first node)
        self._lock = threading.Lock()

    def poll(self) -> list[RunLog]:
        """List the log, take in the runs whose segments changed, and return the runs that changed."""
        with self._lock:
            return retry_vanished(self._poll)

    def _poll(self) -> list[RunLog]:
        self.polls += 1
        listed = list_runs(self.store.fs, self.store.path(), listings=self._listings)
        # a run folder whose listing is the very tuple seen last poll (a ctime-proven listing) is unchanged
        everything, seen = listed, self._seen
        if seen.keys() == listed.keys():
            listed = {run: paths for run, paths in listed.items() if paths is not seen[run]}
        changed = {}
        for name, nonce in listed:
            run = self.runs.get(nonce)
            if run is None:
                run = self.runs[nonce] = RunLog(name, nonce, records=self.records)
            elif name != run.name and name not in run.shared:  # a nonce collision: named, never merged silently
                run.shared += (name,)
                run.version += 1
                changed[nonce] = run
        touched = {nonce for _, nonce in listed}
        published: dict[str, set[str]] = {}  # by nonce: two names sharing a nonce keep both their segments
        for (name, nonce), paths in everything.items():
            if nonce in touched:
                published.setdefault(nonce, set()).update(paths)
        moved = {}
        for nonce, paths in published.items():
            run = self.runs[nonce]
            if paths != run.segments | run.unreadable.keys():
                self.segments_read += len(paths - run.segments - run.unreadable.keys())
                moved[nonce] = sorted(paths)
        asked = {(self.runs[n].name, n): paths for n, paths in moved.items() if not self.runs[n].shared}
        summarised = self.store.summaries(asked)[0] if asked else {}
        for nonce, paths in moved.items():
            run = self.runs[nonce]
            summary = summarised.get((run.name, nonce))
            if summary is not None:
                run.facts, run.held, run.unreadable, run.segments = summary_facts(summary), None, {}, set(paths)
            else:  # a segment that cannot be read, or several names under the nonce: its records read whole
                self._hold(run, paths)
            run.version += 1
            changed[nonce] = run
        self._seen = everything  # only once this poll is applied: a retried poll compares with the last whole one
        return list(changed.values())

    def _hold(self, run: RunLog, paths: list[str]) -> None:
        """Read ``run``'s segments ``paths`` whole, each that cannot be read left out and named in the run's
        ``unreadable``; its facts from its records."""
        frame, unreadable = read_segments(self.store.fs, paths, run.label)
        rows = latest_rows(frame.lazy(), ["node", "key"]).collect().sort("seq", "key")
        run.held, run.facts, run.unreadable = rows, facts_of(rows), unreadable
        run.segments = set(paths) - unreadable.keys()

    def run(self, nonce: str) -> RunLog:
        """The run ``nonce`` as last polled; `theseus.errors.NotFound` naming it when the root has no such run.

        >>> import tempfile
        >>> Follower(Store(tempfile.mkdtemp())).run("abcdef")
        Traceback (most recent call last):
        ...
        theseus.errors.NotFound: no run with nonce abcdef in this root
        """
        if nonce not in self.runs:
            raise NotFound(f"no run with nonce {nonce} in this root")
        run = self.runs[nonce]
        if run.shared:  # several runs under one nonce: the page of one of them cannot be told apart
            raise AmbiguousNonce(ambiguous(nonce, sorted((run.name, *run.shared))))
        return run

    def origins(self) -> dict[str, str | None]:
        """``{nonce: id of the node its first node branched from}`` (None: a fresh lineage) of every run,
        kept per run version: the runs not known yet from one store query over the root (the parent of
        each run's first node), those whose records are held from them.

        >>> import tempfile
        >>> Follower(Store(tempfile.mkdtemp())).origins()
        {}
        """
        missing = [run for n, run in self.runs.items() if self._origins.get(n, (-1,))[0] != run.version]
        # many runs: one query; a few (or runs whose records are held): their records
        queried = self._first_parents() if sum(run.held is None for run in missing) > 1 else None
        for run in missing:
            parent = queried.get(run.nonce) if queried is not None and run.held is None else _first_parent(run.rows)
            self._origins[run.nonce] = (run.version, parent or None)
        return {n: self._origins[n][1] for n in self.runs}

    def _first_parents(self) -> dict[str, str | None]:
        """The parent of each run's first node, from one query of the store's nodes (identity columns only)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnreadableRun)
                frame = (self.store.find().frame(keys=[]).sort("seq").group_by("nonce")
                         .agg(pl.col("parent").first()).collect())
        except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
            if vanished(e):
                raise
            return {n: _first_parent(run.rows) for n, run in self.runs.items()}
        return dict(frame.iter_rows())


def _first_parent(rows: pl.DataFrame) -> str | None:
    """The parent of the first node in folded records (None when it has none)."""
    if rows.height == 0:
        return None
    first = rows.filter((pl.col("seq") == pl.col("seq").min()) & pl.col("parent").is_not_null()
                        & (pl.col("parent") != ""))
    return first["parent"][0] if first.height else None


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
