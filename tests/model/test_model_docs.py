import doctest
import importlib

import pytest

MODULES = [
    "theseus.model.config",
    "theseus.model.decode",
    "theseus.model.gpt",
    "theseus.model.layers.attention",
    "theseus.model.layers.block",
    "theseus.model.layers.dense",
    "theseus.model.layers.mlp",
    "theseus.model.layers.rope",
    "theseus.model.lora",
    "theseus.model.walk",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
