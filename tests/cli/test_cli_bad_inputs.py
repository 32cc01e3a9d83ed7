"""``theseus sample`` and ``theseus eval`` probed as an outside harness would: every bad input (sizes out of range,
settings a draw cannot use, missing tasks, targets without a checkpoint) ends with one ``error:`` line naming the
limit or the input, exit status 2, no traceback, and nothing recorded in the root."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.quick import quick
from theseus.store import Node, Store
from theseus.train.example import tiny_example


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 4-step run checkpointed at steps 2 and 4 (a vocabulary that holds the tokenizer's ids, so the evaluations
    run), and a run with no checkpoint; returns (root, {placeholder: value})."""
    root, config = tiny_example(str(tmp_path_factory.mktemp("badinputs")))
    config["architecture"]["vocab_size"] = 100288
    config["training"]["tokens"] = 4 * 16 * 4
    config["logging"].update({"validation_interval": 2, "checkpoint_interval": 2})
    with quick(root) as q:
        q.build("gpt/train/pretrain", "probed").config.merge_with(config)
        job = q.create()
        job()
        job.close()
    bare = Node.start("bare")
    with Store(root).writer() as w:
        w.write(bare, {"train/loss": 1.0})
    nonce = job.node.nonce
    uncheckpointed = Store(root).find().nonce(nonce).seq(1).first()
    return root, {"NONCE": nonce, "BARE": bare.nonce, "NODE": uncheckpointed.id}


def recorded(root: str) -> tuple[int, int]:
    store = Store(root)
    return len(store.find().all()), store.runs().height


def invoke(root: str, names: dict[str, str], command: str, args: list[str]):
    return CliRunner().invoke(app, [command, root, *[names.get(a, a) for a in args]])


def assert_one_error_line(result, message: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0], result.output


SAMPLE = [
    (["NONCE", "1+2=", "-n", "1000000"], "the number of samples must be an integer in 1..1024"),
    (["NONCE", "1+2=", "-n", "0"], "the number of samples must be an integer in 1..1024"),
    (["NONCE", "1+2=", "--max-new-tokens", "100000000"], "more than the model's block_size (16)"),
    (["NONCE", "1+2=", "--max-new-tokens", "0"], "max_new_tokens must be a positive integer"),
    (["NONCE", "1+2=", "--temperature", "-1"], "temperature must be a number >= 0"),
    (["NONCE", "1+2=", "--temperature", "inf"], "temperature must be a finite number >= 0"),
    (["NONCE", "1+2=", "--top-k", "-1"], "top_k must be an integer >= 0"),
    (["NONCE", "1+2=", "--top-p", "0"], "top_p must be in (0, 1]"),
    (["NONCE", "1+2=", "--seed", "-1"], "seed must be an integer in 0..4294967295"),
    (["NONCE", "1+2=", "--seed", "99999999999999999999"], "seed must be an integer in 0..4294967295"),
    (["NONCE", ""], "the prompt is empty"),
    (["NONCE", "1+2=", "--stop", ""], "a stop string must be a non-empty string"),
    (["NONCE", "1+2=", "--log-level", "bogus"], "--log-level: unknown log level 'BOGUS'"),
    (["NODE", "1+2="], "has no committed checkpoint (seqs with one: [2, 4])"),
    (["BARE", "1+2="], "has no committed checkpoint"),
    (["", "1+2="], "malformed node id ''"),
]

EVAL = [
    (["NONCE", "--tasks", "pydoc", "--limit", "0"], "eval.length must be -1 (all examples) or a positive integer "
                                                     "(theseus eval's --limit), got 0"),
    (["NONCE", "--tasks", "pydoc", "--limit", "-5"], "eval.length must be -1 (all examples) or a positive"),
    (["NONCE", "--tasks", "pydoc", "eval.length=0"], "eval.length must be -1 (all examples) or a positive"),
    (["NONCE", "--tasks", "pydoc", "--limit", "2", "eval.length=3"], "both set eval.length"),
    (["NONCE", "--tasks", "pydoc", "evaluate.checkpoint=NONCE"], "evaluate.* is set by the arguments"),
    (["NONCE", "--tasks", "pydoc", "--name", ""], "--name is empty"),
    (["NONCE", "--tasks", ""], "no evaluation named"),
    (["NONCE", "--tasks", " , "], "no evaluation named"),
    (["NONCE", "--tasks", "pydok"], "unknown evaluation 'pydok'; known:"),
    (["NONCE", "--harness", "no_such_lm_eval_task"], "unknown lm-eval task no_such_lm_eval_task"),
    (["NONCE", "--tasks", "pydoc", "--log-level", "bogus"], "--log-level: unknown log level 'BOGUS'"),
    (["NODE", "--tasks", "pydoc"], "has no committed checkpoint (seqs with one: [2, 4])"),
    (["BARE", "--tasks", "pydoc"], "has no committed checkpoint"),
    (["", "--tasks", "pydoc"], "malformed node id ''"),
]


@pytest.mark.parametrize("command, args, message", [("sample", *case) for case in SAMPLE]
                         + [("eval", *case) for case in EVAL],
                         ids=[f"sample {' '.join(a)}" for a, _ in SAMPLE] + [f"eval {' '.join(a)}" for a, _ in EVAL])
def test_bad_input_is_one_error_line_exit_2_and_records_nothing(trained, command, args, message):
    root, names = trained
    before = recorded(root)
    result = invoke(root, names, command, args)
    assert_one_error_line(result, message)
    assert recorded(root) == before


def test_samples_too_many_for_memory_name_the_sizes_to_lower(trained, monkeypatch):
    import jax

    def exhausted(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 2006877209224 bytes.")

    monkeypatch.setattr("theseus.train.generate.generate_tokens", exhausted)
    root, names = trained
    result = invoke(root, names, "sample", ["NONCE", "1+2=", "-n", "1000"])
    assert_one_error_line(result, "out of memory decoding 1000 samples of 12 new tokens as one batch: ask for fewer "
                                  "samples (n) or new tokens (max_new_tokens)")

