"""``trainer.tick()`` in an inspection session (a resumed checkpoint, ticked outside ``job()``): the
branch it writes is closed when the trainer is closed or the process exits, and ``theseus ls`` and
the UI list it only when asked (``ls --all``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.train._helpers import pretrain
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Store
from theseus.ui.api import Api

runner = CliRunner()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("inspect"))
    pretrain(root, "train-gpt", 4, checkpoint_interval=2, report_interval=1)
    return root


def listed(root, *options) -> dict[str, str]:
    result = runner.invoke(app, ["ls", root, "--json", *options])
    assert result.exit_code == 0, result.output
    return {r["nonce"]: r["status"] for r in json.loads(result.output)}


def ui_rows(root, **options) -> dict[str, str]:
    api = Api(Store(root))
    api.follower.poll()
    return {r["nonce"]: r["status"] for r in api.rows(**options)}


def test_a_ticked_branch_is_closed_with_the_trainer_and_listed_only_when_asked(root):
    [run] = listed(root)
    with quick(root) as q:
        q.find().nonce(run).checkpoint().where("train/tokens", "<=", 8 * 32 * 2).sort("train/loss").resume()
        trainer = q.build().create()
        trainer.tick()
        branch = trainer.node.nonce
        assert branch != run and listed(root) == {run: "finished"}  # the open session is not among the runs
        assert listed(root, "--all") == {run: "finished", branch: "inspecting"}
        trainer.tick()
        trainer.close()
    assert listed(root, "--all")[branch] == "inspected" and listed(root) == {run: "finished"}
    assert ui_rows(root) == {run: "finished"}
    assert ui_rows(root, inspections=True)[branch] == "inspected"
    assert Store(root).find().nonce(branch).newest().first().seq == 2  # closed at its last tick


TICK_AND_EXIT = """
import sys
from theseus.quick import quick
with quick(sys.argv[1]) as q:
    q.find().nonce(sys.argv[2]).checkpoint().seq(2).branch()
    trainer = q.build().create()
    trainer.tick()
    print(trainer.node.nonce, flush=True)
"""


def test_a_ticked_branch_is_closed_when_the_process_exits(root):
    [run] = [n for n, status in listed(root).items() if status == "finished"]
    done = subprocess.run([sys.executable, "-c", TICK_AND_EXIT, root, run], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    branch = done.stdout.split()[-1]
    assert listed(root, "--all")[branch] == "inspected" and branch not in listed(root)
