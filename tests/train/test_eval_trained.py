"""A model trained in the test on `addition` scores far above chance by multiple choice (acc, acc_norm) and by exact
match (the `addition` part), and the same scores against shuffled labels sit at chance."""

from __future__ import annotations

import random

import pytest

from tests.train._helpers import addition_run
from theseus.data import sources
from theseus.train.evals.choice import Question, multiple_choice
from theseus.train.evals.exact_match import Addition
from theseus.train.recipe import Recipe
from theseus.train.trainer import Trainer


class Sums(Recipe):
    """A recipe whose config holds the addition part's settings (run by hand after training)."""

    EVALUATION = (Addition,)


@pytest.mark.slow
def test_a_model_trained_on_addition_chooses_the_right_sum_and_shuffled_labels_score_at_chance(tmp_path):
    root, config = addition_run(tmp_path, steps=100)
    config["training"]["evaluate"] = False
    config["eval"]["exact_match"]["addition"]["seed"] = 7
    trainer = Trainer(config, root, recipe=Sums, peak_flops=1e12, progress=False)
    trainer.train()

    rng = random.Random(0)
    questions = []
    for prompt, answer in sources.addition(200, seed=5, max_digits=1):
        a = int(answer)
        choices = [str(a), str(a + 1), str(a + 2 if a < 1 else a - 1), str(a + 3)]
        rng.shuffle(choices)
        questions.append(Question(prompt, tuple(choices), choices.index(str(a))))
    result = multiple_choice(trainer.model, trainer.params, trainer.tokenizer, questions)
    assert result.acc > 0.8 and result.acc_norm > 0.8, result.metrics

    shuffled = [Question(q.context, q.choices, rng.randrange(4)) for q in questions]  # labels unrelated to sums
    control = multiple_choice(trainer.model, trainer.params, trainer.tokenizer, shuffled)
    assert abs(control.acc - 0.25) < 0.1, control.metrics  # chance: 1 in 4

    exact = trainer.evaluate(parts=[Addition])["eval/addition/exact_match"]
    assert exact > 0.8
