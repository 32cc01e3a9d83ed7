"""Fixtures for the trainer tests: a tiny contiguous dataset and tiny configs."""

from __future__ import annotations

import pytest

from tests.train._helpers import ListLog, config, write_dataset


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    write_dataset(root)
    return str(root)


@pytest.fixture(scope="session")
def peak_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("meta") / "cpu_peak")


@pytest.fixture
def make_trainer(data_root, peak_cache):
    from theseus.train.trainer import Trainer

    def make(cfg=None, root=None, **kwargs):
        kwargs.setdefault("peak_cache", peak_cache)
        kwargs.setdefault("progress", False)
        kwargs.setdefault("log", ListLog())
        return Trainer(cfg if cfg is not None else config(), root or data_root, **kwargs)

    return make


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache():
    """Reuse compiled programs across the many identical tiny trainers of this folder, in the session's cache
    (tests/conftest.py), also for the steps these tests compile without a Trainer."""
    from theseus.train.compile_cache import enable_compilation_cache

    return enable_compilation_cache()
