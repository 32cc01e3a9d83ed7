"""Every docstring example of the store (and the quickstart) runs."""

import doctest
import importlib

import pytest

MODULES = [
    "theseus.store.node",
    "theseus.store.fs",
    "theseus.store.direct_io",
    "theseus.store.layout",
    "theseus.store.manifest",
    "theseus.store.schema",
    "theseus.store.segments",
    "theseus.store.footers",
    "theseus.store.listing",
    "theseus.store.mounts",
    "theseus.store.writer",
    "theseus.store.cursor",
    "theseus.store.store",
    "theseus.store.fold",
    "theseus.store.scope",
    "theseus.store.view_file",
    "theseus.store.compact",
    "theseus.store.index",
    "theseus.store.view_build",
    "theseus.store.view_files",
    "theseus.store.summary",
    "theseus.store.latest",
    "theseus.store.recency",
    "theseus.store.predicates",
    "theseus.store.plan",
    "theseus.store.reader",
    "theseus.store.tail",
    "theseus.store.topk",
    "theseus.store.status",
    "theseus.store.retired",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_store_imports_no_jax():
    import subprocess
    import sys

    code = "import sys, theseus.store; print('jax' in sys.modules)"
    assert (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
            == "False")
