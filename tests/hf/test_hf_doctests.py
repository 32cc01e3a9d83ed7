"""The docstring examples of theseus.hf run as written, and every public name has one."""

import doctest
import importlib

import pytest

from tests.docstrings import names_without_examples

MODULES = ["safetensors_io", "gpt", "importer", "exporter"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"theseus.hf.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of theseus.hf.{name} failed"


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_examples(name):
    assert names_without_examples(f"theseus.hf.{name}") == []
