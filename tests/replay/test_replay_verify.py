"""`theseus verify`: restore a node, replay steps, compare with the logged losses (bitwise / tolerance / diverged)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.replay._replay_helpers import train_run
from theseus.cli import app
from theseus.replay.verify import verify
from theseus.store import Node, Store


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("verify-root"))
    nonce = train_run(root, steps=8)
    return root, nonce


def _node(root, nonce, seq):
    return Store(root).find().nonce(nonce).seq(seq).first()


def _invoke(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


@pytest.mark.slow
def test_verify_a_checkpoint_is_bitwise(run):
    root, nonce = run
    node = _node(root, nonce, 4)
    result = _invoke(root, node.id, "--steps", 4)
    assert result.exit_code == 0, result.output
    assert "bitwise" in result.output and "4 steps compared" in result.output
    # the Python API: the replayed steps are 5..8, the losses logged at seqs 5..8
    v = verify(root, node.id, steps=4)
    assert v.status == "bitwise" and v.start == 4 and v.verdict.steps == [5, 6, 7, 8]
    logged = {r["seq"]: r["train/loss"]
              for r in Store(root).find().nonce(nonce).has("train/loss").frame().collect().to_dicts()}
    assert v.replayed == {k: logged[k] for k in (5, 6, 7, 8)}
    # nothing was written: still one run of 9 nodes
    assert len(Store(root).find().all()) == 9


@pytest.mark.slow
def test_verify_json_and_tamper_diverges(run, tmp_path):
    import shutil

    root, nonce = run
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)  # tamper a copy; the module's run stays clean
    node = _node(copy, nonce, 4)
    logged = Store(copy).record(_node(copy, nonce, 6))["train/loss"]
    with Store(copy).writer() as w:  # a later record of the same node folds over the logged loss
        w.write(_node(copy, nonce, 6), {"train/loss": logged + 0.25})
    text = _invoke(copy, node.id, "--steps", 4)
    assert text.exit_code == 1, text.output
    assert "diverged" in text.output and "max abs diff 0.25" in text.output and "first divergent step 6" in text.output
    # a tolerance wide enough accepts it; --json for machines
    result = _invoke(copy, node.id, "--steps", 4, "--atol", 0.5, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["status"] == "tolerance" and out["first_divergence"] is None and out["steps"] == [5, 6, 7, 8]
    assert out["max_abs_diff"] == pytest.approx(0.25, rel=1e-6)
    assert [x["logged"] - x["replayed"] for x in out["losses"]][1] == pytest.approx(0.25, rel=1e-6)

def test_verify_bad_input_exits_2_with_a_message(run):
    root, nonce = run
    unknown = Node("general.default.train-gpt", "abcdef", 3).id
    result = _invoke(root, unknown, "--steps", 2)
    assert result.exit_code == 2 and "no node" in result.output and unknown in result.output
    result = _invoke(root, "not-a-node", "--steps", 2)
    assert result.exit_code == 2 and "malformed node id" in result.output
    no_ckpt = _node(root, nonce, 3)
    result = _invoke(root, no_ckpt.id, "--steps", 2)
    assert result.exit_code == 2 and "no committed checkpoint" in result.output and "[4, 8]" in result.output
    result = _invoke(root, _node(root, nonce, 8).id, "--steps", 2)  # the run ends at step 8
    assert result.exit_code == 2 and "cannot replay 2 steps from step 8: the run ends at step 8" in result.output
    result = _invoke(root, _node(root, nonce, 4).id, "--steps", 0)
    assert result.exit_code == 2 and "steps must be a positive integer" in result.output
