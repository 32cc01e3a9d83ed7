"""Fixtures of the replay tests: the trainer tests' persistent XLA cache (autouse), so the many identical tiny
trainers compile once."""

from tests.train.conftest import _compilation_cache  # noqa: F401  (a session autouse fixture)
