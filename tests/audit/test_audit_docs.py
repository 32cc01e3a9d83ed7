"""Every docstring example of the audit modules runs, and every public name has one."""

import doctest
import importlib
import inspect

import pytest

MODULES = ["theseus.audit", "theseus.audit.root", "theseus.audit.report", "theseus.audit.checkpoints",
           "theseus.audit.analyses", "theseus.audit.reading", "theseus.audit.retired", "theseus.audit.adapters",
           "theseus.cli.audit",
           "tests.audit._synthetic"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_public_api_has_examples():
    missing = []
    for name in MODULES[:-1]:
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and ">>>" not in (obj.__doc__ or ""):
                missing.append(f"{name}.{attr}")
    assert not missing, missing
