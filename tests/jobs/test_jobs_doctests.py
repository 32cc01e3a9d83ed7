"""The docstring examples of the job system run as written."""

import doctest
import importlib

import pytest

from theseus import jobs as jobs_module

MODULES = ["theseus.config", "theseus.experiments", "theseus.jobs", "theseus.quick", "theseus.cli.app",
           "theseus.cli.errors", "theseus.logs", "theseus.data.jobs"]


@pytest.fixture
def restore_registry():
    jobs_module.registry()  # the built-in jobs are loaded before the snapshot
    before = dict(jobs_module._REGISTRY)
    yield
    jobs_module._REGISTRY.clear()
    jobs_module._REGISTRY.update(before)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, restore_registry):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
