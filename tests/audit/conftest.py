"""Fixtures of the audit tests: the trained root of `tests.audit._trained_root`."""

from tests.audit._trained_root import built, copy_root  # noqa: F401  (session and per-test fixtures)
from tests.train.conftest import _compilation_cache  # noqa: F401  (a session fixture: compiled once)
