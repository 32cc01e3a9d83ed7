"""The writer: buffers records and publishes them as immutable segments.

``write()`` only validates (once per shape of record: keys and value types) and
appends ``(node, stamp, shape, values)`` to a list; a flush turns the pending
records of each run into columns in one vectorized pass (``build_segment``).
"""

from __future__ import annotations

import secrets
import threading
import time
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import numpy as np
import pyarrow as pa

from theseus.store import fs as rootfs
from theseus.store import schema
from theseus.store.fold import ARROW
from theseus.store.node import Node
from theseus.store.segments import encode, run_dir, segment_name

if TYPE_CHECKING:
    from theseus.store.store import Store

_PYTYPE = {float: "float", int: "int", bool: "bool", str: "str"}


class Shape(NamedTuple):
    """The keys of a record, the log type of each value, and whether any is an int."""

    keys: tuple[str, ...]
    kinds: tuple[str, ...]
    ints: bool = False


_JOB = Shape((schema.JOB, schema.CONFIG, schema.STATUS), ("str", "str", "str"))
_STATUS = Shape((schema.STATUS,), ("str",))
_CHECKPOINT = Shape((schema.CHECKPOINT,), ("str",))
_FINISHED = Shape((schema.FINISHED, schema.STATUS), ("bool", "str"))
_FAILED = Shape((schema.FINISHED, schema.STATUS, schema.ERROR), ("bool", "str", "str"))


