"""Every docstring example of the trainer's modules runs."""

import doctest
import importlib

import pytest

MODULES = ["theseus.train.compile_cache", "theseus.train.config", "theseus.train.progress", "theseus.model.debug",
           "theseus.train.trainer", "theseus.replay.verify", "theseus.train.generate", "theseus.train.inspection",
           "theseus.train.retention", "theseus.train.built", "theseus.train.compiled", "theseus.train.hooks",
           "theseus.train.objective", "theseus.train.placement", "theseus.train.reports", "theseus.train.settings",
           "theseus.train.validation", "theseus.train.verbs"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, _compilation_cache):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_public_api_has_examples():
    """Every public function, class and method of these modules carries a '>>>' example."""
    import inspect

    missing = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if ">>>" not in (obj.__doc__ or ""):
                missing.append(f"{name}.{attr}")
    assert not missing, missing
