"""Every docstring example of theseus.dispatch runs as written (each module of the package, found at collection)."""

import doctest
import importlib
import pkgutil

import pytest

import theseus.dispatch

MODULES = sorted(m.name for m in pkgutil.iter_modules(theseus.dispatch.__path__, "theseus.dispatch."))


def test_the_package_has_modules():
    assert {"theseus.dispatch.inventory", "theseus.dispatch.solver", "theseus.dispatch.volcano",
            "theseus.dispatch.tpu"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"theseus.dispatch module {name} has no docstring example"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_importing_the_package_and_its_planners_starts_no_jax():
    import subprocess
    import sys

    code = ("import sys, theseus.dispatch.inventory, theseus.dispatch.solver, theseus.dispatch.volcano, "
            "theseus.dispatch.tpu; print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"
