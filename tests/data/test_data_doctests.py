"""The docstring examples of theseus.data run as written."""

import doctest
import importlib
import pkgutil

import pytest

# every module of the room, so a new one cannot be left out
import theseus.data

MODULES = sorted(m.name for m in pkgutil.iter_modules(theseus.data.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"theseus.data.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of theseus.data.{name} failed"
