"""The lm-evaluation-harness adapter: lm-eval tasks (YAML over local jsonl, offline) run on a theseus model through
``lm_eval.simple_evaluate`` and `harness`; its requests score as theseus's likelihood module scores them by hand;
generation honours ``until`` and ``max_gen_toks``; without lm-eval, the module names the install command."""

from __future__ import annotations

import importlib
import math
import sys

import lm_eval
import numpy as np
import pytest
from lm_eval.tasks import TaskManager

from tests.docstrings import examples_fail, names_without_examples
from tests.train._harness_tasks import multiple_choice_task, offline, perplexity_task, sums
from theseus.train.evals.harness import TheseusLM, harness, harness_keys, request
from theseus.train.evals.likelihood import loglikelihood, rolling_loglikelihood
from theseus.train.example import tiny_text_model
from theseus.train.generate import generate

MODULES = ["theseus.train.evals.harness", "theseus.train.example"]


@pytest.fixture(autouse=True)
def no_hub(monkeypatch, tmp_path):
    offline(monkeypatch, tmp_path / "hf")


@pytest.fixture(scope="module")
def toy():
    return tiny_text_model(block_size=32)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0
    assert names_without_examples(name) == []


def test_without_lm_eval_importing_the_adapter_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if the `eval` group were not installed
    monkeypatch.delitem(sys.modules, "theseus.train.evals.harness")
    with pytest.raises(ImportError, match=r"optional `eval` group: run `uv sync --group eval`"):
        importlib.import_module("theseus.train.evals.harness")


def by_hand(model, params, tokenizer, rows) -> dict[str, float]:
    """acc and acc_norm of ARC-shaped rows, every choice scored after lm-eval's arc_easy prompt."""
    hits, normed = [], []
    for row in rows:
        context = tokenizer.encode(f"Question: {row['question']}\nAnswer:")
        choices = row["choices"]["text"]
        scores = [s.logprob for s in loglikelihood(model, params, [(context, tokenizer.encode(" " + c))
                                                                   for c in choices])]
        gold = row["choices"]["label"].index(row["answerKey"])
        hits.append(int(np.argmax(scores)) == gold)
        normed.append(int(np.argmax(np.array(scores) / [len(c) for c in choices])) == gold)
    return {"acc": float(np.mean(hits)), "acc_norm": float(np.mean(normed))}


