"""Every docstring example of the replay modules and the replay CLI runs; every public name has one."""

import doctest
import importlib
import inspect

import pytest

MODULES = ["theseus.cli.replay"]  # theseus.replay.verify: tests/train/test_trainer_docs.py


@pytest.mark.parametrize("name", MODULES)
def test_replay_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_replay_public_api_has_examples(name):
    module = importlib.import_module(name)
    missing = [attr for attr, obj in vars(module).items()
               if not attr.startswith("_") and getattr(obj, "__module__", None) == name
               and (inspect.isfunction(obj) or inspect.isclass(obj)) and ">>>" not in (obj.__doc__ or "")]
    assert not missing, missing
