"""The runs table: one row per run, extra columns (any metric, any config key), conditions and CSV.

A row holds the run's identity, job, status (``theseus.ui.status``), node count, last write,
its marks (tags, note, hidden: ``theseus.store.marks``) and the latest value (by write stamp,
as ``Store.runs()``) of the main metrics. Extra
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
import dataclasses
import io
import re
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import yaml

from theseus.errors import BadInput
from theseus.store import Store, marks, schema
from theseus.store.cursor import OPS, UnknownKey
from theseus.store.nonces import ambiguous
from theseus.store.segments import CorruptSegment
from theseus.ui.configs import config_value, run_config
from theseus.ui.follow import RunLog
from theseus.ui.status import STALE_AFTER_S, run_status

MAIN_METRICS = ("train/loss", "val/loss", "train/tokens")
CONFIG = "config."
UNREADABLE = "unreadable"  # the status of a run holding a segment that cannot be read
BASE_COLUMNS = ("name", "nonce", "job", "status", "nodes", "last seq", "written")
MAX_CONFIGS = 20_000  # runs' parsed configs kept
NONCE_LENGTH = 6  # hex digits
MAX_CONFIG_KEYS = 16  # dotted config keys whose values are kept per run
CONFIG_CHUNK = 5000  # runs whose configs are read and tested together
_CONDITION = re.compile(r"^\s*(\S+?)\s*(==|!=|<=|>=|<|>|\bin\b)\s*(.+?)\s*$")


def row(run: RunLog, extra: Iterable[str] = (), now: int | None = None,
        stale_after_s: float = STALE_AFTER_S, configs: Configs | None = None) -> dict[str, Any]:
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
        **marks.marks_of({key: run.latest(key) for key in (schema.TAGS, schema.NOTE, schema.HIDDEN)}),
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
            if config is None:
                config = run_config(run) if configs is None else configs.of([run])[run.nonce]
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

    def __init__(self, stale_after_s: float = STALE_AFTER_S, configs: Configs | None = None):
        self.stale_after_s = stale_after_s
        self.configs = configs
        self._cache: dict[str, tuple[int, tuple, dict, tuple]] = {}  # nonce -> (version, extra, row, status inputs)

    def stale(self, runs: Iterable[RunLog], extra: Iterable[str] = ()) -> list[RunLog]:
        """The runs among ``runs`` whose rows (with columns ``extra``) are not in the cache as they are now.

        >>> Rows().stale([RunLog("a.b.c", "abcdef")])[0].nonce
        'abcdef'
        """
        extra = tuple(extra)
        return [run for run in runs if (hit := self._cache.get(run.nonce)) is None or hit[0] != run.version
                or hit[1] != extra]

    def rows(self, runs: Iterable[RunLog], extra: Iterable[str] = (), now: int | None = None) -> list[dict[str, Any]]:
        """Like :func:`rows`, from the cache where the run has not changed."""
        now = time.time_ns() if now is None else now
        extra = tuple(extra)
        found = []
        for run in runs:
            hit = self._cache.get(run.nonce)
            if hit is None or hit[0] != run.version or hit[1] != extra:
                made = row(run, extra, now, self.stale_after_s, self.configs)
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
    theseus.errors.BadInput: cannot read the condition 'train/loss ~ 3': write KEY OP VALUE with OP one of == ...
    """
    match = _CONDITION.match(text)
    if not match:
        raise BadInput(f"cannot read the condition {text!r}: write KEY OP VALUE with OP one of {' '.join(OPS)}")
    key, op, raw = match.groups()
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise BadInput(f"cannot read the value {raw!r} of the condition {text!r}: {e}") from None
    if op == "in" and not isinstance(value, list):
        raise BadInput(f"the condition {text!r} needs a list after 'in', e.g. [1, 2]")
    return key, op, value


