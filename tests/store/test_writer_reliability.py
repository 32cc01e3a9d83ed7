"""The writer under concurrency, failures, bad records and fork: no record lost, refused or multiplied."""

import subprocess
import sys
import time

from theseus.store import Node, Store

COMPACTOR = r"""
import os, sys, time
from theseus.store import Node, Store
root, seconds = sys.argv[1], float(sys.argv[2])
store, busy = Store(root), [Node.start(f"proj.race.busy{i}") for i in range(20)]
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end and not os.path.exists(os.path.join(root, "stop")):
    with store.writer(flush_interval=60) as w:
        for _ in range(3):  # small segments of many runs for the next compaction to retire
            for node in busy:
                w.write(node, {"loss": 1.0})
            w.flush()
    store.compact()
"""


def test_first_write_while_another_process_compacts(tmp_path):
    """A fresh writer's first write() reads the root's key types; a compaction retiring
    the segments it lists meanwhile must not make that write fail."""
    root = tmp_path / "root"
    compactor = subprocess.Popen([sys.executable, "-c", COMPACTOR, str(root), "30"], stdout=subprocess.PIPE, text=True)
    assert compactor.stdout.readline() == "ready\n"
    written, errors = [], []
    try:
        deadline = time.monotonic() + 6
        while len(written) < 150 and time.monotonic() < deadline:
            node = Node.start("proj.race.fresh")
            w = Store(root).writer(flush_interval=60)
            try:
                w.write(node, {"loss": 2.0, "step": 1})
            except Exception as e:  # noqa: BLE001 - any failure is the test's failure
                errors.append(e)
            w.close()
            written.append(node)
    finally:
        (root / "stop").touch()
        assert compactor.wait(timeout=60) == 0
    assert not errors, f"{len(errors)} of {len(written)} first writes failed: {errors[:3]!r}"
    assert len(written) >= 20
    assert {n.nonce for n in Store(root).find().spec(group="race", run="fresh").all()} == {n.nonce for n in written}
