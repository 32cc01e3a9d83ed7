"""The docstring examples of theseus.mirror and theseus.cli.export run as written; every public name has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

pytestmark = pytest.mark.usefixtures("remote_group")

MODULES = ["theseus.mirror", "theseus.mirror.sinks", "theseus.mirror.background", "theseus.mirror.to_tensorboard",
           "theseus.mirror.to_wandb", "theseus.mirror.to_comet", "theseus.mirror.export",
           "theseus.cli.export"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0, f"{failed} of {attempted} docstring example(s) of {name} failed"


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_examples(name):
    assert names_without_examples(name) == []
