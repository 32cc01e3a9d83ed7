"""Issue 27, section 3: `theseus run ... --resume`, SIGTERM preemption and `training.steps`.

A run stopped by SIGTERM commits a checkpoint at the step it was on, is recorded
``preempted`` and exits 75; `--resume` continues that lineage (same nonce) and ends
bitwise where an uninterrupted run ends. Without `--resume`, re-running a name whose
newest lineage did not finish prints the hint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from tests.train._helpers import BASE, write_dataset
from theseus.cli import app
from theseus.jobs import EXIT_PREEMPTED
from theseus.store import Node, Store
from theseus.train.manifest import read_manifest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the tiny config of the trainer tests, as CLI overrides; a constant learning rate (no warmup
# nor decay), so the length of the run changes no step's update and runs of other lengths compare
TINY = [f"{section}.{key}={value}" for section, values in BASE.items() for key, value in values.items()
        if key != "tokens"] + ["logging.report_interval=1", "logging.checkpoint_interval=1000",
                               "logging.validation_interval=1000", "training.validation=false"]


def _run(*args: str):
    return CliRunner().invoke(app, ["run", *args], catch_exceptions=False)


def _checkpoint_files(store: Store, node: Node) -> dict[str, str]:
    """sha256 of each array file of ``node``'s checkpoint, by path."""
    return {path: entry.sha256 for path, entry in read_manifest(store.objects(node)).items()
            if path.startswith("checkpoint/")}


def _nodes(store: Store, run: str) -> list[Node]:
    try:
        return store.find().spec(run=run).all()
    except FileNotFoundError:  # the run has not written yet
        return []


