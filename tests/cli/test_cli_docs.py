"""Every docstring example of the CLI package runs; every public name of its command modules has one."""

import doctest
import importlib
import inspect

import pytest

# theseus.cli.app / errors: tests/jobs/test_jobs_doctests.py; audit: tests/audit; replay: tests/replay;
# dispatch: tests/dispatch/test_dispatch_logs.py
MODULES = ["theseus.cli", "theseus.cli.plot"]


@pytest.mark.parametrize("name", MODULES)
def test_cli_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_cli_public_api_has_examples(name):
    module = importlib.import_module(name)
    missing = [attr for attr, obj in vars(module).items()
               if not attr.startswith("_") and getattr(obj, "__module__", None) == name
               and (inspect.isfunction(obj) or inspect.isclass(obj)) and ">>>" not in (obj.__doc__ or "")]
    assert not missing, missing
