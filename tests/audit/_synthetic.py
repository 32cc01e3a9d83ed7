"""A synthetic root for audit tests and the replay bench: one run of N nodes with K checkpoint
folders in the real layout (zarr-like array files, index.json, config.yaml, MANIFEST.json
written by ``theseus.train.manifest``), built without JAX.

Run as a script, it times ``audit()`` of 1,000 nodes and 20 checkpoints of ~19 MB each,
with and without checksums, and the bytes the process read meanwhile (Linux)::

    uv run python -m tests.audit._synthetic

>>> import tempfile
>>> from theseus.audit import audit
>>> root = tempfile.mkdtemp()
>>> nonce = make_synthetic_root(root, nodes=10, checkpoints=2, array_bytes=64)
>>> report = audit(root)
>>> report.ok, [c.seq for c in report.runs[0].checkpoints]
(True, [4, 9])
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time

import numpy as np
import yaml

from theseus.audit import audit
from theseus.store import Node, Store
from theseus.store.fs import write_atomic
from theseus.train.manifest import FileEntry, write_manifest

CONFIG = {"architecture": {"n_embd": 32, "n_layers": 2}, "training": {"tokens": 4096, "batch_size": 8}}


def make_synthetic_root(root: str, nodes: int = 1000, checkpoints: int = 20, arrays: int = 4,
                        array_bytes: int = 1 << 16, name: str = "bench.audit.synthetic", seed: int = 0) -> str:
    """Write the run into ``root`` (a local folder); returns its nonce. Checkpoints sit at
    every ``nodes // checkpoints``-th node, each with ``arrays`` arrays of ``array_bytes`` bytes."""
    if not 0 < checkpoints <= nodes:
        raise ValueError(f"need 0 < checkpoints <= nodes, got {checkpoints} and {nodes}")
    store = Store(root)
    rng = np.random.default_rng(seed)
    every = nodes // checkpoints
    node = Node.start(name)
    with store.writer() as w:
        w.job(node, "gpt/train/pretrain", yaml.safe_dump(CONFIG))
        for seq in range(nodes):
            w.write(node, {"train/loss": float(5.0 / (1 + seq)), "train/tokens": 4096 * seq})
            if (seq + 1) % every == 0 and (seq + 1) // every <= checkpoints:
                _checkpoint(store.objects(node), rng, arrays, array_bytes)
                w.checkpoint(node, f"objects/{node.id}")
            if seq < nodes - 1:
                node = node.next()
        w.finished(node)
    return node.nonce


def _checkpoint(folder: str, rng: np.random.Generator, arrays: int, array_bytes: int) -> None:
    files: dict[str, bytes] = {}
    leaves = []
    for i in range(arrays):
        leaf = f"params/w{i}"
        meta = {"zarr_format": 3, "node_type": "array", "shape": [array_bytes // 4], "data_type": "float32"}
        files[f"checkpoint/{leaf}/zarr.json"] = json.dumps(meta).encode()
        files[f"checkpoint/{leaf}/c/0"] = rng.integers(0, 256, array_bytes, dtype=np.uint8).tobytes()
        leaves.append({"path": leaf, "shape": [array_bytes // 4], "dtype": "float32"})
    files["checkpoint/index.json"] = json.dumps({"format": "theseus.checkpoint/1", "leaves": leaves}).encode()
    files["config.yaml"] = yaml.safe_dump(CONFIG).encode()
    for rel, data in files.items():
        write_atomic(f"{folder}/{rel}", data)
    write_manifest(folder, [FileEntry.of_bytes(rel, data) for rel, data in files.items()])


def _rchar() -> int:
    try:
        with open("/proc/self/io") as f:
            return int(next(line.split()[1] for line in f if line.startswith("rchar:")))
    except (OSError, StopIteration, ValueError):
        return 0


def main() -> None:
    """Time audit() on the bench's synthetic root (best of 3, after one warm-up)."""
    root = tempfile.mkdtemp(prefix="theseus-audit-bench-")
    try:
        make_synthetic_root(root, nodes=1000, checkpoints=20, arrays=8, array_bytes=2_400_000)
        for label, verify in (("checksums", True), ("sizes only", False)):
            audit(root, verify_checksums=verify)
            best, read = float("inf"), 0
            for _ in range(3):
                before, start = _rchar(), time.perf_counter()
                report = audit(root, verify_checksums=verify)
                best, read = min(best, time.perf_counter() - start), _rchar() - before
            assert report.ok, report.errors
            print(f"audit, 1,000 nodes, 20 checkpoints, {label}: {best:.3f} s; read {read / 1e6:.1f} MB, "
                  f"checkpoint bytes verified {report.bytes_verified / 1e6:.1f} MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
