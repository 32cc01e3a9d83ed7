"""``theseus sample ROOT NODE_ID|NONCE PROMPT``: prints samples from a checkpoint (a nonce: the run's last); bad
input exits 2 with a clear message; nothing is written to the root."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from tests.train._helpers import config, write_dataset
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Node, Store


def files_of(root: str) -> dict[str, int]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = os.path.getsize(path)
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A root with a 6-step run checkpointed at steps 3 and 6, and a tokenize-free run without checkpoints."""
    root = str(tmp_path_factory.mktemp("sampleroot"))
    write_dataset(root, tokens=12_000)
    with quick(root) as q:
        q.build("gpt/train/pretrain", "sampled").config.merge_with(
            config(training={"tokens": 8 * 32 * 6}, logging={"checkpoint_interval": 3, "validation_interval": 3,
                                                             "report_interval": 1}))
        job = q.create()
        nonce = job.node.nonce
        job()
        job.close()
    bare = Node.start("bare")
    with Store(root).writer() as w:
        w.write(bare, {"train/loss": 1.0})
    return root, nonce, bare


def invoke(*args):
    return CliRunner().invoke(app, ["sample", *args])


def test_a_nonce_samples_the_last_checkpoint_and_a_node_id_its_own(run):
    root, nonce, _ = run
    store = Store(root)
    last = store.find().nonce(nonce).checkpoint().last()
    middle = store.find().nonce(nonce).checkpoint().first()
    assert (middle.seq, last.seq) == (3, 6)
    before = files_of(root)

    result = invoke(root, nonce, "1+2=", "-n", "2", "--max-new-tokens", "6", "--temperature", "0.9", "--top-k",
                    "40", "--top-p", "0.95", "--seed", "4")
    assert result.exit_code == 0, result.output
    assert f"({last.id})" in result.output
    bodies = result.output.split("--- sample ")[1:]
    assert [b.split(" ")[0] for b in bodies] == ["0", "1"]
    assert all(b.splitlines()[1].startswith("1+2=") and "6 tokens" in b.splitlines()[0] for b in bodies)
    again = invoke(root, last.id, "1+2=", "-n", "2", "--max-new-tokens", "6", "--temperature", "0.9", "--top-k",
                   "40", "--top-p", "0.95", "--seed", "4")
    assert again.exit_code == 0 and again.output == result.output  # the nonce's checkpoint is the last node's

    greedy = [invoke(root, node.id, "1+2=", "--max-new-tokens", "8", "--temperature", "0") for node in (middle, last)]
    assert all(r.exit_code == 0 for r in greedy), [r.output for r in greedy]
    assert greedy[0].output.splitlines()[0] != greedy[1].output.splitlines()[0]  # each node its own checkpoint
    assert files_of(root) == before  # nothing written to the root


def test_without_max_new_tokens_a_sample_fills_the_block(run):
    root, nonce, _ = run
    result = invoke(root, nonce, "1+2=", "--temperature", "0")
    assert result.exit_code == 0, result.output
    assert "(length, 28 tokens)" in result.output  # block_size 32 minus a 4-token prompt


@pytest.mark.parametrize("case", ["empty prompt", "unknown nonce", "unknown node", "malformed id", "no checkpoint",
                                  "run without checkpoints", "too long", "missing root"])
def test_bad_input_exits_2_with_a_clear_message(run, tmp_path, case):
    root, nonce, bare = run
    store = Store(root)
    uncheckpointed = store.find().nonce(nonce).seq(2).last()
    args, expected = {
        "empty prompt": ((root, nonce, ""), "the prompt is empty"),
        "unknown nonce": ((root, "abcdef" if nonce != "abcdef" else "fedcba", "1"), "no run with nonce"),
        "unknown node": ((root, Node("x.y.z", nonce, 0).id, "1"), "no node"),
        "malformed id": ((root, "not-an-id", "1"), "malformed node id"),
        "no checkpoint": ((root, uncheckpointed.id, "1"), "has no committed checkpoint (seqs with one: [3, 6])"),
        "run without checkpoints": ((root, bare.nonce, "1"), f"run {bare.nonce} has no committed checkpoint"),
        "too long": ((root, nonce, "1+2=", "--max-new-tokens", "40"), "more than the model's block_size (32)"),
        "missing root": ((str(tmp_path / "nowhere"), nonce, "1"), "nowhere"),
    }[case]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_a_run_that_probed_its_batch_size_samples_without_probing(tmp_path, monkeypatch):
    from tests.train._helpers import ListLog
    from theseus.replay.sample import restored_trainer

    root = str(tmp_path)
    write_dataset(root, tokens=6_000)
    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "4")
    with quick(root) as q:
        q.build("gpt/train/pretrain", "probed").config.merge_with(
            config(training={"tokens": 8 * 32 * 2, "per_device_batch_size": -1},
                   logging={"checkpoint_interval": 2, "validation_interval": 2}))
        job = q.create()
        nonce = job.node.nonce
        job()
        job.close()
    log = ListLog()
    trainer = restored_trainer(root, nonce, log=log)
    assert trainer.step == 2 and not log.messages("AUTOBATCH")
    assert len(trainer.generate("1+2=", max_new_tokens=3)[0].tokens) == 3
    trainer.close()
