"""Save and restore a pytree of jax.Arrays as TensorStore zarr3 arrays of the global shape.

Layout of a checkpoint folder (a local path or ``gs://bucket/prefix``)::

    <folder>/
      checkpoint/<leaf path>/zarr.json        one zarr3 array per leaf, global shape and dtype
      checkpoint/<leaf path>/c/<i>/<j>        one chunk per shard (chunk shape = shard shape)
      checkpoint/process-<k>.json             files written by process k, with sizes and sha256
      checkpoint/index.json                   leaf paths, shapes, dtypes, tree structure (JSON)
      config.yaml, job.json, ...              sidecars passed to save()
      MANIFEST.json                           written last: every file above, size + sha256

Leaves are named by their key path: ``params/blocks_0/mlp/c_fc/kernel``,
``opt_state/0/mu/wte/embedding``, ``step``. Each process writes the shards it
owns (``replica_id == 0``); process 0 writes the metadata, the index, the sidecars
and, after every process has finished, the manifest. A folder without
MANIFEST.json is an interrupted save and :func:`restore` refuses it.

Restoring reads, for every leaf, exactly the slices the *target* sharding puts on
this process's devices, so a checkpoint saved on 8 devices with FSDP restores
onto 1 device or onto a tensor-parallel mesh.

Chunks are stored uncompressed (zarr3 ``bytes`` codec, little endian), so a
chunk file holds exactly the shard's bytes in C order; the manifest's checksums
of chunk files are computed from the host copy of each shard while TensorStore
writes it, and :func:`restore` checks the bytes it reads the same way: a slice that is
one whole chunk is hashed in memory, a chunk read only in part (another mesh) is hashed
from its file, the small JSON files as they are read.

GCS: arrays go through TensorStore's ``gcs`` driver (set ``TENSORSTORE_GCS_HTTP_URL``
before the first GCS access to use an emulator); JSON files through fsspec/gcsfs.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np
import tensorstore as ts
from jax.experimental import multihost_utils

from theseus.errors import BadInput, MissingFile
from theseus.store import direct_io
from theseus.store import fs as rootfs
from theseus.store.layout import ANALYSIS, JOB_FILE, MANIFEST
from theseus.train import manifest as mf
from theseus.train.sharding import key_path_names

CHECKPOINT = "checkpoint"
INDEX = "index.json"
FORMAT = "theseus.checkpoint/1"
_RESERVED = re.compile(r"index\.json|process-\d+\.json")  # top-level files of checkpoint/
#: save_streamed: bytes of leaves it holds while they are written and hashed, and the threads hashing them
_STREAM_BYTES = 2**28
_STREAM_THREADS = 2


# ---------------------------------------------------------------------------
# leaves and their names


def _key_json(key: Any) -> list:
    """One key of a key path as JSON: ["dict", k], ["attr", name], ["index", i] or ["flat", i]."""
    if isinstance(key, jax.tree_util.DictKey):
        k = key.key
        return ["dict", k if isinstance(k, (str, int)) else str(k)]
    if isinstance(key, jax.tree_util.GetAttrKey):
        return ["attr", key.name]
    if isinstance(key, jax.tree_util.SequenceKey):
        return ["index", key.idx]
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return ["flat", key.key]
    return ["other", str(key)]


def _flatten(tree: Any) -> tuple[list[tuple[str, Any, list]], Any]:
    """[(leaf path, leaf, key path as JSON)], treedef; errors on names that cannot be folders."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    out, seen = [], set()
    for path, leaf in flat:
        parts = key_path_names(path)
        name = "/".join(parts)
        if not parts or any(p in ("", ".", "..") or "/" in p or "\\" in p for p in parts):
            raise BadInput(f"leaf {jax.tree_util.keystr(path)} has a name that cannot be a folder: {parts!r}")
        if name in seen or _RESERVED.fullmatch(name):
            raise BadInput(f"leaf name {name!r} is used twice or reserved")
        seen.add(name)
        out.append((name, leaf, [_key_json(k) for k in path]))
    return out, treedef


def leaf_paths(tree: Any) -> list[str]:
    """The checkpoint name of every leaf of ``tree``, in flatten order.

    >>> import jax.numpy as jnp
    >>> leaf_paths({"params": {"wte": {"embedding": jnp.zeros(2)}}, "step": jnp.int32(0)})
    ['params/wte/embedding', 'step']
    """
    return [name for name, _, _ in _flatten(tree)[0]]


# ---------------------------------------------------------------------------
# TensorStore specs


def _kvstore(folder: str, name: str) -> dict:
    """TensorStore kvstore spec of the array folder of leaf ``name``."""
    rel = f"{CHECKPOINT}/{name}/"
    if rootfs.is_local(folder):
        return {"driver": "file", "path": f"{rootfs.local_path(folder)}/{rel}"}
    if folder.startswith("gs://"):
        bucket, _, prefix = folder[len("gs://"):].partition("/")
        prefix = prefix.strip("/")
        return {"driver": "gcs", "bucket": bucket, "path": f"{prefix}/{rel}" if prefix else rel}
    raise BadInput(f"unsupported checkpoint location {folder!r}: use a local path, file:// or gs://")


