"""The docstring examples of theseus.data run as written."""

import doctest
import importlib

import pytest

MODULES = ["hashing", "tokenizer", "sources", "store", "tokenize", "loader", "mixture", "passes", "chat", "packing"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"theseus.data.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of theseus.data.{name} failed"
