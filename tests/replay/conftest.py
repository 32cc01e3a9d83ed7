"""Fixtures of the replay tests: one persistent XLA cache, so the many identical tiny trainers compile once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _replay_xla_cache(tmp_path_factory):
    import jax

    wanted = {"jax_compilation_cache_dir": str(tmp_path_factory.mktemp("replay-xla")),
              "jax_persistent_cache_min_compile_time_secs": 0, "jax_persistent_cache_min_entry_size_bytes": 0}
    before = {name: getattr(jax.config, name) for name in wanted}
    for name, value in wanted.items():
        jax.config.update(name, value)
    yield
    for name, value in before.items():
        jax.config.update(name, value)
