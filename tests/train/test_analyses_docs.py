"""Every docstring example of the analyses (and of the evaluation and recipe modules they plug into) runs;
every public name of theirs has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

MODULES = ["theseus.train.analyses", "theseus.train.analyses.base", "theseus.train.analyses.trace",
           "theseus.train.analyses.adapters", "theseus.train.analyses.attention", "theseus.train.analyses.norms",
           "theseus.train.analyses.logit_lens",
           "theseus.train.analyses.picture", "theseus.train.analyses.labels", "theseus.train.evaluations",
           "theseus.train.recipe"]


@pytest.mark.parametrize("name", MODULES)
def test_analyses_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_analyses_public_api_has_examples(name):
    assert names_without_examples(name) == []