def test_a_multiple_choice_task_over_a_local_jsonl_runs_offline_through_simple_evaluate(toy, tmp_path):
    rows = sums(24, seed=1)
    (tmp_path / "tasks").mkdir()
    folder = multiple_choice_task(tmp_path / "tasks", "sums", rows)
    lm = TheseusLM(*toy, batch_size=8)
    results = lm_eval.simple_evaluate(model=lm, tasks=["sums"], log_samples=False,
                                      task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    scores = results["results"]["sums"]
    expected = by_hand(*toy, rows)
    assert scores["acc,none"] == pytest.approx(expected["acc"]) and scores["acc_norm,none"] == pytest.approx(
        expected["acc_norm"])
    assert harness_keys(results)["eval/sums/acc"] == pytest.approx(expected["acc"])


def test_harness_runs_named_tasks_with_a_limit_and_returns_theseus_keys_and_refuses_unknown_ones(toy, tmp_path):
    rows = sums(12, seed=2)
    (tmp_path / "tasks").mkdir()
    folder = multiple_choice_task(tmp_path / "tasks", "sums", rows)
    keys, results = harness(TheseusLM(*toy), ["sums"], include_path=str(folder), limit=5)
    expected = by_hand(*toy, rows[:5])
    assert keys["eval/sums/acc"] == pytest.approx(expected["acc"])
    assert keys["eval/sums/acc_norm"] == pytest.approx(expected["acc_norm"])
    assert set(keys) <= {f"eval/sums/{m}" for m in ("acc", "acc_norm", "acc_stderr", "acc_norm_stderr")}
    assert results["n-samples"]["sums"]["effective"] == 5
    with pytest.raises(ValueError, match=r"unknown lm-eval task sumz \(close: .*sums"):
        harness(TheseusLM(*toy), ["sumz"], include_path=str(folder))


def test_a_perplexity_task_scores_every_token_once_in_windows_of_the_block(tmp_path):
    model, params, tokenizer = tiny_text_model(block_size=8)
    texts = ["The quick brown fox jumps over the lazy dog.", "1+2=3, 4+5=9", "short"]
    (tmp_path / "tasks").mkdir()
    folder = perplexity_task(tmp_path / "tasks", "prose", texts)
    keys, _ = harness(TheseusLM(model, params, tokenizer), ["prose"], include_path=str(folder))
    scored = rolling_loglikelihood(model, params, [tokenizer.encode(t) for t in texts], prefix=tokenizer.eot)
    assert [s.tokens for s in scored] == [len(t) for t in texts]  # one window of 8 could not hold the first
    nats = -sum(s.logprob for s in scored)
    assert keys["eval/prose/bits_per_byte"] == pytest.approx(nats / sum(len(t.encode()) for t in texts) / math.log(2))
    assert keys["eval/prose/byte_perplexity"] == pytest.approx(math.exp(nats / sum(len(t.encode()) for t in texts)))


def test_loglikelihood_requests_encode_as_lm_eval_does(toy):
    model, params, tokenizer = toy
    lm = TheseusLM(*toy)
    got = lm.loglikelihood([request("loglikelihood", args) for args in
                            [("Answer: ", "7"), ("Answer:", " 7"), ("", "12"), ("1+1=", "2")]])
    trailing, moved, empty, plain = got
    assert trailing == moved  # the context's trailing space belongs to the continuation
    [first, *_] = loglikelihood(model, params, [([tokenizer.eot], tokenizer.encode("12")),
                                                (tokenizer.encode("1+1="), tokenizer.encode("2"))])
    assert empty == (first.logprob, first.greedy)  # an empty context: the end-of-text token
    assert all(isinstance(lp, float) and lp < 0 and isinstance(g, bool) for lp, g in got)


def test_generate_until_honours_until_and_max_gen_toks(toy):
    model, params, tokenizer = toy
    prompt = "Question: 2+3\nAnswer:"
    [free] = generate(model, params, tokenizer, prompt, max_new_tokens=10, temperature=0.0)
    assert free.stop == "length" and len(free.text) == 10  # one token per character, no end-of-text
    stop = free.text[4]
    lm = TheseusLM(*toy, batch_size=2)
    out = lm.generate_until([
        request("generate_until", (prompt, {"until": [stop], "max_gen_toks": 10})),
        request("generate_until", (prompt, {"until": ["never"], "max_gen_toks": 3})),
        request("generate_until", ("7+", {"until": ["never"], "max_gen_toks": 3})),
        request("generate_until", (prompt, {"until": "never", "max_new_tokens": 5, "do_sample": False})),
    ])
    assert out[0] == free.text[:free.text.index(stop)]
    assert out[1] == free.text[:3] and out[3] == free.text[:5]
    [other] = generate(model, params, tokenizer, "7+", max_new_tokens=3, temperature=0.0)
    assert out[2] == other.text  # requests answered in their own order, batched by their options


def test_sampled_generation_is_seeded(toy):
    model, params, tokenizer = toy
    options = {"until": ["never"], "max_gen_toks": 6, "do_sample": True, "temperature": 0.9, "top_k": 20}
    reqs = [request("generate_until", ("1+2=", dict(options)))]
    a, b = TheseusLM(*toy, seed=3).generate_until(reqs), TheseusLM(*toy, seed=3).generate_until(reqs)
    [drawn] = generate(model, params, tokenizer, "1+2=", max_new_tokens=6, temperature=0.9, top_k=20, seed=3)
    assert a == b == [drawn.text]


def test_a_context_longer_than_the_block_keeps_its_last_tokens(toy):
    model, params, tokenizer = toy
    context = "9" * 40 + "+2="
    lm = TheseusLM(*toy)
    [text] = lm.generate_until([request("generate_until", (context, {"until": ["never"], "max_gen_toks": 4}))])
    [expected] = generate(model, params, tokenizer, context[-28:], max_new_tokens=4, temperature=0.0)
    assert text == expected.text


def test_a_generation_budget_past_the_block_is_cut_to_it_with_a_warning(toy):
    from loguru import logger

    warnings = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        [text] = TheseusLM(*toy).generate_until([request("generate_until", ("1", {"until": ["never"],
                                                                                   "max_gen_toks": 100}))])
    finally:
        logger.remove(sink)
    assert len(text) <= 31
    assert any("max_gen_toks 100 is more than the model's block_size (32)" in w for w in warnings)


@pytest.mark.parametrize("options, message", [
    ({"until": ["\n"], "num_beams": 4}, "generation option num_beams is not implemented by the theseus adapter"),
    ({"until": ["\n"], "repetition_penalty": 1.2}, "generation option repetition_penalty is not implemented"),
])
def test_an_unknown_generation_option_is_refused(toy, options, message):
    with pytest.raises(ValueError, match=message):
        TheseusLM(*toy).generate_until([request("generate_until", ("1+2=", options))])


@pytest.mark.parametrize("kwargs, message", [
    ({"tasks": []}, "tasks must be a non-empty list of lm-eval task names"),
    ({"tasks": ["sums"], "limit": 0}, "limit must be a positive integer"),
    ({"tasks": ["sums"], "limit": 2.5}, "limit must be a positive integer"),
])
def test_bad_harness_arguments_are_refused_before_any_work(toy, kwargs, message):
    with pytest.raises(ValueError, match=message):
        harness(TheseusLM(*toy), **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ({"max_gen_toks": True}, "max_gen_toks must be a positive integer, got True"),
])
def test_bad_adapter_settings_are_refused(toy, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TheseusLM(*toy, **kwargs)


def test_the_adapter_scores_as_theseus_own_multiple_choice_evaluation(toy, tmp_path):
    """The cross-check: the same ARC-format questions, lm-eval's arc_easy through the adapter and theseus's own
    ARC loader and multiple-choice evaluation, give the same acc and acc_norm (choices of one and two digits, so
    the length normalisation decides some)."""
    from theseus.train.evals.choice import multiple_choice
    from theseus.train.evals.public import arc_question

    rows = sums(40, seed=3)
    (tmp_path / "tasks").mkdir()
    folder = multiple_choice_task(tmp_path / "tasks", "sums", rows)
    results = lm_eval.simple_evaluate(model=TheseusLM(*toy), tasks=["sums"], log_samples=False,
                                      task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    own = multiple_choice(*toy, [arc_question(row) for row in rows])
    scores = results["results"]["sums"]
    assert (scores["acc,none"], scores["acc_norm,none"]) == pytest.approx((own.acc, own.acc_norm))
    assert own.predictions != own.predictions_norm  # the normalisation changed some picks: it is compared too