@pytest.mark.slow
def test_sigterm_commits_the_step_and_resume_continues_bitwise(tmp_path):
    write_dataset(tmp_path)
    root, store = str(tmp_path), Store(tmp_path)
    # a long run, stopped by SIGTERM from outside once it has written a few steps
    proc = subprocess.Popen([sys.executable, "-m", "theseus.cli", "run", "gpt/train/pretrain", "pre", root,
                             *TINY, "training.steps=100000"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(_nodes(store, "pre")) < 6:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert "--resume" in err and "preempted after step" in err

    [run] = store.runs().filter(store.runs()["name"] == "general.default.pre").iter_rows(named=True)
    assert run["status"] == "preempted"
    stopped = store.find().nonce(run["nonce"]).checkpoint().last()
    assert stopped.seq == store.find().nonce(run["nonce"]).last().seq >= 5  # the checkpoint is the tip
    ls = CliRunner().invoke(app, ["ls", root])
    assert "preempted" in ls.output

    # --resume continues the same lineage to 3 steps past the stop
    end = stopped.seq + 3
    result = _run("gpt/train/pretrain", "pre", root, *TINY, f"training.steps={end}", "--resume")
    assert result.exit_code == 0, result.output
    assert f"resume | general.default.pre:{run['nonce']} (preempted) from its checkpoint at seq {stopped.seq}, " \
           "continuing it" in result.output
    resumed = store.find().nonce(run["nonce"]).finished().last()
    assert resumed.seq == end and len(store.find().spec(run="pre").all()) == end + 1  # one lineage, no step twice

    # the same length uninterrupted, as another run: the same losses at every step, the same final arrays
    assert _run("gpt/train/pretrain", "straight", root, *TINY, f"training.steps={end}").exit_code == 0
    straight = store.find().spec(run="straight").finished().last()
    losses = [store.find().spec(run=r).select(["train/loss"]) for r in ("pre", "straight")]
    assert losses[0] == losses[1] and len(losses[0]) == end
    assert _checkpoint_files(store, resumed) == _checkpoint_files(store, straight)


def _unfinished(root, name: str = "tok", nonce: str = "abcdef", how: str = "failed") -> None:
    """A lineage of ``data/tokenize/pydoc`` run ``name`` that did not finish."""
    node = Node(f"general.default.{name}", nonce, 0)
    with Store(root).writer() as w:
        w.job(node, "data/tokenize/pydoc", "data:\n  max_samples: 3\n")
        if how == "failed":
            w.failed(node, "boom")
        else:
            w.status(node, how)


def test_rerunning_an_unfinished_name_prints_the_resume_hint(tmp_path):
    _unfinished(tmp_path)
    result = _run("data/tokenize/pydoc", "tok", str(tmp_path), "data.max_samples=3")
    assert result.exit_code == 0, result.output
    assert "hint | the newest lineage general.default.tok:abcdef is failed (no checkpoint yet)" in result.output
    assert f"theseus run data/tokenize/pydoc tok {tmp_path} --resume" in result.output
    assert len({n.nonce for n in Store(tmp_path).find().spec(run="tok").finished().all()}) == 1  # a new lineage ran


def test_a_finished_name_gets_no_hint(tmp_path):
    assert _run("data/tokenize/pydoc", "tok", str(tmp_path), "data.max_samples=3").exit_code == 0
    result = _run("data/tokenize/pydoc", "tok", str(tmp_path), "data.max_samples=3", "data.overwrite=True")
    assert result.exit_code == 0 and "hint" not in result.output


def test_resume_without_a_checkpoint_starts_at_step_0_and_says_so(tmp_path):
    _unfinished(tmp_path, how="preempted")
    result = _run("data/tokenize/pydoc", "tok", str(tmp_path), "--resume")
    assert result.exit_code == 0, result.output
    assert "resume | general.default.tok:abcdef (preempted) has no committed checkpoint: starting a new " \
           "lineage at step 0" in result.output
    result = _run("data/tokenize/pydoc", "fresh", str(tmp_path), "--resume", "data.overwrite=True")
    assert "resume | no lineage of fresh in" in result.output and result.exit_code == 0


def test_resume_of_a_finished_lineage_does_nothing(tmp_path):
    assert _run("data/tokenize/pydoc", "tok", str(tmp_path), "data.max_samples=3").exit_code == 0
    before = Store(tmp_path).runs().height
    result = _run("data/tokenize/pydoc", "tok", str(tmp_path), "--resume")
    assert result.exit_code == 0 and "finished: nothing to resume" in result.output
    assert Store(tmp_path).runs().height == before


def test_resume_refuses_another_job_key(tmp_path):
    write_dataset(tmp_path)
    assert _run("gpt/train/pretrain", "pre", str(tmp_path), *TINY, "training.steps=2").exit_code == 0
    with Store(tmp_path).writer() as w:  # the newest lineage of the name: unfinished, with a checkpoint
        last = Store(tmp_path).find().spec(run="pre").last()
        w.failed(last, "lost")
    result = _run("data/tokenize/pydoc", "pre", str(tmp_path), "--resume")
    assert result.exit_code == 2 and "is a run of job gpt/train/pretrain, not data/tokenize/pydoc" in result.output


# -- training.steps ------------------------------------------------------------------------------


def test_training_steps_sets_the_length_and_excludes_tokens(tmp_path):
    write_dataset(tmp_path)
    assert _run("gpt/train/pretrain", "s", str(tmp_path), *TINY, "training.steps=3").exit_code == 0
    assert Store(tmp_path).find().spec(run="s").finished().last().seq == 3
    result = _run("gpt/train/pretrain", "both", str(tmp_path), *TINY, "training.steps=3", "training.tokens=2560")
    assert result.exit_code == 2
    assert "training.steps=3 and training.tokens=2560 both set the run's length" in result.output
    assert Store(tmp_path).find().spec(run="both").all() == []  # refused before anything is written
    assert _run("gpt/train/pretrain", "zero", str(tmp_path), *TINY, "training.steps=0").exit_code == 2


def test_resume_of_a_lineage_that_went_past_its_checkpoint_branches_and_says_so(tmp_path):
    """A run killed after its last checkpoint left nodes past it: continuing that lineage would write them
    again, so --resume branches from the checkpoint (fresh nonce) and its line says so."""
    write_dataset(tmp_path)
    root, store = str(tmp_path), Store(tmp_path)
    assert _run("gpt/train/pretrain", "pre", root, *TINY, "training.steps=2").exit_code == 0
    [nonce] = {n.nonce for n in store.find().spec(run="pre").all()}
    with store.writer() as w:  # what a kill after step 3 leaves: a node past the checkpoint at 2, no end
        node = Node("general.default.pre", nonce, 3, Node("general.default.pre", nonce, 2).id)
        w.write(node, {"train/loss": 1.0})
        w.failed(node, "killed")
    result = _run("gpt/train/pretrain", "pre", root, "training.steps=4", "--resume")
    assert result.exit_code == 0, result.output
    branch = store.find().spec(run="pre").finished().last()
    assert branch.nonce != nonce and branch.seq == 2  # two steps from the checkpoint at seq 2
    assert f"resume | general.default.pre:{nonce} (failed) from its checkpoint at seq 2, as branch " \
           f"{branch.nonce} (the lineage went on past that checkpoint)" in result.output
