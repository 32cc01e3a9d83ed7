"""The docstring examples of the job system run as written."""

import doctest
import importlib

import pytest

MODULES = ["theseus", "theseus.catalog", "theseus.config", "theseus.experiments", "theseus.jobs", "theseus.quick",
           "theseus.cli.app", "theseus.cli.errors", "theseus.logs", "theseus.data.jobs"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, scratch_experiments):  # the examples import and register; undone after
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
