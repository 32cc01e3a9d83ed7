"""The runs table: one row per run, extra columns (any metric, any config key), conditions and CSV.

A row holds the run's identity, job, status (``theseus.ui.status``), node count, last write
and the latest value (by write stamp, as ``Store.runs()``) of the main metrics. Extra
columns name a logged key (its latest value) or ``config.<dotted key>`` (the value in the
run's latest config). Conditions use the cursor's ``where`` semantics: a run matches when
one of its nodes does; a ``config.`` condition tests the run's config value.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> from theseus.ui.follow import Follower
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.table.run")
>>> with store.writer() as w:
...     w.job(n, "doc/job", "training:\\n  lr: 0.1\\n")
...     w.write(n, {"train/loss": 2.5})
>>> follower = Follower(store); _ = follower.poll()
>>> [row] = rows(follower.runs.values(), extra=["config.training.lr"])
>>> row["name"], row["status"], row["train/loss"], row["config.training.lr"]
('doc.table.run', 'running', 2.5, 0.1)
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Iterable
from typing import Any

import polars as pl
import yaml

from theseus.store import Store, schema
from theseus.store.cursor import OPS, _check_where_type, _unknown_key
from theseus.store.nonces import ambiguous
from theseus.store.reader import value_expr
from theseus.ui.configs import config_value, run_config
from theseus.ui.follow import RunLog
from theseus.ui.status import STALE_AFTER_S, run_status

MAIN_METRICS = ("train/loss", "val/loss", "train/tokens")
CONFIG = "config."
UNREADABLE = "unreadable"  # the status of a run holding a segment that cannot be read
BASE_COLUMNS = ("name", "nonce", "job", "status", "nodes", "last seq", "written")
_CONDITION = re.compile(r"^\s*(\S+?)\s*(==|!=|<=|>=|<|>|\bin\b)\s*(.+?)\s*$")


def row(run: RunLog, extra: Iterable[str] = (), now: int | None = None,
        stale_after_s: float = STALE_AFTER_S) -> dict[str, Any]:
    """The table row of one run (``extra``: more columns, see the module's docstring).

    >>> row(RunLog("a.b.c", "abcdef"), now=0)["status"]
    'running'
    >>> row(RunLog("a.b.c", "abcdef", unreadable={"s-9.parquet": "s-9.parquet is a FIFO"}))["error"]
    's-9.parquet is a FIFO'
    """
    now = time.time_ns() if now is None else now
    facts = run.facts  # worked out when the run was folded
    written = facts.written
    project, group, name = (run.name.split(".", 2) + ["", ""])[:3]
    found = {
        "name": run.name, "project": project, "group": group, "run": name, "nonce": run.nonce,
        "job": run.latest(schema.JOB),
        "status": run_status(run.latest(schema.STATUS), run.latest(schema.FINISHED), written, now, stale_after_s),
        "nodes": facts.nodes,
        "last seq": facts.last_seq,
        "written": written,
        "error": run.latest(schema.ERROR),
    }
    if run.shared:  # runs under one nonce (a collision): shown as one row that names them all
        found["error"] = ambiguous(run.nonce, sorted((run.name, *run.shared)))
    if run.unreadable:  # a segment that cannot be read: the run is shown, naming the file
        found["status"] = UNREADABLE
        found["error"] = "; ".join(run.unreadable[p] for p in sorted(run.unreadable))
    found.update({key: run.latest(key) for key in MAIN_METRICS})
    config = None
    for key in extra:
        if key.startswith(CONFIG):
            config = run_config(run) if config is None else config
            found[key] = config_value(config, key[len(CONFIG):])
        else:
            found[key] = run.latest(schema.check_user_key(key))
    return found


def rows(runs: Iterable[RunLog], extra: Iterable[str] = (), now: int | None = None,
         stale_after_s: float = STALE_AFTER_S) -> list[dict[str, Any]]:
    """The rows of ``runs``, most recently written first.

    >>> rows([])
    []
    """
    now = time.time_ns() if now is None else now
    extra = list(extra)
    found = [row(run, extra, now, stale_after_s) for run in runs]
    return sorted(found, key=lambda r: (-r["written"], r["name"], r["nonce"]))


class Rows:
    """Table rows computed once per version of each run; only the status (it depends on the clock) is
    worked out again on each call.

    >>> cache = Rows()
    >>> cache.rows([RunLog("a.b.c", "abcdef")], now=0)[0]["status"]
    'running'
    """

    def __init__(self, stale_after_s: float = STALE_AFTER_S):
        self.stale_after_s = stale_after_s
        self._cache: dict[str, tuple[int, tuple, dict, tuple]] = {}  # nonce -> (version, extra, row, status inputs)

    def rows(self, runs: Iterable[RunLog], extra: Iterable[str] = (), now: int | None = None) -> list[dict[str, Any]]:
        """Like :func:`rows`, from the cache where the run has not changed."""
        now = time.time_ns() if now is None else now
        extra = tuple(extra)
        found = []
        for run in runs:
            hit = self._cache.get(run.nonce)
            if hit is None or hit[0] != run.version or hit[1] != extra:
                made = row(run, extra, now, self.stale_after_s)
                inputs = (run.latest(schema.STATUS), run.latest(schema.FINISHED))
                hit = self._cache[run.nonce] = (run.version, extra, made, inputs)
            made = dict(hit[2])
            if made["status"] != UNREADABLE:
                made["status"] = run_status(*hit[3], made["written"], now, self.stale_after_s)
            found.append(made)
        return sorted(found, key=lambda r: (-r["written"], r["name"], r["nonce"]))


def parse_condition(text: str) -> tuple[str, str, Any]:
    """``key op value`` (op one of ``== != < <= > >= in``; the value is YAML: a number, a bool, a
    string, a list for ``in``) as a ``(key, op, value)`` triple; a ValueError saying what is wrong.

    >>> parse_condition("train/loss < 3"), parse_condition("config.training.lr in [0.1, 0.01]")
    (('train/loss', '<', 3), ('config.training.lr', 'in', [0.1, 0.01]))
    >>> parse_condition("train/loss ~ 3")
    Traceback (most recent call last):
    ...
    ValueError: cannot read the condition 'train/loss ~ 3': write KEY OP VALUE with OP one of == != < <= > >= in
    """
    match = _CONDITION.match(text)
    if not match:
        raise ValueError(f"cannot read the condition {text!r}: write KEY OP VALUE with OP one of {' '.join(OPS)}")
    key, op, raw = match.groups()
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ValueError(f"cannot read the value {raw!r} of the condition {text!r}: {e}") from None
    if op == "in" and not isinstance(value, list):
        raise ValueError(f"the condition {text!r} needs a list after 'in', e.g. [1, 2]")
    return key, op, value


def matching(store: Store, runs: dict[str, RunLog], conditions: Iterable[tuple[str, str, Any]]) -> set[str]:
    """The nonces of the runs meeting every condition: metric conditions through the cursor's
    ``where`` (unknown keys and wrong value types raise its errors), ``config.`` ones on the
    run's config.

    >>> import tempfile
    >>> from theseus.store import Node
    >>> from theseus.ui.follow import Follower
    >>> store = Store(tempfile.mkdtemp())
    >>> a, b = Node.start("doc.m.a"), Node.start("doc.m.b")
    >>> with store.writer() as w:
    ...     w.write(a, {"train/loss": 1.0}); w.write(b, {"train/loss": 3.0})
    >>> follower = Follower(store); _ = follower.poll()
    >>> matching(store, follower.runs, [("train/loss", "<", 2)]) == {a.nonce}
    True
    """
    keep = set(runs)
    for key, op, value in conditions:
        if key.startswith(CONFIG):
            keep = {n for n in keep if _holds(config_value(run_config(runs[n]), key[len(CONFIG):]), op, value)}
        else:
            found = store.find().where(key, op, tuple(value) if op == "in" else value).frame(keys=[key])
            keep &= set(found.select("nonce").unique().collect()["nonce"].to_list())
    return keep


class HeldValues:
    """The values of a key at each node of a run, from the records the server holds (``RunLog.rows``),
    worked out once per version of the run and key: what ``/api/filter`` tests conditions on,
    with no read of the store.

    >>> held = HeldValues()
    >>> held.of(RunLog("a", "abcdef"), "train/loss")
    (None, [])
    """

    def __init__(self):
        self._cache: dict[tuple[str, str], tuple[int, str | None, list]] = {}  # (nonce, key) -> (version, kind, values)
        self._configs: dict[str, tuple[int, dict]] = {}  # nonce -> (version, flattened config)

    def of(self, run: RunLog, key: str) -> tuple[str | None, list]:
        """``(type, values)`` of ``key`` at each node of ``run`` holding it (type None: it holds none)."""
        hit = self._cache.get((run.nonce, key))
        if hit is None or hit[0] != run.version:
            rows = run.rows.filter(pl.col("key") == key)
            kind, values = None, []
            for column in ("str", "bool", "int", "float"):  # the widest type the run holds the key as
                if rows.height and rows[column].null_count() < rows.height:
                    kind = column if kind is None else schema.merge_types(kind, column)
            if kind is not None:
                values = rows.select(value_expr(kind)).to_series().drop_nulls().to_list()
            hit = self._cache[(run.nonce, key)] = (run.version, kind, values)
        return hit[1], hit[2]

    def config(self, run: RunLog) -> dict[str, Any]:
        """The run's flattened config (:func:`run_config`), parsed once per version."""
        hit = self._configs.get(run.nonce)
        if hit is None or hit[0] != run.version:
            hit = self._configs[run.nonce] = (run.version, run_config(run))
        return hit[1]


def held_matching(runs: dict[str, RunLog], conditions: Iterable[tuple[str, str, Any]], held: HeldValues,
                  known: Iterable[str]) -> set[str]:
    """Like :func:`matching`, from the records the server holds: a run meets a metric condition when
    one of its nodes does (the cursor's ``where`` errors for a key none of ``known`` (the keys logged)
    names or a value of the wrong type); a ``config.`` one tests the run's config.

    >>> import tempfile
    >>> from theseus.store import Node
    >>> from theseus.ui.follow import Follower
    >>> store = Store(tempfile.mkdtemp())
    >>> a, b = Node.start("doc.h.a"), Node.start("doc.h.b")
    >>> with store.writer() as w:
    ...     w.write(a, {"train/loss": 1.0}); w.write(b, {"train/loss": 3.0})
    >>> follower = Follower(store); _ = follower.poll()
    >>> held_matching(follower.runs, [("train/loss", "<", 2)], HeldValues(), ["train/loss"]) == {a.nonce}
    True
    """
    keep = set(runs)
    known = set(known)
    for key, op, value in conditions:
        if key.startswith(CONFIG):
            keep = {n for n in keep if _holds(config_value(held.config(runs[n]), key[len(CONFIG):]), op, value)}
            continue
        schema.check_user_key(key)
        if key not in known:
            _unknown_key(key, dict.fromkeys(known, "float"))
        for kind in {runs[n].facts.types[key] for n in keep if key in runs[n].facts.types}:
            _check_where_type(key, kind, op, tuple(value) if op == "in" else value)
        keep = {n for n in keep if _run_holds(runs[n], key, op, value, held)}
    return keep


def _run_holds(run: RunLog, key: str, op: str, value: Any, held: HeldValues) -> bool:
    """Whether a node of ``run`` meets ``key op value``: from the key's range where that answers (an
    order on numbers; a value outside the range is never equal), else from its values."""
    kind = run.facts.types.get(key)
    if kind is None:
        return False
    if kind in ("int", "float"):
        if key not in run.facts.ranges:
            return False  # NaN alone: it never compares
        lo, hi = run.facts.ranges[key]
        if op in ("<", "<=", ">", ">="):
            return {"<": lo < value, "<=": lo <= value, ">": hi > value, ">=": hi >= value}[op]
        if op == "==" and not lo <= value <= hi or op == "in" and not any(lo <= v <= hi for v in value):
            return False
    return any(_node_holds(v, op, value) for v in held.of(run, key)[1])


def _node_holds(have: Any, op: str, value: Any) -> bool:
    """Whether one node's value meets ``op value`` (NaN never does, as in the cursor's ``where``)."""
    if op == "in":
        return have in value
    try:
        return {"==": have == value, "!=": have != value, "<": have < value, "<=": have <= value, ">": have > value,
                ">=": have >= value}[op]
    except TypeError:
        return False


def _holds(have: Any, op: str, value: Any) -> bool:
    if have is None:
        return False
    if op == "in":
        return have in value
    if op in ("==", "!="):
        return (have == value) == (op == "==")
    try:
        return {"<": have < value, "<=": have <= value, ">": have > value, ">=": have >= value}[op]
    except TypeError:
        raise ValueError(f"cannot compare the config value {have!r} with {value!r} ({op})") from None


def to_csv(table: list[dict[str, Any]], columns: list[str]) -> str:
    """The rows as CSV text with a header of ``columns`` (empty cells for missing values).

    >>> to_csv([{"name": "a", "train/loss": 1.5}], ["name", "train/loss"]).splitlines()
    ['name,train/loss', 'a,1.5']
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for item in table:
        writer.writerow(["" if item.get(c) is None else item.get(c) for c in columns])
    return out.getvalue()