def matching(store: Store, runs: dict[str, RunLog], conditions: Iterable[tuple[str, str, Any]],
             configs: Configs | None = None) -> set[str]:
    """The nonces of the runs meeting every condition: a metric condition by one query of the store
    (the cursor's ``where`` over the whole root, read for the distinct runs: unknown keys and wrong value
    types raise its errors), a ``config.`` one on each run's config (``configs``: parsed once per version).

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
    configs = configs or Configs()
    conditions = list(conditions)
    keep = set(runs)
    for key, op, value in conditions:  # the store's conditions first: they raise on a bad key or value
        if not key.startswith(CONFIG):
            keep &= store_matching(store, key, op, tuple(value) if op == "in" else value, set(runs))
    for key, op, value in conditions:
        if key.startswith(CONFIG):
            keep = configs.matching([runs[n] for n in sorted(keep)], key[len(CONFIG):], op, value)
    return keep


def store_matching(store: Store, key: str, op: str, value: Any, nonces: set[str], prefix: str = "") -> set[str]:
    """The nonces of the runs (those whose nonce starts with ``prefix``) with a node meeting ``key op value``:
    one cursor query; where a segment cannot be read, the same query over the prefixes one hex digit
    longer that some of ``nonces`` (the runs known) start with, so only the run holding it is left out
    (its row says why).

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store, a = Store(tempfile.mkdtemp()), Node.start("doc.s.a")
    >>> with store.writer() as w:
    ...     w.write(a, {"train/loss": 1.0})
    >>> store_matching(store, "train/loss", "<", 2, {a.nonce}) == {a.nonce}
    True
    """
    cursor = dataclasses.replace(store.find(), nonce_glob=prefix + "*") if prefix else store.find()
    try:
        found = cursor.where(key, op, value).frame(keys=[key]).select("nonce").unique().collect()
        return set(found["nonce"].to_list())
    except CorruptSegment:
        if len(prefix) == NONCE_LENGTH:
            return set()  # the run that cannot be read
    found, answered, unknown = set(), False, None
    for longer in sorted({n[:len(prefix) + 1] for n in nonces if n.startswith(prefix)}):
        try:
            found |= store_matching(store, key, op, value, nonces, longer)
            answered = True
        except UnknownKey as e:  # no run under this prefix logged the key
            unknown = e
    if not answered and unknown is not None and not prefix:
        raise unknown
    return found


class Configs:
    """Runs' configs, flattened (:func:`run_config`), parsed once per run version; at most ``most`` kept
    (least recently used out), read ``CONFIG_CHUNK`` runs at a time.

    >>> Configs().of([RunLog("a", "abcdef")])
    {'abcdef': {}}
    """

    def __init__(self, most: int = MAX_CONFIGS):
        self.most = most
        self._cache: OrderedDict[str, tuple[int, dict]] = OrderedDict()  # nonce -> (version, flattened config)
        # the value at a dotted key of each run's config, for the keys conditions named last: a condition typed
        # again (another value, another op) tests those values without reading a config
        self._values: OrderedDict[str, dict[str, tuple[int, Any]]] = OrderedDict()  # key -> nonce -> (version, value)

    def of(self, runs: list[RunLog]) -> dict[str, dict[str, Any]]:
        """``{nonce: flattened config}`` of ``runs`` (at most ``most`` at a time to stay bounded)."""
        found = {}
        for start in range(0, len(runs), CONFIG_CHUNK):
            found.update(self._chunk(runs[start:start + CONFIG_CHUNK]))
        return found

    def matching(self, runs: list[RunLog], key: str, op: str, value: Any) -> set[str]:
        """The nonces of ``runs`` whose config value at dotted ``key`` meets ``op value``.

        >>> Configs().matching([RunLog("a", "abcdef")], "optimization.lr", "==", 0.1)
        set()
        """
        values = self._values.setdefault(key, {})
        self._values.move_to_end(key)
        while len(self._values) > MAX_CONFIG_KEYS:
            self._values.popitem(last=False)
        stale = [run for run in runs if values.get(run.nonce, (-1,))[0] != run.version]
        for start in range(0, len(stale), CONFIG_CHUNK):
            part = stale[start:start + CONFIG_CHUNK]
            flats = self._chunk(part)
            values.update((run.nonce, (run.version, config_value(flats[run.nonce], key))) for run in part)
        return {run.nonce for run in runs if _holds(values[run.nonce][1], op, value)}

    def _chunk(self, runs: list[RunLog]) -> dict[str, dict[str, Any]]:
        missing = [run for run in runs if self._cache.get(run.nonce, (-1,))[0] != run.version]
        batch = [run for run in missing if run.records is not None and run.held is None]
        if batch:  # the config texts of every run not parsed yet, in one scan
            batch[0].records.latest(schema.CONFIG, batch)
        found = {}
        for run in runs:
            hit = self._cache.get(run.nonce)
            if hit is None or hit[0] != run.version:
                hit = self._cache[run.nonce] = (run.version, run_config(run))
            self._cache.move_to_end(run.nonce)
            found[run.nonce] = hit[1]
        while len(self._cache) > self.most:
            self._cache.popitem(last=False)
        return found


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
        raise BadInput(f"cannot compare the config value {have!r} with {value!r} ({op})") from None


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
