"""Evaluations during and after training: gpt/train/pretrain writes eval/<dataset>-val/bpb on its validation nodes
and a sort finds the best checkpoint; gpt/evaluate (q.build and `theseus eval`) evaluates any checkpoint into a new
lineage whose first node's parent is that checkpoint's, found by find().job("gpt/evaluate"), shown by ls and show;
bad input exits 2 and writes nothing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.quick import quick
from theseus.store import Node, Store
from theseus.train.example import tiny_example

BPB = "eval/fineweb-val/bpb"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 6-step run validated and checkpointed every 2 steps; a vocabulary that holds the tokenizer's ids."""
    root, config = tiny_example(str(tmp_path_factory.mktemp("evalroot")))
    config["architecture"]["vocab_size"] = 100288
    config["training"]["tokens"] = 4 * 16 * 6
    config["logging"].update({"validation_interval": 2, "checkpoint_interval": 2})
    config["eval"] = {"length": 4}
    with quick(root) as q:
        q.build("gpt/train/pretrain", "evaluated").config.merge_with(config)
        job = q.create()
        job()
        job.close()
    return root, job.node.nonce


def test_training_writes_bits_per_byte_and_a_sort_finds_the_best_checkpoint(trained):
    root, nonce = trained
    store = Store(root)
    rows = store.find().nonce(nonce).has(BPB).select(keys=[BPB])
    assert len(rows) == 3 and all(r[BPB] > 0 for r in rows)  # steps 2, 4 and 6 (the last)
    with quick(root) as q:
        best = q.find().nonce(nonce).checkpoint().sort(BPB, ascending=False).last()
    values = {n.seq: r[BPB] for n, r in zip(store.find().nonce(nonce).has(BPB).all(), rows)}
    assert best.seq in values and values[best.seq] == min(values.values())


def test_the_evaluate_job_writes_a_new_lineage_under_the_checkpoint(trained):
    root, nonce = trained
    store = Store(root)
    checkpoint = store.find().nonce(nonce).checkpoint().sort("train/loss").first()
    with quick(root) as q:
        q.build("gpt/evaluate", "eval-evaluated")
        q.config.evaluate.checkpoint = checkpoint.id
        q.config.evaluate.tasks = ["bits-per-byte", "pydoc", "addition"]
        q.config.eval.length = 2
        job = q.create()
        metrics = job()
        [first] = q.find().job("gpt/evaluate").all()
    assert first.parent == checkpoint.id and first.seq == 0 and first.nonce != nonce
    assert {BPB, "eval/pydoc/bpb", "eval/pydoc/perplexity", "eval/addition/exact_match"} <= set(metrics)
    record = store.record(first)
    assert record["evaluate/checkpoint"] == checkpoint.id and record["evaluate/tasks"] == "bits-per-byte,pydoc,addition"
    assert record["eval/pydoc/bpb"] == pytest.approx(metrics["eval/pydoc/bpb"])
    run = store.run_record(first.nonce)
    assert run["_job"] == "gpt/evaluate" and "tasks:" in run["_config"] and checkpoint.id in run["_config"]


def test_theseus_eval_by_nonce_prints_and_records_results_seen_by_ls_and_show(trained):
    root, nonce = trained
    result = CliRunner().invoke(app, ["eval", root, nonce, "--tasks", "pydoc", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert "eval/pydoc/bpb" in result.output
    store = Store(root)
    last = store.find().nonce(nonce).checkpoint().last()
    evaluations = [n for n in store.find().job("gpt/evaluate").all() if n.parent == last.id]
    assert len(evaluations) == 1
    listing = CliRunner().invoke(app, ["ls", root]).output  # evaluation runs, as a group, only when asked
    assert evaluations[0].nonce not in listing and nonce in listing
    listing = CliRunner().invoke(app, ["ls", root, "--all"]).output
    assert evaluations[0].nonce in listing and "evaluated-eval" in listing
    shown = CliRunner().invoke(app, ["show", root, evaluations[0].id]).output
    assert "eval/pydoc/bpb" in shown


@pytest.mark.parametrize("args, message", [
    (["--tasks", ""], "no evaluation named"),
    (["--tasks", "hellaswog"], "unknown evaluation 'hellaswog'; known: addition"),
    (["--tasks", "pydoc,pydoc"], "evaluation 'pydoc' is named twice"),
])
def test_bad_tasks_exit_2_and_write_nothing(trained, args, message):
    root, nonce = trained
    before = len(Store(root).find().all())
    result = CliRunner().invoke(app, ["eval", root, nonce, *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert len(Store(root).find().all()) == before


def test_a_node_without_a_checkpoint_or_an_unknown_run_exits_2(trained, tmp_path):
    root, nonce = trained
    without = Store(root).find().nonce(nonce).seq(1).first()  # checkpoints at 2, 4, 6
    result = CliRunner().invoke(app, ["eval", root, without.id, "--tasks", "pydoc"])
    assert result.exit_code == 2 and "checkpoint" in result.output
    result = CliRunner().invoke(app, ["eval", root, "abc123", "--tasks", "pydoc"])
    assert result.exit_code == 2 and "no run with nonce 'abc123'" in " ".join(result.output.split())
    with quick(root) as q:
        q.build("gpt/evaluate", "e").config.evaluate.tasks = ["pydoc"]
        with pytest.raises(ValueError, match="evaluate.checkpoint is empty"):
            q.create()
    assert Node.from_id(without.id).nonce == nonce
