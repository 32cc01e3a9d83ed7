"""``theseus eval ... --harness`` and gpt/evaluate's ``evaluate.harness``: lm-eval tasks (YAML over a local jsonl,
offline) run on a checkpoint and land as eval/<task>/<metric> on the evaluation's node, beside theseus's own
evaluations; the cross-check: on the same questions and checkpoint, the adapter's acc and acc_norm equal theseus's
own multiple-choice evaluation's. Bad input exits 2 and writes nothing."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from tests.train._harness_tasks import addition_questions, choice_task, offline
from tests.train._helpers import addition_run
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Store


@pytest.fixture(autouse=True)
def no_hub(monkeypatch, tmp_path):
    offline(monkeypatch, tmp_path / "hf")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained briefly on one-digit sums (character tokens), its last step checkpointed; 40 questions on
    sums as theseus's multiple-choice rows and as an lm-eval task over the same file."""
    folder = tmp_path_factory.mktemp("harnessroot")
    root, config = addition_run(folder, steps=30)
    del config["eval"]  # the exact-match settings of a recipe that lists that part: pretrain does not
    with quick(root) as q:
        q.build("gpt/train/pretrain", "sums").config.merge_with(config)
        job = q.create()
        job()
        job.close()
    rows = addition_questions(40, seed=4)
    (folder / "tasks").mkdir()
    tasks = choice_task(folder / "tasks", "sums_mc", rows)
    return root, job.node.nonce, str(tasks), str(tasks / "sums_mc.jsonl")


def evaluate(*args):
    return CliRunner().invoke(app, ["eval", *args])


@pytest.mark.slow
def test_the_harness_and_theseus_own_multiple_choice_agree_on_one_node(trained):
    root, nonce, tasks, questions = trained
    result = evaluate(root, nonce, "--tasks", "multiple-choice", "--harness", "sums_mc", "--include-path", tasks,
                      "--limit", "32", f"eval.multiple_choice.path={questions}", "eval.multiple_choice.name=sums")
    assert result.exit_code == 0, result.output
    assert "eval/sums_mc/acc" in result.output and "eval/sums/acc" in result.output
    node = Store(root).find().job("gpt/evaluate").last()
    [record] = Store(root).find().node(node).select(keys=["eval/sums/acc", "eval/sums/acc_norm", "eval/sums_mc/acc",
                                                          "eval/sums_mc/acc_norm", "evaluate/harness"])
    assert record["eval/sums_mc/acc"] == pytest.approx(record["eval/sums/acc"])
    assert record["eval/sums_mc/acc_norm"] == pytest.approx(record["eval/sums/acc_norm"])
    assert record["eval/sums/acc"] > 0.25  # trained on sums: the right one is the likeliest more often than chance
    assert record["evaluate/harness"] == "sums_mc"
    assert node.parent == Store(root).find().nonce(nonce).checkpoint().last().id


def test_the_evaluate_job_runs_harness_tasks_alone_with_eval_length(trained):
    root, nonce, tasks, _ = trained
    with quick(root) as q:
        q.build("gpt/evaluate", "harness-only")
        q.config.evaluate.checkpoint = nonce
        q.config.evaluate.harness = ["sums_mc"]
        q.config.evaluate.include_path = [tasks]
        q.config.eval.length = 5
        metrics = q.create()()
    assert set(metrics) >= {"eval/sums_mc/acc", "eval/sums_mc/acc_norm"}
    assert metrics["eval/sums_mc/acc"] in {i / 5 for i in range(6)}  # 5 questions


@pytest.mark.parametrize("args, message", [
    (["--harness", "sums_mx", "--include-path", "TASKS"], "unknown lm-eval task sums_mx (close: sums_mc"),
    (["--harness", "sums_mc", "--include-path", "/no/such/folder"], "include path /no/such/folder is not a folder"),
    (["--tasks", "pydoc", "--include-path", "TASKS"], "evaluate.include_path is set but evaluate.harness names no"),
    (["--tasks", "pydoc", "--harness", "pydoc", "--include-path", "TASKS"], "'pydoc' is named as an evaluation and "
                                                                            "as a harness task"),
    (["--harness", "sums_mc", "--include-path", "TASKS", "--limit", "0"], "eval.length must be -1"),
])
def test_bad_harness_input_exits_2_and_writes_nothing(trained, args, message):
    root, nonce, tasks, _ = trained
    before = len(Store(root).find().all())
    result = evaluate(root, nonce, *[tasks if a == "TASKS" else a for a in args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert len(Store(root).find().all()) == before


def test_without_lm_eval_the_harness_exits_2_naming_the_install_command(trained, monkeypatch):
    root, nonce, tasks, _ = trained
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if the `eval` group were not installed
    monkeypatch.delitem(sys.modules, "theseus.train.evals.harness", raising=False)
    before = len(Store(root).find().all())
    result = evaluate(root, nonce, "--harness", "sums_mc", "--include-path", tasks)
    assert result.exit_code == 2 and "uv sync --group eval" in " ".join(result.output.split()), result.output
    assert len(Store(root).find().all()) == before
