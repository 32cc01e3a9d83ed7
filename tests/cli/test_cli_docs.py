"""Every docstring example of the CLI package runs; every public name of its command modules has one."""

import pytest

from tests.docstrings import examples_fail, names_without_examples

# theseus.cli.app / errors: tests/jobs/test_jobs_doctests.py; audit: tests/audit; replay: tests/replay;
# dispatch: tests/dispatch/test_dispatch_logs.py; export: tests/mirror (it needs the `remote` group)
MODULES = ["theseus.cli", "theseus.cli.parts", "theseus.cli.plot", "theseus.cli.analyze", "theseus.cli.sample",
           "theseus.cli.runs", "theseus.cli.evaluate", "theseus.cli.lazy"]


@pytest.mark.parametrize("name", MODULES)
def test_cli_docstring_examples_run(name):
    failed, attempted = examples_fail(name)
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_cli_public_api_has_examples(name):
    assert names_without_examples(name) == []