def _zarr_spec(folder: str, name: str, shape: tuple, dtype: np.dtype, chunk: tuple) -> dict:
    return {
        "driver": "zarr3",
        "kvstore": _kvstore(folder, name),
        "metadata": {
            "shape": list(shape),
            "data_type": np.dtype(dtype).name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "fill_value": False if np.dtype(dtype) == np.bool_ else 0,
        },
        # write every chunk, even all-zero ones (Adam moments at init), so the
        # manifest lists every chunk and a deleted chunk file is noticed
        "store_data_equal_to_fill_value": True,
    }


def _chunk_file(name: str, start: tuple[int, ...], chunk: tuple[int, ...]) -> str:
    """Relative path of the chunk that starts at ``start`` (zarr3 default key encoding)."""
    coords = [str(s // c) for s, c in zip(start, chunk, strict=True)]
    return "/".join([CHECKPOINT, name, "c", *coords])


def _bounds(index: tuple, shape: tuple) -> tuple[tuple[int, int], ...]:
    """A tuple of slices as ((start, stop), ...), for use as a dict key."""
    if len(index) != len(shape):
        raise BadInput(f"index {index} does not match shape {shape}")
    return tuple(s.indices(d)[:2] for s, d in zip(index, shape, strict=True))


# ---------------------------------------------------------------------------
# saving


@dataclasses.dataclass
class _LeafPlan:
    """What this process writes for one leaf."""

    name: str
    keys: list
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk: tuple[int, ...]
    shards: list[tuple[tuple[tuple[int, int], ...], np.ndarray]]  # (bounds, host copy)

    def index_entry(self) -> dict:
        return {
            "path": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype.name,
            "chunk_shape": list(self.chunk),
            "keys": self.keys,
        }


def _plan(state: Any, process_index: int) -> tuple[list[_LeafPlan], str]:
    """Host copies of the shards this process owns, leaf by leaf (blocks on device-to-host copies)."""
    flat, treedef = _flatten(state)
    # first start every device-to-host copy, then collect them
    owned: list[tuple[str, list, Any, list]] = []
    for name, leaf, keys in flat:
        if isinstance(leaf, jax.Array):
            shards = [s for s in leaf.addressable_shards if s.replica_id == 0]
            for s in shards:
                s.data.copy_to_host_async()
            owned.append((name, keys, leaf, shards))
        else:
            owned.append((name, keys, np.asarray(leaf), []))
    plans = []
    for name, keys, leaf, shards in owned:
        shape = tuple(leaf.shape)
        if isinstance(leaf, jax.Array):
            chunk = tuple(leaf.sharding.shard_shape(leaf.shape))
            host = []
            for s in shards:
                data = np.array(s.data, copy=True)  # never a view of a buffer that may be donated
                if data.shape != chunk:
                    raise BadInput(f"{name}: uneven sharding (shard {data.shape} vs {chunk}) is not supported")
                if data.size:  # an empty array has no chunk to write
                    host.append((_bounds(s.index, shape), data))
        else:
            chunk = shape
            full = tuple((0, d) for d in shape)
            host = [(full, np.array(leaf, copy=True))] if process_index == 0 and leaf.size else []
        chunk = tuple(max(c, 1) for c in chunk)
        plans.append(_LeafPlan(name, keys, shape, np.dtype(leaf.dtype), chunk, host))
    return plans, str(treedef)


def _shard_entry(plan: _LeafPlan, bounds: tuple, data: np.ndarray) -> mf.FileEntry:
    """Manifest entry of one chunk file, from the bytes TensorStore writes for it."""
    if sys.byteorder != "little":
        raise NotImplementedError("checkpoint checksums assume a little-endian host")
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    start = tuple(b[0] for b in bounds)
    return mf.FileEntry.of_bytes(_chunk_file(plan.name, start, plan.chunk), raw)


def _write_chunk(folder: str, plan: _LeafPlan, data: np.ndarray) -> list[mf.FileEntry]:
    """Write the one chunk of a leaf's array in the local ``folder`` as TensorStore would (the ``bytes`` codec
    stores exactly the array's bytes in C order), synced, around the page cache and hashed as written
    (`theseus.store.direct_io`); its manifest entry."""
    rel = _chunk_file(plan.name, tuple(0 for _ in plan.shape), plan.chunk)
    path = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    size, digest = direct_io.write_file(path, [data])
    return [mf.FileEntry(rel, size, digest)]


def _write_arrays(folder: str, plans: list[_LeafPlan], is_main: bool) -> list[mf.FileEntry]:
    """Write this process's chunks (process 0 also creates every array); return their entries."""
    context = ts.Context()
    todo = [p for p in plans if is_main or p.shards]
    opening = [
        ts.open(
            _zarr_spec(folder, p.name, p.shape, p.dtype, p.chunk),
            create=is_main,
            open=not is_main,
            assume_metadata=not is_main,
            context=context,
        )
        for p in todo
    ]
    writes, entries = [], []
    for plan, future in zip(todo, opening, strict=True):
        try:
            store = future.result()
        except ValueError as e:
            if "ALREADY_EXISTS" in str(e):
                raise BadInput(
                    f"{folder} already holds array {plan.name}: is another save writing this folder?"
                ) from None
            raise
        for bounds, data in plan.shards:
            region = tuple(slice(a, b) for a, b in bounds)
            writes.append(store[region].write(data))
    for plan in todo:  # hash while TensorStore writes
        entries.extend(_shard_entry(plan, bounds, data) for bounds, data in plan.shards)
    for w in writes:
        w.commit.result()
    if is_main:  # the array metadata TensorStore wrote, hashed as stored
        metadata = [f"{CHECKPOINT}/{plan.name}/zarr.json" for plan in todo]
        contents = rootfs.read_many([rootfs.join(folder, rel) for rel in metadata])
        entries.extend(mf.FileEntry.of_bytes(rel, data) for rel, data in zip(metadata, contents, strict=True))
    return entries


def _coordination_client() -> Any:
    """jax.distributed's coordination-service client, or None (private API, guarded)."""
    try:
        # lazily: JAX's private distributed state, read only on multi-process saves
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(getattr(distributed, "global_state", None), "client", None)


def _barrier(tag: str, phase: str, process_count: int, timeout_s: float) -> None:
    """Wait until every process reaches ``phase`` of the save named ``tag``.

    Uses the coordination service (safe from a background thread: no device
    collective that could interleave with training steps); falls back to
    ``sync_global_devices``.
    """
    if process_count == 1:
        return
    name = f"theseus-checkpoint-{tag}-{phase}"
    client = _coordination_client()
    if client is None or not hasattr(client, "wait_at_barrier"):
        multihost_utils.sync_global_devices(name)
    else:
        client.wait_at_barrier(name, int(timeout_s * 1000))


def _process_file(k: int) -> str:
    return f"{CHECKPOINT}/process-{k:05d}.json"


@dataclasses.dataclass(frozen=True)
class _Processes:
    """This process among those saving one checkpoint: its ``index`` of ``count``, and the ``tag`` and
    ``timeout_s`` of the barriers that order their writes."""

    index: int
    count: int
    tag: str
    timeout_s: float


def _commit(
    folder: str,
    plans: list[_LeafPlan],
    treedef: str,
    sidecars: dict[str, bytes],
    processes: _Processes,
    on_commit: Callable[[str], Any] | None,
) -> None:
    """Everything after the device-to-host copy: arrays, index, sidecars, manifest (in that order)."""
    process_index, process_count, tag, timeout_s = processes.index, processes.count, processes.tag, processes.timeout_s
    is_main = process_index == 0
    entries = _write_arrays(folder, plans, is_main)
    mine = json.dumps({"files": [dataclasses.asdict(e) for e in entries]}).encode()
    rootfs.write_atomic(rootfs.join(folder, _process_file(process_index)), mine)
    _barrier(tag, "written", process_count, timeout_s)
    if is_main:
        files: list[mf.FileEntry] = []
        for k in range(process_count):
            raw = mine if k == process_index else rootfs.read_bytes(rootfs.join(folder, _process_file(k)))
            files.append(mf.FileEntry.of_bytes(_process_file(k), raw))
            files.extend(mf.FileEntry(**e) for e in json.loads(raw)["files"])
        index = {"format": FORMAT, "treedef": treedef, "leaves": [p.index_entry() for p in plans]}
        published = {f"{CHECKPOINT}/{INDEX}": json.dumps(index).encode(), **sidecars}
        for rel, data in published.items():
            rootfs.write_atomic(rootfs.join(folder, rel), data)
            files.append(mf.FileEntry.of_bytes(rel, data))
        mf.write_manifest(folder, files)
    _barrier(tag, "committed", process_count, timeout_s)
    if on_commit is not None:
        on_commit(folder)


def _check_sidecars(sidecars: Mapping[str, bytes | str] | None) -> dict[str, bytes]:
    out = {}
    for rel, data in (sidecars or {}).items():
        rootfs.check_relative(rel)
        if rel == MANIFEST or rel.split("/")[0] == CHECKPOINT:
            raise BadInput(f"sidecar name {rel!r} is reserved")
        out[rel] = data.encode() if isinstance(data, str) else bytes(data)
    return out


class Checkpointer:
    """Saves train states in the background, one at a time.

    ``save`` copies this process's shards to host memory (so the caller may
    donate or overwrite the device buffers as soon as it returns), then writes
    in a background thread and calls ``on_commit(folder)`` once MANIFEST.json is
    published (on every process, after all of them have finished). The next
    ``save`` or ``wait`` waits for the previous save and re-raises its error.

    >>> import tempfile, jax.numpy as jnp
    >>> folder = tempfile.mkdtemp() + "/step-1"
    >>> with Checkpointer() as ckpt:
    ...     ckpt.save(folder, {"params": {"w": jnp.ones(4)}, "step": jnp.int32(1)}, {"job.json": b"{}"})
    >>> is_complete(folder)
    True
    """

    def __init__(self, barrier_timeout_s: float = 1800.0):
        self._barrier_timeout_s = barrier_timeout_s
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._saves = 0  # same sequence on every process: names the barriers of each save

    def save(
        self,
        folder: str,
        state: Any,
        sidecars: Mapping[str, bytes | str] | None = None,
        *,
        on_commit: Callable[[str], Any] | None = None,
    ) -> None:
        """Start saving ``state`` (and the ``sidecars`` files, name -> bytes) to ``folder``.

        Raises ValueError if ``folder`` already holds a complete checkpoint; the
        leftovers of an interrupted save (a folder without MANIFEST.json) are
        deleted first.
        """
        self.wait()
        folder = folder.rstrip("/")
        _kvstore(folder, "")  # fail now on a location TensorStore cannot write
        sidecar_bytes = _check_sidecars(sidecars)
        if rootfs.exists(rootfs.join(folder, MANIFEST)):
            raise BadInput(f"{folder} already holds a complete checkpoint; checkpoints are never overwritten")
        process_index, process_count = jax.process_index(), jax.process_count()
        self._saves += 1
        tag = f"{self._saves}-{hashlib.sha256(folder.encode()).hexdigest()[:16]}"
        plans, treedef = _plan(state, process_index)
        # a folder without a manifest is the garbage of an interrupted save (nothing may
        # reference it, by the commit order): clear it before anyone writes, but never the
        # files analyses published there, which their own record references
        if process_index == 0:
            rootfs.remove_tree_except(folder, ANALYSIS)
        _barrier(tag, "cleared", process_count, self._barrier_timeout_s)

        def run() -> None:
            try:
                _commit(
                    folder, plans, treedef, sidecar_bytes,
                    _Processes(process_index, process_count, tag, self._barrier_timeout_s), on_commit,
                )
            except BaseException as e:  # re-raised on the caller's thread by wait()
                self._error = e

        self._thread = threading.Thread(target=run, name=f"theseus-checkpoint:{folder}")
        self._thread.start()

    def wait(self) -> None:
        """Block until the pending save (if any) is committed; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wait()


def save(folder: str, state: Any, sidecars: Mapping[str, bytes | str] | None = None) -> None:
    """Save ``state`` to ``folder`` and return once the checkpoint is committed.

    >>> import tempfile, jax.numpy as jnp
    >>> folder = tempfile.mkdtemp() + "/ckpt"
    >>> save(folder, {"params": {"w": jnp.arange(3.0)}})
    >>> read_index(folder)["leaves"][0]["path"]
    'params/w'
    """
    with Checkpointer() as ckpt:
        ckpt.save(folder, state, sidecars)


def save_streamed(folder: str, leaves: Iterable[tuple[str, np.ndarray]],
                  sidecars: Mapping[str, bytes | str] | Callable[[], Mapping[str, bytes | str]] | None = None) -> None:
    """Save host arrays as a checkpoint one leaf at a time, from this one process: each ``(name, array)``
    (``params/wte/embedding``: nested mapping keys joined by ``/``) is hashed on a thread while TensorStore writes
    it, and the next is asked for meanwhile (the leaves in flight hold at most ``_STREAM_BYTES``, or one leaf),
    so a state larger than memory is saved in the format `save` writes (one chunk per leaf, each synced as
    `save`'s are, the MANIFEST last). ``sidecars`` may be a function, called
    once every leaf is written (sidecars computed meanwhile, e.g. on another thread).

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp() + "/ckpt"
    >>> save_streamed(folder, iter([("params/w", np.arange(3.0)), ("step", np.int32(0))]))
    >>> [leaf["path"] for leaf in read_index(folder)["leaves"]], is_complete(folder)
    (['params/w', 'step'], True)
    """
    if jax.process_count() > 1:
        raise NotImplementedError("save_streamed writes from one process; save a jax.Array state with save()")
    folder = folder.rstrip("/")
    sidecar_bytes = None if callable(sidecars) else _check_sidecars(sidecars)
    if is_complete(folder):
        raise BadInput(f"{folder} already holds a committed checkpoint")
    rootfs.remove_tree_except(folder, ANALYSIS)  # an interrupted save's garbage, as Checkpointer.save clears it
    local = rootfs.local_path(folder) if rootfs.is_local(folder) and sys.byteorder == "little" else None
    plans, entries, tree, chunks = _stream_leaves(folder, leaves, local)
    if local is not None:  # the chunks' new entries and folders, each folder synced once
        direct_io.sync_folders(os.path.dirname(local), [os.path.join(local, rel) for rel in chunks])
    if sidecar_bytes is None:
        sidecar_bytes = _check_sidecars(sidecars())
    _publish_streamed(folder, plans, entries, tree, sidecar_bytes)


def _stream_leaves(folder: str, leaves: Iterable[tuple[str, np.ndarray]],
                   local: str | None) -> tuple[list[_LeafPlan], list[mf.FileEntry], dict, list[str]]:
    """Write and hash every leaf of ``leaves`` into ``folder`` (``local``: its local path, where chunks are
    written directly), a bounded number in flight: the leaves' plans, their files' entries, the nested tree
    of their names, and the chunk files written directly (to sync)."""
    context = ts.Context()
    plans, entries, tree, chunks = [], [], {}, []
    # leaves being written and hashed, oldest first: (TensorStore write, hash or direct write, bytes); the disk
    # works on several (their syncs overlap) while this process converts the next, and the bytes held stay bounded
    pending: collections.deque[tuple[Any, Any, int]] = collections.deque()
    hashing = ThreadPoolExecutor(_STREAM_THREADS)  # hashlib and os.write release the GIL

    def settle(held: int, keep: int) -> None:  # wait for the oldest until at most ``held`` bytes or ``keep`` leaves
        while len(pending) > keep and sum(n for _, _, n in pending) > held:
            written, hashed, _ = pending.popleft()
            written.result()
            entries.extend(hashed.result())

    try:
        for name, leaf in leaves:
            plan, written, hashed, nbytes, chunk = _start_leaf(folder, name, leaf, tree, local, context, hashing)
            if chunk is not None:
                chunks.append(chunk)
            pending.append((written, hashed, nbytes))
            plans.append(plan)
            settle(_STREAM_BYTES, 1)
        settle(0, 0)
    except BaseException:
        for written, hashed, _ in pending:  # the writes in flight end before the caller may clear the folder
            written.exception()
            hashed.exception()
        raise
    finally:
        hashing.shutdown(wait=True)
    return plans, entries, tree, chunks


def _start_leaf(folder: str, name: str, leaf: np.ndarray, tree: dict, local: str | None, context: Any,
                hashing: ThreadPoolExecutor) -> tuple[_LeafPlan, Any, Any, int, str | None]:
    """Start writing leaf ``name`` (added to ``tree``, BadInput when its name cannot be a folder or is taken):
    its plan, TensorStore write, hash (or direct write, on ``hashing``), bytes, and chunk file when written
    directly into ``local``."""
    parts = name.split("/")
    if not parts or any(p in ("", ".", "..") or "\\" in p for p in parts) or _RESERVED.fullmatch(name):
        raise BadInput(f"leaf name {name!r} cannot be a folder of a checkpoint")
    data = np.asarray(leaf)  # a scalar stays one (ascontiguousarray makes it 1-d), as save stores it
    direct = local is not None and data.size and data.dtype.isnative  # any layout: written in C order
    data = data if direct or data.flags.c_contiguous else np.ascontiguousarray(data)
    chunk = tuple(max(d, 1) for d in data.shape)
    full = tuple((0, d) for d in data.shape)
    plan = _LeafPlan(name, [["dict", p] for p in parts], tuple(data.shape), data.dtype, chunk, [])
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if not isinstance(node, dict) or parts[-1] in node:
        raise BadInput(f"leaf name {name!r} is used twice or is inside another leaf")
    node[parts[-1]] = 0
    spec = _zarr_spec(folder, name, plan.shape, plan.dtype, chunk)
    written = ts.open(spec, create=True, context=context)  # writes the array's zarr.json
    if direct:  # its chunk is written here, meanwhile
        hashed = hashing.submit(_write_chunk, local, plan, data)
        return plan, written, hashed, data.nbytes, _chunk_file(name, tuple(0 for _ in data.shape), chunk)
    # the leaf is never changed once given, so TensorStore writes it without a copy of its own
    store = written.result()
    written = store.write(data, can_reference_source_data_indefinitely=True) if data.size else written
    shards = [(full, data)] if data.size else []
    hashed = hashing.submit(lambda: [_shard_entry(plan, b, a) for b, a in shards])
    return plan, written, hashed, data.nbytes, None


def _publish_streamed(folder: str, plans: list[_LeafPlan], entries: list[mf.FileEntry], tree: dict,
                      sidecar_bytes: dict[str, bytes]) -> None:
    """Commit a streamed save: the process file, index and sidecars, then the MANIFEST listing every file."""
    metadata = [f"{CHECKPOINT}/{plan.name}/zarr.json" for plan in plans]
    contents = rootfs.read_many([rootfs.join(folder, rel) for rel in metadata])
    entries.extend(mf.FileEntry.of_bytes(rel, data) for rel, data in zip(metadata, contents, strict=True))
    mine = json.dumps({"files": [dataclasses.asdict(e) for e in entries]}).encode()
    rootfs.write_atomic(rootfs.join(folder, _process_file(0)), mine)
    files = [mf.FileEntry.of_bytes(_process_file(0), mine), *entries]
    treedef = str(jax.tree_util.tree_structure(tree))
    index = {"format": FORMAT, "treedef": treedef, "leaves": [p.index_entry() for p in plans]}
    for rel, data in {f"{CHECKPOINT}/{INDEX}": json.dumps(index).encode(), **sidecar_bytes}.items():
        rootfs.write_atomic(rootfs.join(folder, rel), data)
        files.append(mf.FileEntry.of_bytes(rel, data))
    mf.write_manifest(folder, files)


def is_complete(folder: str) -> bool:
    """Whether ``folder`` holds a committed checkpoint (its MANIFEST.json exists).

    >>> is_complete("/nonexistent")
    False
    """
    return rootfs.exists(rootfs.join(folder.rstrip("/"), MANIFEST))


# ---------------------------------------------------------------------------
# restoring


def read_index(folder: str) -> dict:
    """The checkpoint's index: ``{"format", "treedef", "leaves": [{"path", "shape", "dtype", ...}]}``.

    >>> import tempfile, jax.numpy as jnp
    >>> folder = tempfile.mkdtemp() + "/ckpt"; save(folder, {"w": jnp.zeros((2, 3))})
    >>> read_index(folder)["leaves"][0]["shape"]
    [2, 3]
    """
    where = rootfs.join(folder.rstrip("/"), CHECKPOINT, INDEX)
    try:
        raw = rootfs.read_bytes(where)
    except FileNotFoundError:
        raise MissingFile(f"not a checkpoint: no {where}") from None
    return _parse_index(raw, where)


def _parse_index(raw: bytes, where: str) -> dict:
    """The index in ``raw`` (read from ``where``); ValueError naming ``where`` for another format."""
    try:
        index = json.loads(raw)
    except ValueError as e:
        raise BadInput(f"{where} is not JSON: {e}") from None
    found = index.get("format") if isinstance(index, dict) else None
    if found != FORMAT:
        raise BadInput(f"{where}: unknown checkpoint format {found!r}")
    return index


def saved_for(sealed: mf.Sealed, verify: bool = True) -> str | None:
    """The id of the node a checkpoint folder was saved for, as its ``job.json`` names it (checked against the
    manifest with ``verify``); None when the folder has no ``job.json`` or it names no node.

    >>> import tempfile, jax.numpy as jnp
    >>> folder = tempfile.mkdtemp() + "/ckpt"; save(folder, {"w": jnp.zeros(1)}, {"job.json": '{"node": "abc"}'})
    >>> saved_for(mf.Sealed(folder))
    'abc'
    """
    if JOB_FILE not in sealed.listed:
        return None
    try:
        body = json.loads(sealed.read(JOB_FILE, check=verify))
    except ValueError as e:
        raise mf.DamagedFolder(f"{sealed.where(JOB_FILE)} is not JSON: {e}") from None
    node = body.get("node") if isinstance(body, dict) else None
    return node if isinstance(node, str) and node else None


@dataclasses.dataclass
class RestoreReport:
    """What a restore did, leaf by leaf (leaf paths as in :func:`leaf_paths`).

    ``restored``: read from the checkpoint. ``missing``: in the target only, kept
    the target's value. ``mismatched``: in both with a different shape or dtype,
    kept the target's value (path -> explanation). ``unused``: in the checkpoint only.

    >>> print(RestoreReport(restored=["step"], missing=["params/new"]))
    restored 1 leaves; missing from checkpoint (initialised): params/new
    """

    restored: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    mismatched: dict[str, str] = dataclasses.field(default_factory=dict)
    unused: list[str] = dataclasses.field(default_factory=list)

    @property
    def exact(self) -> bool:
        """True when the checkpoint and the target have the same leaves, shapes and dtypes."""
        return not (self.missing or self.mismatched or self.unused)

    def __str__(self) -> str:
        parts = [f"restored {len(self.restored)} leaves"]
        if self.missing:
            parts.append("missing from checkpoint (initialised): " + ", ".join(self.missing))
        if self.mismatched:
            mismatched = ", ".join(f"{k} [{v}]" for k, v in self.mismatched.items())
            parts.append(f"shape/dtype mismatch (initialised): {mismatched}")
        if self.unused:
            parts.append("in checkpoint but not in target: " + ", ".join(self.unused))
        return "; ".join(parts)


def _describe(shape: Any, dtype: Any) -> str:
    return f"{tuple(shape)} {np.dtype(dtype).name}"


def _target(name: str, leaf: Any, entry: dict | None) -> tuple[tuple | None, np.dtype | None, Any, Any]:
    """(shape, dtype, sharding, initial value) that the target asks for at ``name``."""
    if isinstance(leaf, jax.Array):
        return tuple(leaf.shape), np.dtype(leaf.dtype), leaf.sharding, leaf
    if isinstance(leaf, jax.ShapeDtypeStruct):
        sharding = leaf.sharding
        if sharding is None:
            if jax.process_count() > 1:
                raise BadInput(f"target leaf {name} has no sharding (required with several processes)")
            sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return tuple(leaf.shape), np.dtype(leaf.dtype), sharding, None
    if isinstance(leaf, jax.sharding.Sharding):
        if entry is None:
            return None, None, leaf, None
        return tuple(entry["shape"]), np.dtype(entry["dtype"]), leaf, None
    raise TypeError(f"target leaf {name} is a {type(leaf).__name__}; expected jax.Array, ShapeDtypeStruct or Sharding")


def _names(names: list[str], limit: int = 12) -> str:
    more = f" ... (+{len(names) - limit})" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def restore(
    folder: str,
    target: Any,
    *,
    partial: bool = False,
    verify: bool = True,
    sealed: mf.Sealed | None = None,
) -> tuple[Any, RestoreReport]:
    """Read the checkpoint in ``folder`` into the structure and shardings of ``target``.

    ``target`` is a pytree whose leaves are ``jax.Array`` (shape, dtype, sharding,
    and the value kept when ``partial`` and the leaf cannot be restored),
    ``jax.ShapeDtypeStruct`` (with a sharding; without one, the first local
    device on a single process) or a ``Sharding`` (shape and dtype from the
    checkpoint). Each process reads only the slices its devices hold.

    Every file MANIFEST.json lists must be present, a regular file (never a link or a
    FIFO) and of its listed size; ``verify`` (the default) also checks the sha256 of
    every file read, from the bytes read (`theseus.train.manifest.DamagedFolder` naming
    the file); ``verify=False`` skips the hashes only. ``sealed``: the folder already
    opened by the caller (one listing). ``partial=False``: any difference in leaves,
    shapes or dtypes is a ValueError naming the leaves. ``partial=True``: restore what
    matches, keep the target's value elsewhere. Returns ``(state, report)``.
    Raises FileNotFoundError("incomplete checkpoint: no MANIFEST.json in ...")
    for an interrupted save.

    >>> import tempfile, jax, jax.numpy as jnp
    >>> folder = tempfile.mkdtemp() + "/ckpt"
    >>> save(folder, {"w": jnp.arange(4.0), "step": jnp.int32(7)})
    >>> abstract = {"w": jax.ShapeDtypeStruct((4,), jnp.float32), "step": jax.ShapeDtypeStruct((), jnp.int32)}
    >>> state, report = restore(folder, abstract)
    >>> int(state["step"]), report.exact
    (7, True)
    """
    folder = folder.rstrip("/")
    sealed = mf.Sealed(folder) if sealed is None else sealed
    for rel in sorted(sealed.listed):  # present, regular, of its size: TensorStore reads no FIFO, no link, and
        sealed.entry(rel)  # no missing chunk (which it would read as zeros)
    index = _parse_index(sealed.read(f"{CHECKPOINT}/{INDEX}", check=verify), sealed.where(f"{CHECKPOINT}/{INDEX}"))
    entries = {e["path"]: e for e in index["leaves"]}
    flat, treedef = _flatten(target)
    report, wanted, values = _match(folder, flat, entries, partial)
    if not partial and not report.exact:
        _refuse_mismatch(folder, report)
    chunks = {name: tuple(max(int(c), 1) for c in entries[name].get("chunk_shape", wanted[name][0]))
              for name in wanted}
    arrays = _read_arrays(sealed, wanted, chunks, verify)
    out = [arrays.get(name, value) for (name, _, _), value in zip(flat, values, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, out), report


def _match(folder: str, flat: list[tuple[str, Any, list]], entries: dict[str, dict],
           partial: bool) -> tuple[RestoreReport, dict[str, tuple[tuple, np.dtype, Any]], list[Any]]:
    """Pair the target's leaves ``flat`` with the checkpoint's index ``entries``: the report, the
    ``(shape, dtype, sharding)`` of each leaf to read, and each target leaf's initial value (BadInput when
    ``partial`` keeps a leaf it cannot read and the target holds no value for it)."""
    report = RestoreReport()
    wanted: dict[str, tuple[tuple, np.dtype, Any]] = {}
    values: list[Any] = []
    for name, leaf, _ in flat:
        entry = entries.get(name)
        shape, dtype, sharding, initial = _target(name, leaf, entry)
        if entry is None:
            report.missing.append(name)
        elif (tuple(entry["shape"]), np.dtype(entry["dtype"])) != (shape, dtype):
            report.mismatched[name] = (
                f"checkpoint {_describe(entry['shape'], entry['dtype'])} != target {_describe(shape, dtype)}"
            )
        else:
            report.restored.append(name)
            wanted[name] = (shape, dtype, sharding)
        if name not in wanted and partial and initial is None:
            raise BadInput(f"cannot restore {name} from {folder} and the target holds no value for it")
        values.append(initial)
    target_names = {name for name, _, _ in flat}
    report.unused = [name for name in entries if name not in target_names]
    return report, wanted, values


def _refuse_mismatch(folder: str, report: RestoreReport) -> None:
    """Raise BadInput naming the leaves by which checkpoint ``folder`` differs from the target."""
    problems = []
    if report.missing:
        problems.append(f"not in checkpoint: {_names(report.missing)}")
    if report.mismatched:
        problems.append("shape/dtype mismatch: " + _names([f"{k} ({v})" for k, v in report.mismatched.items()]))
    if report.unused:
        problems.append(f"not in target: {_names(report.unused)}")
    raise BadInput(
        f"checkpoint {folder} does not match the target: {'; '.join(problems)} "
        "(partial=True restores what matches)"
    )


def _covered(bounds: tuple, chunk: tuple[int, ...]) -> tuple[list[tuple[int, ...]], bool]:
    """(start of every chunk the slice ``bounds`` touches, whether the slice is exactly one whole chunk)."""
    ranges = [range(a // c, -(-b // c)) for (a, b), c in zip(bounds, chunk, strict=True)]
    starts = [tuple(i * c for i, c in zip(coords, chunk, strict=True)) for coords in itertools.product(*ranges)]
    whole = len(starts) == 1 and all(a % c == 0 and b - a == c for (a, b), c in zip(bounds, chunk, strict=True))
    return starts, whole


def _read_arrays(sealed: mf.Sealed, wanted: dict[str, tuple[tuple, np.dtype, Any]],
                 chunks: dict[str, tuple[int, ...]], verify: bool) -> dict[str, jax.Array]:
    """Read each leaf's addressable slices (each distinct slice once) and assemble global arrays; with ``verify``,
    check every chunk read against the manifest (in memory when a slice is one whole chunk, else its file)."""
    folder = sealed.folder
    if verify:  # the arrays' metadata, which TensorStore reads when it opens them
        for name in wanted:
            sealed.hash_file(f"{CHECKPOINT}/{name}/zarr.json")
    context = ts.Context()
    opening = {
        name: ts.open({"driver": "zarr3", "kvstore": _kvstore(folder, name)}, open=True, read=True, context=context)
        for name in wanted
    }
    reads: dict[str, dict[tuple, Any]] = {}
    in_memory: list[tuple[str, tuple, str]] = []  # (leaf, slice, chunk file) hashed from the bytes read
    from_file: set[str] = set()  # chunk files a slice reads only in part
    for name, (shape, dtype, sharding) in wanted.items():
        store = opening[name].result()
        if tuple(store.shape) != shape or store.dtype.numpy_dtype != dtype:
            raise BadInput(
                f"{folder}: array {name} is {_describe(store.shape, store.dtype.numpy_dtype)}, "
                f"index says {_describe(shape, dtype)}"
            )
        reads[name] = {}
        for index in sharding.addressable_devices_indices_map(shape).values():
            bounds = _bounds(index, shape)
            if bounds in reads[name]:
                continue
            if math.prod(b - a for a, b in bounds):  # an empty slice reads no chunk
                starts, whole = _covered(bounds, chunks[name])
                files = [_chunk_file(name, start, chunks[name]) for start in starts]
                if whole:
                    in_memory.append((name, bounds, files[0]))
                else:
                    from_file.update(files)
            reads[name][bounds] = store[tuple(slice(a, b) for a, b in bounds)].read()

    pieces = {name: {bounds: future.result() for bounds, future in slices.items()} for name, slices in reads.items()}
    if verify:
        _check_chunks(sealed, [(rel, pieces[name][bounds]) for name, bounds, rel in in_memory],
                      sorted(from_file - {rel for _, _, rel in in_memory}))
    arrays = {}
    for name, (shape, _, sharding) in wanted.items():
        arrays[name] = jax.make_array_from_callback(
            shape, sharding, lambda index, p=pieces[name], s=shape: p[_bounds(index, s)]
        )
    return arrays


def read_leaf(sealed: mf.Sealed, entry: Mapping[str, Any]) -> np.ndarray:
    """One leaf of a sealed checkpoint (``entry``: its `read_index` entry) as a host array, read alone and checked
    against the manifest as it is read; no device and no other leaf is touched, so a converter holds one leaf at
    a time.

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp() + "/ckpt"
    >>> save_streamed(folder, iter([("params/w", np.arange(3.0)), ("step", np.int32(0))]))
    >>> [entry] = [e for e in read_index(folder)["leaves"] if e["path"] == "params/w"]
    >>> read_leaf(mf.Sealed(folder), entry).tolist()
    [0.0, 1.0, 2.0]
    """
    name, shape = entry["path"], tuple(int(d) for d in entry["shape"])
    chunk = tuple(max(int(c), 1) for c in entry.get("chunk_shape", shape))
    sealed.hash_file(f"{CHECKPOINT}/{name}/zarr.json")  # the metadata TensorStore reads when it opens the array
    store = ts.open({"driver": "zarr3", "kvstore": _kvstore(sealed.folder, name)}, open=True, read=True).result()
    if tuple(store.shape) != shape or store.dtype.numpy_dtype != np.dtype(entry["dtype"]):
        raise BadInput(f"{sealed.folder}: array {name} is {_describe(store.shape, store.dtype.numpy_dtype)}, "
                         f"index says {_describe(shape, np.dtype(entry['dtype']))}")
    starts, whole = _covered(tuple((0, d) for d in shape), chunk)
    files = [_chunk_file(name, start, chunk) for start in starts]
    if whole and math.prod(shape) and _raw_chunks(sealed.folder, store, shape):
        return _read_chunk(sealed, files[0], store.dtype.numpy_dtype, shape)
    data = store.read().result()
    if not math.prod(shape):
        return data
    _check_chunks(sealed, [(files[0], data)] if whole else [], [] if whole else files)
    return data


def _raw_chunks(folder: str, store: Any, shape: tuple[int, ...]) -> bool:
    """Whether the array ``store`` of the local ``folder`` is one chunk file holding its bytes as this host lays
    them out (the ``bytes`` codec, little endian, on a little-endian host), so the file can be read as it is."""
    codecs = store.codec.to_json().get("codecs")
    return (rootfs.is_local(folder) and sys.byteorder == "little" and store.dtype.numpy_dtype.isnative
            and codecs == [{"name": "bytes", "configuration": {"endian": "little"}}]
            and tuple(store.chunk_layout.read_chunk.shape or ()) == shape)


def _read_chunk(sealed: mf.Sealed, rel: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The chunk file ``rel`` as an array, read around the page cache and hashed as read (`theseus.store.direct_io`),
    checked against the manifest."""
    listed = sealed.entry(rel)  # listed, present, a regular file of the listed size
    data, digest = direct_io.read_file(rootfs.local_path(sealed.where(rel)))
    if data.size != listed.size or digest != listed.sha256:
        raise mf.DamagedFolder(f"corrupt file {sealed.where(rel)}: sha256 {digest[:8]}... != {listed.sha256[:8]}... "
                               f"in {MANIFEST}")
    return data.view(dtype).reshape(shape)


def _check_chunks(sealed: mf.Sealed, read: list[tuple[str, np.ndarray]], files: list[str],
                  threads: int = 8) -> None:
    """Check chunks against the manifest: those ``read`` whole from their bytes in memory, ``files`` from disk."""
    if sys.byteorder != "little":
        raise NotImplementedError("checkpoint checksums assume a little-endian host")

    def check(job: tuple[str, np.ndarray | None]) -> None:
        rel, data = job
        if data is None:
            sealed.hash_file(rel)
        else:
            sealed.check_bytes(rel, np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    with ThreadPoolExecutor(threads) as pool:  # hashlib releases the GIL on large buffers
        list(pool.map(check, [*read, *((rel, None) for rel in files)]))
