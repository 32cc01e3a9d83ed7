"""The docstring examples of theseus.hf and the ``theseus import`` command run as written, and every public name
has one (``theseus export``'s run in tests/mirror: they need the `remote` group)."""

import doctest
import importlib

import pytest

from tests.docstrings import names_without_examples

MODULES = [*(f"theseus.hf.{name}" for name in ("safetensors_io", "gpt", "importer", "exporter", "jobs", "layout",
                                                 "peft", "peft_jobs", "peft_import", "imported_run")),
           "theseus.cli.importing"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_examples(name):
    assert names_without_examples(name) == []
