"""A synthetic root of many runs for the ui tests and bench: projects, groups, configs, statuses,
checkpoint records, an evaluation key, written through the public writer without JAX.

>>> import tempfile
>>> from theseus.store import Store
>>> root = tempfile.mkdtemp()
>>> nonces = make_runs(root, runs=6, nodes=4)
>>> len(Store(root).runs()) == len(nonces) == 6
True
"""

from __future__ import annotations

import yaml

from theseus.store import Node, Store
from theseus.store.nonces import NonceTaken

PROJECTS = ("vision", "lang", "audio")
GROUPS = ("sweep", "base")


def make_runs(root: str, runs: int = 1000, nodes: int = 20, compact: bool = True) -> list[str]:
    """Write ``runs`` runs of ``nodes`` nodes each (``val/loss`` every 5th node, a checkpoint record every
    10th in every 10th run); run i's status cycles finished / failed / running; returns the nonces in order."""
    store = Store(root)
    nonces = []
    with store.writer(flush_interval=3600) as w:
        for i in range(runs):
            name = f"{PROJECTS[i % len(PROJECTS)]}.{GROUPS[i // 3 % len(GROUPS)]}.run-{i:04d}"
            lr = [1e-3, 3e-4, 1e-4][i % 3 if i % 7 else 1]
            config = {"optimization": {"lr": lr}, "training": {"tokens": 1000 * nodes, "seed": i}}
            while True:  # a nonce drawn twice (likely among tens of thousands of runs): nothing written, draw again
                node = Node.start(name)
                try:
                    w.job(node, "gpt/train/pretrain", yaml.safe_dump(config))
                    break
                except NonceTaken:
                    continue
            for seq in range(nodes):
                values = {"train/loss": 5.0 / (1 + seq) + i * 1e-4, "train/tokens": 1000 * seq}
                if seq % 5 == 4:
                    values["val/loss"] = 5.5 / (1 + seq) + i * 1e-4
                w.write(node, values)
                if seq % 10 == 9 and i % 10 == 0:  # commits flush: only some runs have checkpoints
                    w.checkpoint(node, f"objects/{node.id}")
                if seq < nodes - 1:
                    node = node.next()
            if i % 3 == 0:
                w.write(node, {"eval/addition/exact_match": 0.25})
                w.finished(node)
            elif i % 3 == 1:
                w.failed(node, f"RuntimeError: synthetic failure {i}")
            nonces.append(node.nonce)
            if i % 50 == 49:
                w.flush()
    if compact:
        store.compact()
    return nonces
