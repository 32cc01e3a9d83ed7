"""The cost of a new lineage's nonce claim (``theseus.store.nonces``) on a writer's first write + flush, local disk.

For roots holding 0, 1,000 and 10,000 runs (each under its own name: the claim's look at the log probes every
name's folder for the nonce), a new lineage's first ``write`` + ``flush`` is timed with the claim and with
``nonces.begin`` replaced by a no-op; medians of ``--repeat`` rounds, in a fresh writer each.

    uv run python bench/nonce_claim.py [--repeat 30] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from unittest import mock

from theseus.store import Node, Store, nonces


def root_with(runs: int, parent: str) -> str:
    """A root whose log holds ``runs`` run folders, one name each (the claim lists folders, reads no file)."""
    root = tempfile.mkdtemp(dir=parent)
    for i in range(runs):
        os.makedirs(f"{root}/log/name=p.g.r{i}/nonce={i:06x}")
    return root


def first_flush(store: Store) -> float:
    """Seconds of a new lineage's first write and flush in a fresh writer."""
    node = Node.start("proj.bench.new")
    with store.writer() as w:
        began = time.perf_counter()
        w.write(node, {"loss": 1.0})
        w.flush()
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    for runs in (0, 1_000, 10_000):
        root = root_with(runs, args.dir)
        try:
            store = Store(root)
            first_flush(store)  # the process's one-time costs
            claimed = statistics.median(first_flush(store) for _ in range(args.repeat))
            with mock.patch.object(nonces, "begin", lambda *a, **k: None):
                unclaimed = statistics.median(first_flush(store) for _ in range(args.repeat))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{runs:6d} runs in the root: first write + flush {claimed * 1e3:7.2f} ms with the nonce claim, "
              f"{unclaimed * 1e3:7.2f} ms without (+{(claimed - unclaimed) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
