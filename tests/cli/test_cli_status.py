"""One status rule for ``theseus ls``, ``theseus show``, the UI and ``Store.runs()``: a run killed
with SIGKILL 16 minutes ago is ``stale`` in all four, a run writing now is ``running``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import Node, Store
from theseus.ui.api import Api

runner = CliRunner()

# a job's first records, written with a clock 16 minutes slow, then the process is killed
KILLED = """
import os, signal, sys, time
from theseus.store import Node, Store
real = time.time_ns
time.time_ns = lambda: real() - 16 * 60 * 10**9
node = Node.start("killed")
with Store(sys.argv[1]).writer() as w:
    w.status(node, "running")
    w.write(node, {"train/loss": 3.0})
print(node.nonce, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_16_minutes_ago_is_stale_everywhere(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    killed = done.stdout.split()[0]
    live = Node.start("live")
    with Store(tmp_path).writer() as w:
        w.status(live, "running")
        w.write(live, {"train/loss": 2.0})
    expected = {killed: "stale", live.nonce: "running"}

    runs = Store(tmp_path).runs()
    assert dict(zip(runs["nonce"], runs["status"])) == expected

    result = runner.invoke(app, ["ls", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert {r["nonce"]: r["status"] for r in json.loads(result.output)} == expected
    result = runner.invoke(app, ["ls", str(tmp_path)], env={"COLUMNS": "120"})
    for nonce, status in expected.items():
        assert status in next(line for line in result.output.splitlines() if nonce in line)

    for nonce, status in expected.items():
        result = runner.invoke(app, ["show", str(tmp_path), nonce], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        cells = [[c.strip() for c in line.split("│")[1:3]] for line in result.output.splitlines() if "│" in line]
        assert ["status", status] in cells and "_status" not in result.output, result.output

    api = Api(Store(str(tmp_path)))
    api.follower.poll()
    assert {r["nonce"]: r["status"] for r in api.rows()} == expected
