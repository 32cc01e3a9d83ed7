"""The writer: buffers records and publishes them as immutable segments.

``write()`` only validates (once per shape of record: keys and value types) and
appends the node, a write stamp, the shape and the values to four lists. A node of
the writer's own lineage made by ``Node.next()`` is kept as its seq alone, so a
training loop's pending records hold no object the garbage collector must walk. A
flush turns the pending records of each run into columns in one vectorized pass
(``build_segment``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import struct
import threading
import time
import weakref
from operator import countOf
from typing import Any, Iterator, Mapping, NamedTuple

import numpy as np
import pyarrow as pa

from theseus.errors import BadInput, TheseusError
from theseus.store import fs as rootfs
from theseus.store import nonces, schema, trust
from theseus.store.fold import ARROW
from theseus.store.index import Index
from theseus.store.latest import entry as latest_entry
from theseus.store.layout import LOG
from theseus.store.listing import retry_vanished, run_dir
from theseus.store.node import _PREVIOUS, Node, lineage_columns
from theseus.store.scope import Scope
from theseus.store.segments import encode, segment_name

_PYTYPE = {float: "float", int: "int", bool: "bool", str: "str"}
_LIVE: weakref.WeakSet[Writer] = weakref.WeakSet()  # registry of open writers, closed in a forked child


class FlushError(TheseusError, RuntimeError):
    """Records that could not be published; they stay pending and the next flush retries them."""


def _closed_in_child() -> None:
    # a forked child holds a copy of the parent's pending records and locks (maybe held by a
    # thread that does not exist here): its writers refuse every call instead of hanging
    for writer in list(_LIVE):
        writer._closed = True


os.register_at_fork(after_in_child=_closed_in_child)


class Shape(NamedTuple):
    """The keys of a record, the log type of each value, and whether any is an int or a str."""

    keys: tuple[str, ...]
    kinds: tuple[str, ...]
    ints: bool = False
    strs: bool = False


class Records(NamedTuple):
    """Records in columns: seqs, the parents not made by ``next()``, write stamps, shapes,
    and all their values one record after another.

    ``set_parents`` is ``{row: parent id, or None}`` for the rows whose parent is not the node one
    seq before (see :func:`~theseus.store.node.lineage_columns`); None when there are none.
    """

    seqs: np.ndarray
    set_parents: dict[int, str | None] | None
    stamps: np.ndarray
    shapes: list[Shape]
    values: list

    def take(self, rows: list[int]) -> Records:
        """The records at ``rows``, in that order.

        >>> s = Shape(("a",), ("float",))
        >>> r = Records(np.array([0, 5]), {0: None}, np.array([1, 2]), [s, s], [0.5, 1.5]).take([1])
        >>> r.seqs.tolist(), r.set_parents, r.values
        ([5], None, [1.5])
        """
        starts = self.starts()
        values = [v for i in rows for v in self.values[starts[i]:starts[i + 1]]]
        parents = self.set_parents
        set_parents = parents and {j: parents[i] for j, i in enumerate(rows) if i in parents}
        return Records(self.seqs[rows], set_parents or None, self.stamps[rows], [self.shapes[i] for i in rows], values)

    def starts(self) -> np.ndarray:
        """Where each record's values start in ``values`` (and where the last one ends)."""
        starts = np.zeros(len(self.shapes) + 1, np.int64)
        np.cumsum([len(shape.keys) for shape in self.shapes], out=starts[1:])
        return starts


_JOB = Shape((schema.JOB, schema.CONFIG, schema.STATUS), ("str", "str", "str"))
_JOB_WITH_SOURCE = Shape((schema.JOB, schema.CONFIG, schema.STATUS, schema.JOB_SOURCE), ("str", "str", "str", "str"))
_STATUS = Shape((schema.STATUS,), ("str",))
_CHECKPOINT = Shape((schema.CHECKPOINT,), ("str",))
_FINISHED = Shape((schema.FINISHED, schema.STATUS), ("bool", "str"))
_FAILED = Shape((schema.FINISHED, schema.STATUS, schema.ERROR), ("bool", "str", "str"))
_CLAIM = Shape((schema.CLAIM,), ("str",))
_ARTIFACTS = Shape((schema.ARTIFACTS,), ("str",))
_TAGS = Shape((schema.TAGS,), ("str",))
_NOTE = Shape((schema.NOTE,), ("str",))
_HIDDEN = Shape((schema.HIDDEN,), ("bool",))
_RETIRED = Shape((schema.RETIRED,), ("str",))