class Writer:
    """Buffered, append-only writer of node records.

    Records are published as one segment per run on ``flush()``, on ``close()``,
    and at least every ``flush_interval`` seconds while records are pending.
    Commit records (``job``, ``checkpoint``, ``finished``, ``failed``) are
    flushed before the call returns.

    >>> from theseus.store import Store, Node
    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> node = Node.start("doc-run")
    >>> with store.writer() as w:
    ...     w.write(node, {"train/loss": 2.5})
    >>> store.find().nonce(node.nonce).select(keys=["train/loss"])
    [{'train/loss': 2.5}]
    """

    def __init__(self, store: Store, flush_interval: float = 1.0):
        self.store = store
        self.id = secrets.token_hex(4)
        self.flush_interval = flush_interval
        self._pending: list[tuple[Node, int, Shape, tuple]] = []  # only appended to, and cut from the front
        self._flush_lock = threading.Lock()
        self._known: dict[str, str] | None = None
        self._seen: dict[tuple, Shape] = {}  # (keys, python types) already validated -> shape
        self._shapes: dict[Shape, Shape] = {}  # one object per shape, so records compare by identity
        self._last_stamp = 0
        self._counter = 0
        self._closed = False
        self._error: BaseException | None = None
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._background, name=f"theseus-writer-{self.id}", daemon=True)
        self._thread.start()

    # -- public API -------------------------------------------------------

    def write(self, node: Node, values: Mapping[str, Any]) -> None:
        """Buffer user values (scalars) for ``node``; returns without touching disk."""
        if type(values) is dict and type(node) is Node and not self._closed:
            # a training loop logs the same keys with the same types every step: validate a
            # (keys, types) signature once, then only append
            vals = tuple(values.values())
            shape = self._seen.get((tuple(values), tuple(map(type, vals))))
            if shape is not None and (not shape.ints or all(
                    -(2**63) <= v < 2**63 for v, k in zip(vals, shape.kinds) if k == "int")):
                self._pending.append((node, time.time_ns(), shape, vals))  # atomic; stamps ordered at flush
                return
        items = self._check_user(node, values)
        if items:
            shape = self._shape(tuple(k for k, _, _ in items), tuple(t for _, t, _ in items))
            self._append(node, shape, tuple(v for _, _, v in items))
            if type(values) is dict and len(items) == len(values):  # nothing dropped (no None values)
                types = tuple(map(type, values.values()))
                if all(t in _PYTYPE for t in types):
                    self._seen[(tuple(values), types)] = shape

    def job(self, node: Node, key: str, config_yaml: str) -> None:
        """Record the job key and its config (YAML text) for ``node``; durable on return."""
        self._commit(node, _JOB, (str(key), str(config_yaml), "running"))

    def status(self, node: Node, status: str) -> None:
        """Buffer a status string (``running``, ``finished``, ``failed``...) for ``node``."""
        self._append(self._check_node(node), _STATUS, (str(status),))

    def checkpoint(self, node: Node, path: str) -> None:
        """Record that ``node`` has a committed checkpoint at root-relative ``path``; durable on return."""
        if not isinstance(path, str) or not path or path.startswith("/") or "://" in path or ".." in path.split("/"):
            raise ValueError(f"checkpoint path must be relative to the root (e.g. 'objects/<id>'), got {path!r}")
        self._commit(node, _CHECKPOINT, (path,))

    def finished(self, node: Node) -> None:
        """Mark the run finished at ``node``; durable on return."""
        self._commit(node, _FINISHED, (True, "finished"))

    def failed(self, node: Node, error: str) -> None:
        """Mark the run failed at ``node`` with the error text; durable on return."""
        self._commit(node, _FAILED, (False, "failed", str(error)))

    def flush(self) -> None:
        """Publish every pending record; durable when this returns."""
        self._raise_background_error()
        with self._flush_lock:
            pending = self._pending
            batch = pending[:len(pending)]
            if not batch:
                return
            del pending[:len(batch)]  # records appended meanwhile stay for the next flush
            try:
                self._publish(batch)
            except BaseException:
                pending[:0] = batch
                raise

    def close(self) -> None:
        """Flush and stop the background thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join()
        self.flush()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------

    def _check_node(self, node: Node) -> Node:
        if not isinstance(node, Node):
            raise TypeError(f"expected a Node, got {type(node).__name__}")
        if self._closed:
            raise RuntimeError("writer is closed")
        return node

    def _check_user(self, node: Node, values: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
        self._check_node(node)
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping of key to scalar, got {type(values).__name__}")
        known = self._known_types()
        items = []
        for key, value in values.items():
            if value is None:
                continue
            kind = _PYTYPE.get(type(value))
            if kind is None or key not in known or kind == "int":
                schema.check_user_key(key)
                kind = schema.value_type(key, value, f"store.objects(node) = {self.store.objects(node)}")
                value = schema.to_python(kind, value)
            prior = known.get(key)
            if prior is not None and not schema.compatible(prior, kind):
                raise ValueError(f"key {key!r} holds {prior} values; got {kind} {value!r}")
            items.append((key, kind, value))
        for key, kind, _ in items:  # only once the whole record is valid
            known.setdefault(key, kind)
        return items

    def _known_types(self) -> dict[str, str]:
        if self._known is None:
            self._known = {k: t for k, t in self.store.keys().items() if not k.startswith("_")}
        return self._known

    def _shape(self, keys: tuple[str, ...], kinds: tuple[str, ...]) -> Shape:
        shape = Shape(keys, kinds, "int" in kinds)
        return self._shapes.setdefault(shape, shape)

    def _append(self, node: Node, shape: Shape, values: tuple) -> None:
        self._pending.append((node, time.time_ns(), shape, values))

    def _commit(self, node: Node, shape: Shape, values: tuple) -> None:
        self._append(self._check_node(node), shape, values)
        self.flush()

    def _background(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval)
            if self._closed:
                return
            if self._pending:
                try:
                    self.flush()
                except BaseException as e:  # surfaced on the next call
                    self._error = e

    def _raise_background_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"background flush failed: {error}") from error

    def _publish(self, batch: list) -> None:
        # write stamps strictly increase in record order across the writer's life:
        # s[i] = max(clock[i], s[i - 1] + 1), as a running maximum of clock[i] - i
        steps = np.arange(len(batch))
        lifted = np.fromiter(map(itemgetter(1), batch), np.int64, len(batch)) - steps
        lifted[0] = max(lifted[0], self._last_stamp + 1)
        stamps = np.maximum.accumulate(lifted) + steps
        first = batch[0][0]
        if all(r[0].nonce == first.nonce and r[0].name == first.name for r in batch):
            runs = {(first.name, first.nonce): (batch, stamps)}
        else:
            where: dict[tuple[str, str], list[int]] = {}
            for i, record in enumerate(batch):
                where.setdefault((record[0].name, record[0].nonce), []).append(i)
            runs = {run: ([batch[i] for i in ix], stamps[ix]) for run, ix in where.items()}
        fs, root = self.store.fs, self.store.path()
        for (name, nonce), (records, run_stamps) in runs.items():
            table, keys, index = build_segment(records, self.id, run_stamps)
            self._counter += 1  # before publishing: a retried flush never reuses a name
            path = f"{run_dir(root, name, nonce)}/{segment_name(int(run_stamps[-1]), self.id, self._counter)}"
            rootfs.publish(fs, path, encode(table, keys, index))
        self._last_stamp = int(stamps[-1])


def build_segment(records: list, writer: str, stamps: np.ndarray | None = None) -> tuple[pa.Table, dict[str, str], dict]:
    """Columns, ``{key: type}`` and block index of one run's records ``(node, stamp, shape, values)``.

    ``stamps`` replaces the records' own stamps (the writer's, made strictly increasing).

    Rows are key-major (each key's rows contiguous, ordered by seq then write
    order), so a reader slices a key without grouping. Node ids, parents, keys
    and the writer id are dictionary arrays over the distinct values.

    >>> n = Node("doc", "949e88", 0)
    >>> s = Shape(("a", "b"), ("float", "int"), True)
    >>> table, keys, index = build_segment([(n, 7, s, (1.5, 2)), (n.next(), 8, s, (2.5, 3))], "w1")
    >>> table["float"].to_pylist(), table["int"].to_pylist(), keys
    ([1.5, 2.5, None, None], [None, None, 2, 3], {'a': 'float', 'b': 'int'})
    >>> index["blocks"]["b"]
    [2, 4, 0, 1, 2, ['int']]
    """
    n = len(records)
    nodes = list(map(itemgetter(0), records))
    ids = pa.array(list(map(attrgetter("id"), nodes)), pa.string())
    parents = pa.array(list(map(attrgetter("parent"), nodes)), pa.string())
    has_parent = parents.is_valid().to_numpy(zero_copy_only=False)
    parents = parents.fill_null("")
    seqs = np.fromiter(map(attrgetter("seq"), nodes), np.int64, n)
    if stamps is None:
        stamps = np.fromiter(map(itemgetter(1), records), np.int64, n)

    first = records[0][2]
    if all(r[2] is first for r in records):
        groups = [(first, np.arange(n), records)]
    else:
        by_shape: dict[Shape, list[int]] = {}
        for i, r in enumerate(records):
            by_shape.setdefault(r[2], []).append(i)
        groups = [(shape, np.array(ix), [records[i] for i in ix]) for shape, ix in by_shape.items()]
    chunks: dict[str, list[tuple[np.ndarray, str, pa.Array]]] = {}
    for shape, where, rows in groups:
        for key, kind, column in zip(shape.keys, shape.kinds, zip(*[r[3] for r in rows])):
            chunks.setdefault(key, []).append((where, kind, pa.array(column, ARROW[kind])))

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

    rows = np.concatenate(rows_of) if len(rows_of) > 1 else rows_of[0]
    index = pa.array(rows.astype(np.int32))
    key_codes = np.repeat(np.arange(len(blocks), dtype=np.int32), [b[1] - b[0] for b in blocks.values()])
    table = pa.Table.from_arrays(
        [
            pa.DictionaryArray.from_arrays(index, ids),
            pa.array(seqs[rows]),
            pa.DictionaryArray.from_arrays(pa.array(rows.astype(np.int32), mask=~has_parent[rows]), parents),
            pa.array(stamps[rows]),
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(rows), np.int32)), pa.array([writer])),
            pa.DictionaryArray.from_arrays(pa.array(key_codes), pa.array(list(blocks))),
            *[pa.chunked_array(columns[t], ARROW[t]) for t in ARROW],
        ],
        names=list(schema.SEGMENT_SCHEMA.names),
    )
    return table, keys, {"stamps": [int(stamps.min()), int(stamps.max())], "blocks": blocks}
