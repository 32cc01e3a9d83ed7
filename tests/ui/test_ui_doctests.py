"""Every docstring example of the ui modules runs; every public name has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

MODULES = ["theseus.ui", "theseus.ui.follow", "theseus.ui.records", "theseus.ui.status", "theseus.ui.table",
           "theseus.ui.configs", "theseus.ui.series", "theseus.ui.lineage", "theseus.ui.run", "theseus.ui.node",
           "theseus.ui.api", "theseus.ui.server", "theseus.cli.ui", "tests.ui._synthetic_runs"]


@pytest.mark.parametrize("name", MODULES)
def test_ui_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES[:-1])
def test_ui_public_api_has_examples(name):
    assert names_without_examples(name) == []