class Writer:
    """Buffered, append-only writer of node records.

    Records are published as one segment per run on ``flush()``, on ``close()``,
    and at least every ``flush_interval`` seconds while records are pending.
    Commit records (``job``, ``checkpoint``, ``finished``, ``failed``) are
    flushed before the call returns.

    ``write()`` refuses a record no flush could publish (a seq beyond int64, a run name
    too long for a folder name, a string that is not valid Unicode, a value whose type
    the key does not hold). A run whose segment still cannot be published (a full or
    read-only disk...) keeps its records pending while the other runs are published; the
    background thread and every later ``flush()`` retry them, and ``close()`` raises a
    :class:`FlushError` until they are published or ``close(discard=True)`` drops them.

    A key has one type for the whole root (int and float mix): the first type published
    wins. A writer that typed a new key before another writer published it with another
    type has that run's flush refused (a :class:`FlushError` naming the key; its records
    stay pending), and its later writes of that key must use the published type. On a
    local root, writers publishing a new key take turns, so two can never both win; on an
    object store (gs://) two flushes at the same instant may still both publish, and the
    key then reads as ``str`` while later writes of either type are accepted.

    Before its first record of a lineage, a writer checks the lineage's nonce in the root
    (``theseus.store.nonces``): a nonce ``Node.start`` drew that another run already holds, or
    a node of another run's nonce, raises ``NonceTaken`` from ``write()`` and nothing is buffered.

    A writer belongs to the process that opened it: in a forked child every call raises,
    except ``close()``, which leaves the pending records to the parent.

    >>> from theseus.store import Store, Node
    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> node = Node.start("doc-run")
    >>> with store.writer() as w:
    ...     w.write(node, {"train/loss": 2.5})
    >>> store.find().nonce(node.nonce).select(keys=["train/loss"])
    [{'train/loss': 2.5}]
    """

    def __init__(self, index: Index, flush_interval: float = 1.0):
        self.index = index  # the root's caches: a flush's key-type check reads its footers
        self.id = secrets.token_hex(4)
        self.flush_interval = flush_interval
        # pending records in columns, only appended to (shape last) and cut from the front
        self._nodes: list[Node | int] = []  # a node of the chain made by next() is kept as its seq
        self._stamps: list[int] = []
        self._shapes: list[Shape] = []
        self._values: list = []  # each record's values, one record after another
        self._flush_lock = threading.Lock()
        self._published: dict[str, set[str]] | None = None  # key -> the types the root holds it with
        self._claimed: dict[str, str] = {}  # key -> the type this writer gave it, not yet seen published
        self._refused: set[str] = set()  # keys of pending records whose type lost to one published meanwhile
        # keys already validated -> (shape, their Python value types; None when all floats)
        self._seen: dict[tuple[str, ...], tuple[Shape, tuple[type, ...] | None]] = {}
        self._interned: dict[Shape, Shape] = {}  # one object per shape, so records compare by identity
        self._last_stamp = 0
        # the lineage of the first node written: its nodes made by next() are pending as seqs
        self._chain_name: str | None = None
        self._chain_nonce: str | None = None
        self._lineages: dict[str, set[str]] = {}  # nonce -> names whose lineage this writer checked in the root
        self._counter = 0
        self._pid = os.getpid()
        self._closed = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._background, name=f"theseus-writer-{self.id}", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    # -- public API -------------------------------------------------------

    def write(self, node: Node, values: Mapping[str, Any]) -> None:
        """Buffer user values (scalars) for ``node``; returns without touching disk."""
        if type(values) is dict and type(node) is Node and not self._closed:
            # a training loop logs the same keys with the same types every step: validate them
            # once, then only check the value types are those seen (for all floats, a count of
            # floats, cheaper than building the types tuple) and append
            new_values = values.values()
            seen = self._seen.get(tuple(values))
            if seen is not None:
                shape, types = seen
                if types is None:
                    same = countOf(map(type, new_values), float) == len(new_values)
                else:
                    same = tuple(map(type, new_values)) == types and (not shape.ints or all(
                        -(2**63) <= v < 2**63 for v, k in zip(new_values, shape.kinds) if k == "int")) and (
                        not shape.strs or all(_utf8(v) for v, k in zip(new_values, shape.kinds) if k == "str"))
                if same:
                    # (_entry inlined: this runs once per training step)
                    chained = (node._parent is _PREVIOUS and node._nonce is self._chain_nonce
                               and node._name is self._chain_name)
                    if not chained:
                        names = self._lineages.get(node._nonce)
                        if names is None or node._name not in names:
                            self._begin(node, None)
                    # each append is atomic; the shape goes last, as a flush counts records by shapes
                    self._values.extend(new_values)
                    self._nodes.append(node._seq if chained else node)
                    self._stamps.append(time.time_ns())  # made strictly increasing at flush
                    self._shapes.append(shape)
                    return
        items = self._check_user(node, values)
        if items:
            shape = self._shape(tuple(k for k, _, _ in items), tuple(t for _, t, _ in items))
            self._append(node, shape, tuple(v for _, _, v in items))
            if type(values) is dict and len(items) == len(values):  # nothing dropped (no None values)
                types = tuple(map(type, values.values()))
                if all(t in _PYTYPE for t in types):
                    self._seen[shape.keys] = (shape, None if all(t is float for t in types) else types)

    def job(self, node: Node, key: str, config_yaml: str, source: str | None = None) -> None:
        """Record the job key and its config (YAML text) for ``node``, and where the job's class came
        from (``source``, ``theseus.experiments.job_source``) when given; durable on return.

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-job")
        >>> with store.writer() as w:
        ...     w.job(node, "mylab/train/mix", "lr: 0.1\\n", source="/home/me/mix.py:Mix")
        >>> record = store.run_record(node.nonce)
        >>> record["_job"], record["_job_source"], record["_status"]
        ('mylab/train/mix', '/home/me/mix.py:Mix', 'running')
        """
        values = (_text("job key", key), _text("config", config_yaml), "running")
        if source is None:
            self._commit(node, _JOB, values)
        else:
            self._commit(node, _JOB_WITH_SOURCE, (*values, _text("job source", source)))

    def status(self, node: Node, status: str) -> None:
        """Buffer a status string (``running``, ``finished``, ``failed``...) for ``node``."""
        self._append(self._check_node(node), _STATUS, (_text("status", status),))

    def checkpoint(self, node: Node, path: str) -> None:
        """Record that ``node`` has a committed checkpoint at root-relative ``path``; durable on return."""
        try:
            trust.checkpoint_path(path)  # the rule resume and audit apply to what they read back
        except ValueError:
            raise BadInput(
                f"checkpoint path must be relative to the root (e.g. 'objects/<id>'), got {path!r}") from None
        self._commit(node, _CHECKPOINT, (_text("checkpoint path", path),))

    def artifacts(self, node: Node, path: str) -> None:
        """Record that ``node``'s artifact folder (root-relative ``path``) holds published files; durable on return.

        Write it after the files are published (commit order); ``theseus gc`` keeps a folder
        such a record names, as it keeps a checkpoint's.

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-artifacts")
        >>> with store.writer() as w:
        ...     w.artifacts(node, f"objects/{node.id}")
        >>> store.record(node)["_artifacts"] == f"objects/{node.id}"
        True
        """
        try:
            trust.checkpoint_path(path)  # the rule every reader of a folder record applies
        except ValueError:
            raise BadInput(
                f"artifact path must be relative to the root (e.g. 'objects/<id>'), got {path!r}") from None
        self._commit(node, _ARTIFACTS, (_text("artifact path", path),))

    def marks(self, node: Node, tags: str | None = None, note: str | None = None,
              hidden: bool | None = None) -> None:
        """Record a person's marks on ``node``'s run (those given): its whole tag set (a JSON list,
        ``theseus.store.marks``), a note, whether it is hidden; durable on return. The latest
        record of each is the run's (``theseus.store.marks`` reads and writes them).

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-marks")
        >>> with store.writer() as w:
        ...     w.marks(node, tags='["baseline"]', note="first try", hidden=True)
        >>> record = store.run_record(node.nonce)
        >>> record["_tags"], record["_note"], record["_hidden"]
        ('["baseline"]', 'first try', True)
        """
        self._check_node(node)
        if hidden is not None and not isinstance(hidden, bool):
            raise TypeError(f"hidden must be a bool, got {hidden!r}")
        given = [(shape, value if shape is _HIDDEN else _text(shape.keys[0], value))
                 for shape, value in ((_TAGS, tags), (_NOTE, note), (_HIDDEN, hidden)) if value is not None]
        for shape, value in given:  # appended once all are valid: none or all of them
            self._append(node, shape, (value,))
        self.flush()

    def retire(self, node: Node, reason: str) -> None:
        """Record that ``node``'s checkpoint is retired (``reason``: the rule that retired it); durable on return.

        Final: ``.checkpoint()`` no longer matches the node, nothing restores it, and its folder
        may be deleted once this returns (``theseus gc`` deletes one left behind).

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-retire")
        >>> with store.writer() as w:
        ...     w.checkpoint(node, f"objects/{node.id}"); w.retire(node, "keep_checkpoints=1")
        >>> store.record(node)["_retired"], store.find().checkpoint().all()
        ('keep_checkpoints=1', [])
        """
        self._commit(self._check_node(node), _RETIRED, (_text("retire reason", reason),))

    def finished(self, node: Node) -> None:
        """Mark the run finished at ``node``; durable on return."""
        self._commit(node, _FINISHED, (True, "finished"))

    def failed(self, node: Node, error: str) -> None:
        """Mark the run failed at ``node`` with the error text (characters that are not valid
        Unicode escaped, so a failure is always recorded); durable on return."""
        text = str(error).encode("utf-8", "backslashreplace").decode("utf-8")
        self._commit(node, _FAILED, (False, "failed", text))

    def begin(self, node: Node) -> None:
        """Start ``node``'s lineage in the root as a new one: claim its nonce, raising
        ``theseus.store.nonces.NonceTaken`` (nothing written) when any lineage there holds it.

        A writer checks every lineage before its first record of it (a nonce that
        ``Node.start`` drew must be new to the root, a node built from a name and nonce must
        not be another name's); a job calls this for its first node whatever drew its nonce,
        and draws again when it is taken.

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-begin")
        >>> with store.writer() as w, store.writer() as other:
        ...     w.begin(node)
        ...     try:
        ...         other.begin(node)
        ...     except ValueError as e:
        ...         print(type(e).__name__)
        NonceTaken
        """
        self._check_node(node)
        self._begin(node, True)

    def claim(self, node: Node) -> None:
        """Record this writer's claim to continue ``node``'s lineage from ``node`` on; durable on return.

        A resume claims its first node (``theseus.store.claim``); the record holds the writer's id.

        >>> import tempfile
        >>> from theseus.store import Store
        >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-claim")
        >>> with store.writer() as w:
        ...     w.claim(node)
        ...     store.record(node)["_claim"] == w.id
        True
        """
        self._commit(node, _CLAIM, (self.id,))

    def flush(self) -> None:
        """Publish every pending record; durable when this returns.

        A run that cannot be published keeps its records pending (the other runs are
        published) and this raises a :class:`FlushError` naming it; the next flush retries.
        """
        self._check_process()
        with self._flush_lock:
            n = len(self._shapes)  # records appended meanwhile stay for the next flush
            if not n:
                return
            shapes = self._shapes[:n]
            width = len(shapes[0].keys) * n if shapes.count(shapes[0]) == n else sum(len(s.keys) for s in shapes)
            columns = (self._nodes, self._stamps, self._shapes, self._values)
            taken = [column[:count] for column, count in zip(columns, (n, n, n, width))]
            for column, count in zip(columns, (n, n, n, width)):
                del column[:count]
            kept: list[int] = []  # rows of the runs not published
            try:
                errors = self._publish(*taken, kept=kept)
            finally:
                if kept:
                    self._keep(taken, sorted(kept))
            if errors:
                raise FlushError("; ".join(errors)) from errors[next(iter(errors))]

    def close(self, discard: bool = False) -> None:
        """Flush and stop the background thread; idempotent once every record is published.

        While some records cannot be published this raises a :class:`FlushError` and keeps
        them: call ``close()`` again to retry, or ``close(discard=True)`` to drop them.

        >>> from theseus.store import Store, Node
        >>> import tempfile
        >>> store = Store(tempfile.mkdtemp())
        >>> w = store.writer()
        >>> w.write(Node.start("doc-run"), {"loss": 1.0})
        >>> w.close(discard=True)  # the pending record is dropped, nothing is published
        >>> store.find().all()
        []
        """
        if os.getpid() != self._pid:  # a forked child: the pending records are the parent's to publish
            return
        if not self._closed:
            self._closed = True
            self._wake.set()
            self._thread.join()
        if discard:
            with self._flush_lock:
                for column in (self._shapes, self._stamps, self._nodes, self._values):
                    column.clear()
                self._refused.clear()
            return
        self.flush()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this writer was opened in process {self._pid} and inherited by process {os.getpid()} through a "
                "fork: open a new store.writer() in this process (the parent publishes its own records)")

    def _check_node(self, node: Node) -> Node:
        self._check_process()
        if not isinstance(node, Node):
            raise TypeError(f"expected a Node, got {type(node).__name__}")
        if self._closed:
            raise RuntimeError("writer is closed")
        return node

    def _check_user(self, node: Node, values: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
        self._check_node(node)
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping of key to scalar, got {type(values).__name__}")
        published = self._published_types()
        items = []
        for key, value in values.items():
            if value is None:
                continue
            kind = _PYTYPE.get(type(value))
            if kind is None or (key not in published and key not in self._claimed) or kind == "int":
                schema.check_user_key(key)
                kind = schema.value_type(key, value, f"store.objects(node) = {self.index.url('objects', node.id)}")
                value = schema.to_python(kind, value)
            if kind == "str":
                _text(f"value of {key!r}", value)
            prior = published.get(key) or ({self._claimed[key]} if key in self._claimed else ())
            if prior and not any(schema.compatible(p, kind) for p in prior):
                raise BadInput(f"key {key!r} holds {' or '.join(sorted(prior))} values; got {kind} {value!r}")
            items.append((key, kind, value))
        for key, kind, _ in items:  # only once the whole record is valid
            if key not in published:
                self._claimed.setdefault(key, kind)
        return items

    def _published_types(self, fresh: bool = False) -> dict[str, set[str]]:
        """``{key: types}`` of the user keys in the root, read once (again with ``fresh``)."""
        if self._published is None or fresh:
            # a segment that cannot be read adds no types: one bad file stops no writer of the root
            types = retry_vanished(lambda: Scope(self.index).type_sets(skip_unreadable=True))
            self._published = {k: t for k, t in types.items() if not k.startswith("_")}
        return self._published

    def _shape(self, keys: tuple[str, ...], kinds: tuple[str, ...]) -> Shape:
        shape = Shape(keys, kinds, "int" in kinds, "str" in kinds)
        return self._interned.setdefault(shape, shape)

    def _entry(self, node: Node) -> Node | int:
        """What a pending record keeps of its node: the seq alone for a node of the chain made by next()."""
        if self._chain_nonce is None:  # set once, before any seq refers to it
            self._chain_name = node.name
            self._chain_nonce = node.nonce
        if node._parent is _PREVIOUS and node._nonce is self._chain_nonce and node._name is self._chain_name:
            return node._seq
        return node

    def _append(self, node: Node, shape: Shape, values: tuple) -> None:
        names = self._lineages.get(node._nonce)
        if names is None or node._name not in names:
            self._begin(node, None)
        self._values.extend(values)
        self._nodes.append(self._entry(node))
        self._stamps.append(time.time_ns())
        self._shapes.append(shape)

    def _begin(self, node: Node, fresh: bool | None) -> None:
        """Check (and claim when new) ``node``'s lineage in the root before its first record here."""
        nonces.begin(self.index, self.id, node.name, node.nonce, fresh)
        self._lineages.setdefault(node.nonce, set()).add(node.name)

    def _commit(self, node: Node, shape: Shape, values: tuple) -> None:
        self._append(self._check_node(node), shape, values)
        self.flush()

    def _background(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval)
            if self._closed:
                return
            if self._shapes:
                try:
                    self.flush()
                except Exception:  # noqa: BLE001 - the records stay pending: retried next interval, raised by flush() and close()
                    pass

    def _keep(self, taken: list[list], rows: list[int]) -> None:
        """Put the records at ``rows`` of a flush's ``taken`` columns back in front of the pending ones."""
        entries, clock, shapes, values = taken
        starts = Records(None, None, None, shapes, values).starts()
        self._values[:0] = [v for i in rows for v in values[starts[i]:starts[i + 1]]]
        self._nodes[:0] = [entries[i] for i in rows]
        self._stamps[:0] = [clock[i] for i in rows]
        self._shapes[:0] = [shapes[i] for i in rows]

    def _publish(self, entries: list[Node | int], clock: list[int], shapes: list[Shape], values: list,
                 kept: list[int]) -> dict[str, Exception]:
        """Publish one segment per run; adds the rows of the runs not published to ``kept``
        and returns ``{message: error}`` for each of them."""
        # write stamps strictly increase in record order across the writer's life:
        # s[i] = max(clock[i], s[i - 1] + 1), as a running maximum of clock[i] - i
        steps = np.arange(len(entries))
        lifted = np.fromiter(clock, np.int64, len(clock)) - steps
        lifted[0] = max(lifted[0], self._last_stamp + 1)
        stamps = np.maximum.accumulate(lifted) + steps
        seqs, set_parents, rows_of = split_runs(entries, (self._chain_name, self._chain_nonce))
        records = Records(seqs, set_parents, stamps, shapes, values)
        fs, root = self.index.fs, self.index.path()
        todo = [(run, list(range(len(entries))) if rows is None else rows) for run, rows in rows_of.items()]
        errors: dict[str, Exception] = {}
        try:
            with self._types_turn(todo, shapes) as conflicts:
                while todo:
                    (name, nonce), rows = todo[0]
                    run_records = records if len(todo) == 1 and len(rows) == len(entries) else records.take(rows)
                    try:
                        if (name, nonce) in conflicts:
                            raise conflicts[name, nonce]
                        table, keys, index = build_segment(run_records, name, nonce, self.id)
                        self._counter += 1  # before publishing: a retried flush never reuses a name
                        path = (f"{run_dir(root, name, nonce)}/"
                                f"{segment_name(int(run_records.stamps[-1]), self.id, self._counter)}")
                        rootfs.publish(fs, path, encode(table, keys, index, codec="lz4"))
                        self._published_now(keys)
                    except Exception as e:
                        kept += rows
                        errors[f"{len(rows)} record(s) of run {name} nonce {nonce} not published, kept pending "
                               f"(flush retries them, close(discard=True) drops them): {type(e).__name__}: {e}"] = e
                    todo.pop(0)
        finally:
            for _, rows in todo:  # interrupted: the runs not reached stay pending too
                kept += rows
        self._last_stamp = int(stamps[-1])
        return errors

    @contextlib.contextmanager
    def _types_turn(self, todo: list, shapes: list[Shape]) -> Iterator[dict[tuple[str, str], Exception]]:
        """Yields ``{run: error}`` for the runs of ``todo`` that hold a key with another type than the
        one published meanwhile; while the runs introduce keys, holds this root's turn to do so."""
        if not (self._claimed or self._refused):
            yield {}
            return
        with _root_turn(self.index) if self._claimed else contextlib.nullcontext():
            published = self._published_types(fresh=bool(self._claimed))
            conflicts = {}
            for run, rows in todo:
                used = {id(shapes[i]): shapes[i] for i in rows}.values()
                for key, kind in {(k, t) for shape in used for k, t in zip(shape.keys, shape.kinds)}:
                    prior = published.get(key)
                    if prior and not any(schema.compatible(p, kind) for p in prior):
                        conflicts[run] = TypeError(
                            f"key {key!r} was published as {' or '.join(sorted(prior))} by another writer since this "
                            f"writer gave it {kind} values: the first type published wins")
                        self._refused.add(key)
                        self._claimed.pop(key, None)
                        self._seen.clear()  # later writes are checked against the published type
            yield conflicts

    def _published_now(self, keys: dict[str, str]) -> None:
        """Note the keys of a segment just published: their types are the root's now."""
        if self._published is None:  # no user write has read the root's types yet
            return
        for key, kind in keys.items():
            if not key.startswith("_"):
                self._published.setdefault(key, set()).add(kind)
                self._claimed.pop(key, None)


@contextlib.contextmanager
def _root_turn(index: Index) -> Iterator[None]:
    """Hold the root's turn to publish new keys: an exclusive lock on its log folder (local roots
    only; object stores have no lock, so there this holds nothing).

    >>> import tempfile
    >>> index = Index(*rootfs.open_root(tempfile.mkdtemp()))
    >>> with _root_turn(index):
    ...     os.path.isdir(index.path(LOG))
    True
    """
    if not rootfs.is_local(index.fs):
        yield
        return
    folder = index.path(LOG)
    os.makedirs(folder, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)


def _utf8(text: str) -> bool:
    """Whether ``text`` can be stored (encoded as UTF-8: no lone surrogates).

    >>> _utf8("loss"), _utf8("\\udc80")
    (True, False)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(what: str, value: object) -> str:
    """``str(value)``, or a ValueError naming ``what`` when it cannot be stored as UTF-8.

    >>> _text("status", "running")
    'running'
    """
    text = str(value)
    if not _utf8(text):
        raise BadInput(f"{what} {text!r} is not valid Unicode (lone surrogates cannot be stored as UTF-8)")
    return text


def split_runs(entries: list[Node | int], chain: tuple[str, str]) -> tuple[np.ndarray, dict | None, dict]:
    """Pending entries (nodes, or seqs of ``chain``'s nodes made by next()) as ``(seqs, set_parents, rows_of)``:
    seqs and set parents as :class:`Records` holds them, and the rows of each run
    (``{(name, nonce): rows}``; rows None when the flush holds one run).

    >>> a = Node("a.b.c", "949e88", 0)
    >>> seqs, set_parents, rows_of = split_runs([a, 1, 2, Node.start("x.y.z")], ("a.b.c", "949e88"))
    >>> seqs.tolist(), set_parents, [(run[0], rows) for run, rows in rows_of.items()]
    ([0, 1, 2, 0], {0: None, 3: None}, [('a.b.c', [0, 1, 2]), ('x.y.z', [3])])
    """
    n = len(entries)
    kept = n - countOf(map(type, entries), int)  # entries kept as nodes
    if not kept:
        return np.fromiter(entries, np.int64, n), None, {chain: None}
    if countOf(map(type, entries[:kept]), int) == 0:  # the usual case: they come first (a run's start)
        at: range | list[int] = range(kept)
    else:
        at = [i for i, kind in enumerate(map(type, entries)) if kind is not int]
    seqs = list(entries)
    set_parents: dict[int, str | None] = {}
    run_of: dict[int, tuple[str, str]] = {}  # rows of runs other than the chain
    for i in at:
        node = entries[i]
        seqs[i] = node.seq
        if node._parent is not _PREVIOUS:
            set_parents[i] = node.parent
        if (node.name, node.nonce) != chain:
            run_of[i] = (node.name, node.nonce)
    if not run_of:
        return np.fromiter(seqs, np.int64, n), set_parents or None, {chain: None}
    rows_of: dict[tuple[str, str], list[int]] = {}
    for i in range(n):
        rows_of.setdefault(run_of.get(i, chain), []).append(i)
    return np.fromiter(seqs, np.int64, n), set_parents or None, rows_of


def build_segment(records: Records, name: str, nonce: str, writer: str) -> tuple[pa.Table, dict[str, str], dict]:
    """Columns, ``{key: type}`` and block index of one run's records (the caller groups them by run).

    Rows are key-major (each key's rows contiguous, ordered by seq then write
    order), so a reader slices a key without grouping. Node ids, parents, keys
    and the writer id are dictionary arrays over the distinct values.

    >>> s = Shape(("a", "b"), ("float", "int"), True)
    >>> records = Records(np.array([0, 1]), {0: None}, np.array([7, 8]), [s, s], [1.5, 2, 2.5, 3])
    >>> table, keys, index = build_segment(records, "doc", "949e88", "w1")
    >>> table["float"].to_pylist(), table["int"].to_pylist(), keys
    ([1.5, 2.5, None, None], [None, None, 2, 3], {'a': 'float', 'b': 'int'})
    >>> index["blocks"]["b"], index["latest"]["b"]
    ([2, 4, 0, 1, 2, ['int']], [8, 'w1', 1, 'int', 3])
    """
    n = len(records.seqs)
    seqs = records.seqs
    ids, parents = lineage_columns(name, nonce, seqs, records.set_parents)
    stamps = records.stamps
    index = {"stamps": [int(stamps.min()), int(stamps.max())]}

    first = records.shapes[0]
    if records.shapes.count(first) == n:
        if all(kind == "float" for kind in first.kinds) and bool((seqs[1:] >= seqs[:-1]).all()):
            table, blocks = _float_table(first, records, ids, parents, writer)
            last = int(np.argmax(stamps))  # every record holds every key
            latest = _latest(records, writer, {key: last for key in first.keys}, None)
            return table, dict.fromkeys(first.keys, "float"), {**index, "blocks": blocks, "latest": latest}
        groups = [(first, np.arange(n))]
    else:
        by_shape: dict[Shape, list[int]] = {}
        for i, shape in enumerate(records.shapes):
            by_shape.setdefault(shape, []).append(i)
        groups = [(shape, np.array(rows)) for shape, rows in by_shape.items()]
    rows, columns, keys, blocks = _blocks(groups, records, seqs)
    at = pa.array(rows.astype(np.int32))
    key_codes = np.repeat(np.arange(len(blocks), dtype=np.int32), [b[1] - b[0] for b in blocks.values()])
    table = pa.Table.from_arrays(
        [
            ids.take(at),
            pa.array(seqs[rows]),
            parents.take(at),
            pa.array(stamps[rows]),
            _writer_column(len(rows), writer),
            pa.DictionaryArray.from_arrays(pa.array(key_codes), pa.array(list(blocks))),
            *[pa.chunked_array(columns[t], ARROW[t]) for t in ARROW],
        ],
        names=list(schema.SEGMENT_SCHEMA.names),
    )
    newest = {}  # each key's record with the highest stamp
    for key, (start, stop, *_) in blocks.items():
        where = rows[start:stop]
        newest[key] = int(where[np.argmax(stamps[where])])
    latest = _latest(records, writer, newest, None if len(groups) == 1 else records.starts())
    return table, keys, {**index, "blocks": blocks, "latest": latest}


def _latest(records: Records, writer: str, newest: dict[str, int], starts: np.ndarray | None) -> dict[str, list]:
    """The block index's ``latest`` entries (``theseus.store.latest``): ``newest`` gives each key's
    most recent record; ``starts`` where each record's values start (None: every record has the
    first one's shape).

    >>> s = Shape(("a", "b"), ("float", "str"))
    >>> records = Records(np.array([4, 5]), None, np.array([7, 8]), [s, s], [1.5, "x", 2.5, "y"])
    >>> _latest(records, "w1", {"a": 1, "b": 0}, None)
    {'a': [8, 'w1', 5, 'float', 2.5], 'b': [7, 'w1', 4, 'str', 'x']}
    """
    found = {}
    for key, r in newest.items():
        shape = records.shapes[r]
        at = shape.keys.index(key)
        value = records.values[(r * len(shape.keys) if starts is None else int(starts[r])) + at]
        made = latest_entry(records.stamps[r], writer, records.seqs[r], shape.kinds[at], value)
        if made is not None:
            found[key] = made
    return found


def _float_table(shape: Shape, records: Records, ids: pa.Array, parents: pa.Array,
                 writer: str) -> tuple[pa.Table, dict]:
    """:func:`build_segment`'s table and blocks for the usual flush: one shape of float keys, seqs in order.

    Each column has one chunk per key (that key's block). The node, seq, parent, stamp
    and writer chunks of every key are the same arrays, so no row is gathered or copied.

    >>> s = Shape(("a", "b"), ("float", "float"))
    >>> ids, parents = lineage_columns("doc", "949e88", np.array([5, 6]))
    >>> records = Records(np.array([5, 6]), None, np.array([7, 8]), [s, s], [1.0, 2.0, 3.0, 4.0])
    >>> table, blocks = _float_table(s, records, ids, parents, "w1")
    >>> table["seq"].to_pylist(), table["key"].to_pylist(), table["float"].to_pylist(), blocks["b"]
    ([5, 6, 5, 6], ['a', 'a', 'b', 'b'], [1.0, 3.0, 2.0, 4.0], [2, 4, 5, 6, 2, ['float']])
    """
    seqs = records.seqs
    n, width = len(seqs), len(shape.keys)
    distinct = int(np.count_nonzero(seqs[1:] != seqs[:-1])) + 1
    blocks = {key: [i * n, (i + 1) * n, int(seqs[0]), int(seqs[-1]), distinct, ["float"]]
              for i, key in enumerate(shape.keys)}
    per_record = [ids, pa.array(seqs), parents, pa.array(records.stamps),
                  _writer_column(n, writer)]
    names = pa.array(list(shape.keys))
    keys = [pa.DictionaryArray.from_arrays(pa.array(np.full(n, i, np.int32)), names) for i in range(width)]
    floats = [pa.array(column) for column in _float_matrix(records.values, width).T.copy()]
    nulls = [pa.chunked_array([pa.nulls(n, ARROW[kind])] * width) for kind in ARROW if kind != "float"]
    table = pa.Table.from_arrays(
        [*(pa.chunked_array([column] * width) for column in per_record), pa.chunked_array(keys),
         pa.chunked_array(floats), *nulls],
        names=list(schema.SEGMENT_SCHEMA.names),
    )
    return table, blocks


def _writer_column(n: int, writer: str) -> pa.DictionaryArray:
    """The writer id for ``n`` rows, as a one-entry dictionary array.

    >>> _writer_column(2, "w1").to_pylist()
    ['w1', 'w1']
    """
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([writer]))


def _float_matrix(values: list, width: int) -> np.ndarray:
    """Records of ``width`` float values, one after another, as a (records, width) matrix.

    >>> _float_matrix([1.0, 2.0, 3.0, 4.0], 2).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    # struct packs a list of Python floats in one C loop, faster than np.fromiter's per-item
    # protocol; every value here was checked to be a float when it was written
    return np.frombuffer(struct.pack(f"{len(values)}d", *values), np.float64).reshape(-1, width)


def _blocks(groups: list[tuple[Shape, np.ndarray]], records: Records,
            seqs: np.ndarray) -> tuple[np.ndarray, dict, dict, dict]:
    """Key-major rows of records grouped by shape: ``(rows, {type: [column chunks]}, keys, blocks)``.

    ``rows`` gives the record of each row; each key's rows are ordered by seq, then write order.
    """
    chunks: dict[str, list[tuple[np.ndarray, str, pa.Array]]] = {}
    starts = None if len(groups) == 1 else records.starts()
    for shape, where in groups:
        for key, kind, column in zip(shape.keys, shape.kinds,
                                     _columns(shape, records.values, None if starts is None else starts[where])):
            chunks.setdefault(key, []).append((where, kind, column))

    rows_of, columns = [], {t: [] for t in ARROW}
    keys: dict[str, str] = {}
    blocks = {}
    start = 0
    for key, parts in chunks.items():
        where = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        seq = seqs[where]
        order = None
        if len(parts) > 1 or (len(seq) > 1 and not (seq[1:] >= seq[:-1]).all()):
            order = np.lexsort((where, seq))  # by seq, then write order (= stamp order)
            where, seq = where[order], seq[order]
        used = sorted({p[1] for p in parts}, key=schema.TYPES.index)
        for kind, arrow_type in ARROW.items():
            if kind not in used:
                columns[kind].append(pa.nulls(len(where), arrow_type))
                continue
            values = [p[2] if p[1] == kind else pa.nulls(len(p[0]), arrow_type) for p in parts]
            values = values[0] if len(values) == 1 else pa.concat_arrays(values)
            columns[kind].append(values if order is None else values.take(order))
        for kind in used:
            keys[key] = schema.merge_types(keys[key], kind) if key in keys else kind
        stop = start + len(where)
        distinct = int(np.count_nonzero(seq[1:] != seq[:-1])) + 1
        blocks[key] = [start, stop, int(seq[0]), int(seq[-1]), distinct, used]
        rows_of.append(where)
        start = stop
    return np.concatenate(rows_of) if len(rows_of) > 1 else rows_of[0], columns, keys, blocks


def _columns(shape: Shape, values: list, starts: np.ndarray | None) -> list[pa.Array]:
    """One Arrow array per key of ``shape``: from ``values`` holding only records of that
    shape one after another (``starts`` None), or from the records starting at ``starts``.

    >>> s = Shape(("a", "b"), ("float", "float"))
    >>> [c.to_pylist() for c in _columns(s, [1.0, 2.0, 3.0, 4.0], None)]
    [[1.0, 3.0], [2.0, 4.0]]
    >>> [c.to_pylist() for c in _columns(s, [9, 1.0, 2.0, 3.0, 4.0], np.array([1, 3]))]
    [[1.0, 3.0], [2.0, 4.0]]
    """
    width = len(shape.keys)
    if starts is None and all(kind == "float" for kind in shape.kinds):  # the usual metrics: one numpy pass
        return [pa.array(column) for column in _float_matrix(values, width).T.copy()]
    if starts is None:
        starts = np.arange(0, len(values), width)
    out = []
    for offset, kind in enumerate(shape.kinds):
        column = [values[i] for i in (starts + offset).tolist()]
        out.append(pa.array(column, ARROW[kind]))
    return out
