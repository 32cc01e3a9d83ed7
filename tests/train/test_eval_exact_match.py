"""The exact-match evaluation: answer extraction (GSM8K's '####' or the last number), scoring, the built-in
``addition`` task, ``eval.length``, its config and checks, its keys in a training run; a model trained on
``addition`` in the test scores far above chance, and the same answers against shuffled labels score at chance."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.train._helpers import addition_run
from theseus.data import sources
from theseus.train.config import load_config
from theseus.train.evals.exact_match import (
    TASKS,
    ExactMatch,
    Example,
    exact_match,
    extract_answer,
    normalize,
    score,
)
from theseus.train.evaluations import ValidationLoss
from theseus.train.example import tiny_example
from theseus.train.parts import parts
from theseus.train.recipe import Recipe
from theseus.train.trainer import Trainer


class Sums(Recipe):
    """A recipe scored by exact match on its validation steps."""

    EVALUATION = (ValidationLoss, ExactMatch)


@pytest.mark.parametrize("text, answer", [
    ("67", "67"),
    ("67\n12+3=15", "15"),  # no marker: the last number (the part stops generating at a newline)
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
    ("#### 1,234.50\nand then 9", "1234.5"),
    ("the answer is -3.", "-3"),
    ("no digits here", None),
    ("#### ", None),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_normalize_and_score():
    assert normalize("$1,000") == normalize("1000.00") == "1000"
    assert score(["1000", "7", None], ["$1,000", "8", "3"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="2 predictions for 1 answers"):
        score(["1", "2"], ["1"])


def test_addition_is_built_in_and_asks_the_sums_the_dataset_trains_on():
    assert parts("evaluation")["exact-match"] is ExactMatch
    config = load_config({"eval": {"exact_match": {"addition": {"examples": 5, "max_digits": 2, "seed": 3}}}},
                         Sums.Config)
    examples = TASKS["addition"](config.eval.exact_match)
    assert examples == [Example(p, a) for p, a in sources.addition(5, seed=3, max_digits=2)]
    assert all(int(e.prompt[:-1].split("+")[0]) + int(e.prompt[:-1].split("+")[1]) == int(e.answer)
               for e in examples)


def test_eval_length_caps_the_examples():
    every = ExactMatch.examples(load_config(None, Sums.Config))
    assert len(every) == 256  # eval.length -1: all of the task's
    capped = ExactMatch.examples(load_config({"eval": {"length": 10}}, Sums.Config))
    assert capped == every[:10]


def test_bad_settings_are_refused_before_any_device_work(tmp_path):
    root, config = tiny_example(str(tmp_path))
    for setting, message in [
        ({"exact_match": {"task": "gsm9k"}}, "eval.exact_match.task 'gsm9k' is not a task; known: addition"),
        ({"exact_match": {"max_new_tokens": 0}}, "eval.exact_match.max_new_tokens must be a positive integer"),
        ({"length": -2}, "eval.length must be -1 (all examples) or a positive integer, got -2"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            Trainer({**config, "eval": setting}, root, recipe=Sums, peak_flops=1e12, progress=False)


def test_a_training_run_reports_exact_match_on_its_validation_steps(tmp_path):
    root, config = tiny_example(str(tmp_path))
    config["eval"] = {"length": 6, "exact_match": {"max_new_tokens": 2, "addition": {"max_digits": 1}}}
    reports = {}
    trainer = Trainer(config, root, recipe=Sums, peak_flops=1e12, progress=False,
                      on_report=lambda step, metrics: reports.update({step: metrics}))
    trainer.train()
    assert 0.0 <= reports[3]["eval/addition/exact_match"] <= 1.0  # validation_interval 3: the last step
    assert "eval/addition/exact_match" not in reports[1]
    examples = ExactMatch.examples(trainer.config)
    result = exact_match(trainer.model, trainer.params, trainer.tokenizer, examples, max_new_tokens=2)
    assert len(result.predictions) == 6 and result.score == trainer.evaluate()["eval/addition/exact_match"]


@pytest.mark.slow
def test_a_model_trained_on_addition_scores_above_chance_and_shuffled_labels_at_chance(tmp_path):
    steps = 100
    root, config = addition_run(tmp_path, steps)
    reports = {}
    trainer = Trainer(config, root, recipe=Sums, peak_flops=1e12, progress=False,
                      on_report=lambda step, metrics: reports.update({step: metrics}))
    trainer.train()
    trained = reports[steps]["eval/addition/exact_match"]

    examples = ExactMatch.examples(trainer.config)
    answers = [e.answer for e in examples]
    result = exact_match(trainer.model, trainer.params, trainer.tokenizer, examples, max_new_tokens=3)
    assert result.score == trained
    shuffled = answers[:]
    random.Random(0).shuffle(shuffled)
    control = score(result.predictions, shuffled)
    # chance: the expected score of these predictions against a random permutation of the answers
    counts, predicted = Counter(answers), Counter(result.predictions)
    chance = sum(predicted[a] * n for a, n in counts.items()) / len(answers) ** 2
    assert chance < 0.15 and trained > 0.8, (trained, chance)
    assert abs(control - chance) < 0.1 and control < trained - 0.6, (control, chance, trained)
