"""The docstring examples of the decoder's modules and of theseus.hf.convert run as written, and every public
name has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

MODULES = [
    "theseus.model.decoder",
    "theseus.model.decoder_config",
    "theseus.model.kv_cache",
    "theseus.model.layers.decoder_block",
    "theseus.model.layers.feedforward",
    "theseus.model.layers.gqa",
    "theseus.model.layers.norms",
    "theseus.model.layers.packed",
    "theseus.model.layers.rotary",
    "theseus.hf.convert",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_examples(name):
    assert names_without_examples(name) == []
