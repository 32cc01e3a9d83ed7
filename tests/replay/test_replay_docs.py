"""Every docstring example of the replay modules and the replay CLI runs; every public name has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

MODULES = ["theseus.cli.replay", "theseus.replay.analyze",
           "theseus.replay.sample", "theseus.replay.restore",
           "theseus.replay.evaluate"]  # theseus.replay.verify: tests/train/test_trainer_docs.py


@pytest.mark.parametrize("name", MODULES)
def test_replay_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_replay_public_api_has_examples(name):
    assert names_without_examples(name) == []
