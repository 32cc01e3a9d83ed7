"""Every docstring example of the parts modules (and of the train step, whose example builds a part) runs;
every public name of theirs has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

MODULES = ["theseus.train", "theseus.train.parts", "theseus.train.models", "theseus.train.optimizers",
           "theseus.train.schedules", "theseus.train.losses", "theseus.train.step", "theseus.train.evals.exact_match",
           "theseus.train.evals.likelihood", "theseus.train.evals.rows", "theseus.train.evals.text",
           "theseus.train.evals.choice", "theseus.train.evals.public", "theseus.train.jobs", "theseus.train.lora",
           "theseus.train.lora_jobs"]


@pytest.mark.parametrize("name", MODULES)
def test_parts_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_parts_public_api_has_examples(name):
    assert names_without_examples(name) == []
