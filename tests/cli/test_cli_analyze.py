"""`theseus analyze`: one analysis of any checkpoint, the picture to -o and the scalars printed, nothing written to
the root; bad input exits 2."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from tests.replay._replay_helpers import train_run
from tests.train.conftest import _compilation_cache  # noqa: F401  (a session autouse fixture: compile once)
from theseus.cli import app
from theseus.replay.analyze import analyze
from theseus.store import Node, Store


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("analyze-root"))
    nonce = train_run(root, steps=4, checkpoint_interval=2)
    return root, nonce


def listing(root):
    return sorted((os.path.relpath(os.path.join(top, name), root), os.path.getmtime(os.path.join(top, name)))
                  for top, _, names in os.walk(root) for name in names)


def invoke(*args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


@pytest.mark.slow
def test_analyze_draws_one_head_of_a_checkpoint_and_writes_nothing_to_the_root(run, tmp_path):
    root, nonce = run
    node = Store(root).find().nonce(nonce).seq(2).first()
    before = listing(root)
    picture = tmp_path / "map.png"
    result = invoke(root, node.id, "--analysis", "attention", "--layer", 1, "--head", 3, "-o", picture)
    assert result.exit_code == 0, result.output
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert "analysis/attention/entropy" in result.output and f"wrote {picture}" in result.output
    assert listing(root) == before
    # the Python API gives the same numbers; the map is that head's of the restored parameters
    same = analyze(root, node.id, "attention", layer=1, head=3)
    assert same.arrays["attention"].shape == (1, 2, 1, 32, 32)
    printed = [line for line in result.output.splitlines() if "analysis/attention/entropy" in line][0]
    assert float(printed.split()[-2]) == pytest.approx(same.scalars["entropy"], rel=1e-4)


@pytest.mark.slow
def test_analyze_a_runs_last_checkpoint_by_nonce_as_json(run):
    root, nonce = run
    result = invoke(root, nonce, "-a", "logit-lens", "--sample", 1, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["picture"] is None and 0 <= out["scalars"]["analysis/logit-lens/agreement"] <= 1
    norms = json.loads(invoke(root, nonce, "-a", "norms", "--json").output)["scalars"]
    assert norms["analysis/norms/weights"] > 0


@pytest.mark.slow
def test_analyze_bad_input_exits_2_with_a_message(run, tmp_path):
    root, nonce = run
    store = Store(root)
    node = store.find().nonce(nonce).seq(4).first()
    cases = [
        ((root, node.id, "-a", "nope"), "unknown analysis part 'nope'; known: attention, logit-lens, norms"),
        ((root, node.id, "-a", "norms", "--head", 0), "analysis 'norms' takes no option head"),
        ((root, node.id, "-a", "attention", "--layer", -1), "must be a non-negative integer"),
        ((root, node.id, "-a", "attention", "--layer", 2), "--layer 2 is out of range: the model has 2 layers"),
        ((root, node.id, "-a", "attention", "--sample", 9), "--sample 9 is out of range"),
        ((root, store.find().nonce(nonce).seq(3).first().id, "-a", "norms"), "has no committed checkpoint"),
        ((root, "not-a-node", "-a", "norms"), "malformed node id"),
        ((root, Node("general.default.x", "abcdef", 1).id, "-a", "norms"), "no node"),
        ((root, "abcdef", "-a", "norms"), "run abcdef has no committed checkpoint"),
        ((root, node.id, "-a", "norms", "-o", tmp_path / "missing" / "x.png"), "does not exist"),
    ]
    for args, message in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)
    assert invoke(root, node.id).exit_code == 2  # --analysis is required
