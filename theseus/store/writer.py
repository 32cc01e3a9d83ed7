"""The writer: buffers records and publishes them as immutable segments."""

from __future__ import annotations

import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Mapping

import pyarrow as pa

from theseus.store import fs as rootfs
from theseus.store import schema
from theseus.store.node import Node
from theseus.store.segments import encode, run_dir, segment_name

if TYPE_CHECKING:
    from theseus.store.store import Store

_PYTYPE = {float: "float", int: "int", bool: "bool", str: "str"}
_ARROW = {"float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(), "str": pa.string()}


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
        self._pending: list[tuple[Node, int, list[tuple[str, str, Any]]]] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._known: dict[str, str] | None = None
        self._seen: dict[tuple, tuple[str, ...]] = {}  # (keys, python types) already validated -> kinds
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
            # (keys, types) signature once, then only zip and append
            keys, vals = tuple(values), tuple(values.values())
            kinds = self._seen.get((keys, tuple(map(type, vals))))
            if kinds is not None and ("int" not in kinds or all(
                    -(2**63) <= v < 2**63 for v, k in zip(vals, kinds) if k == "int")):
                with self._lock:
                    self._pending.append((node, self._stamp(), list(zip(keys, kinds, vals))))
                return
        items = self._check_user(node, values)
        if items:
            self._append(node, items)
            if type(values) is dict and len(items) == len(values):  # nothing dropped (no None values)
                types = tuple(map(type, values.values()))
                if all(t in _PYTYPE for t in types):
                    self._seen[(tuple(values), types)] = tuple(kind for _, kind, _ in items)

    def job(self, node: Node, key: str, config_yaml: str) -> None:
        """Record the job key and its config (YAML text) for ``node``; durable on return."""
        self._commit(node, [(schema.JOB, "str", str(key)), (schema.CONFIG, "str", str(config_yaml)),
                            (schema.STATUS, "str", "running")])

    def status(self, node: Node, status: str) -> None:
        """Buffer a status string (``running``, ``finished``, ``failed``...) for ``node``."""
        self._append(self._check_node(node), [(schema.STATUS, "str", str(status))])

    def checkpoint(self, node: Node, path: str) -> None:
        """Record that ``node`` has a committed checkpoint at root-relative ``path``; durable on return."""
        if not isinstance(path, str) or not path or path.startswith("/") or "://" in path or ".." in path.split("/"):
            raise ValueError(f"checkpoint path must be relative to the root (e.g. 'objects/<id>'), got {path!r}")
        self._commit(node, [(schema.CHECKPOINT, "str", path)])

    def finished(self, node: Node) -> None:
        """Mark the run finished at ``node``; durable on return."""
        self._commit(node, [(schema.FINISHED, "bool", True), (schema.STATUS, "str", "finished")])

    def failed(self, node: Node, error: str) -> None:
        """Mark the run failed at ``node`` with the error text; durable on return."""
        self._commit(node, [(schema.FINISHED, "bool", False), (schema.STATUS, "str", "failed"),
                            (schema.ERROR, "str", str(error))])

    def flush(self) -> None:
        """Publish every pending record; durable when this returns."""
        self._raise_background_error()
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                self._publish(batch)
            except BaseException:
                with self._lock:
                    self._pending[:0] = batch
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
            if prior is None:
                known[key] = kind
            elif not schema.compatible(prior, kind):
                raise ValueError(f"key {key!r} holds {prior} values; got {kind} {value!r}")
            items.append((key, kind, value))
        return items

    def _known_types(self) -> dict[str, str]:
        if self._known is None:
            self._known = {k: t for k, t in self.store.keys().items() if not k.startswith("_")}
        return self._known

    def _stamp(self) -> int:
        stamp = max(time.time_ns(), self._last_stamp + 1)
        self._last_stamp = stamp
        return stamp

    def _append(self, node: Node, items: list) -> None:
        with self._lock:
            self._pending.append((node, self._stamp(), items))

    def _commit(self, node: Node, items: list) -> None:
        self._append(self._check_node(node), items)
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
        runs: dict[tuple[str, str], list] = {}
        for record in batch:
            runs.setdefault((record[0].name, record[0].nonce), []).append(record)
        fs, root = self.store.fs, self.store.path()
        for (name, nonce), records in runs.items():
            columns, keys = self._columns(records)
            self._counter += 1
            path = f"{run_dir(root, name, nonce)}/{segment_name(records[-1][1], self.id, self._counter)}"
            rootfs.publish(fs, path, encode(columns, keys))

    def _columns(self, records: list) -> tuple[dict[str, pa.Array], dict[str, str]]:
        node_col, seq_col, parent_col, stamp_col = [], [], [], []
        key_col, kind_col, value_col = [], [], []
        for node, stamp, items in records:
            n = len(items)
            node_col += [node.id] * n
            seq_col += [node.seq] * n
            parent_col += [node.parent] * n
            stamp_col += [stamp] * n
            keys, kinds, values = zip(*items)
            key_col += keys
            kind_col += kinds
            value_col += values
        rows = len(key_col)
        kinds = set(kind_col)
        columns = {
            "node": pa.array(node_col, pa.string()),
            "seq": pa.array(seq_col, pa.int64()),
            "parent": pa.array(parent_col, pa.string()),
            "stamp": pa.array(stamp_col, pa.int64()),
            "writer": pa.array([self.id] * rows, pa.string()),
            "key": pa.array(key_col, pa.string()),
        }
        for kind, arrow_type in _ARROW.items():
            if kind not in kinds:
                columns[kind] = pa.nulls(rows, arrow_type)
            elif len(kinds) == 1:
                columns[kind] = pa.array(value_col, arrow_type)
            else:
                columns[kind] = pa.array([v if k == kind else None for k, v in zip(kind_col, value_col)], arrow_type)
        keys: dict[str, str] = {}
        for key, kind in set(zip(key_col, kind_col)):
            keys[key] = schema.merge_types(keys[key], kind) if key in keys else kind
        return columns, keys
