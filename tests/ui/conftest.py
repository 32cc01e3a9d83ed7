"""Fixtures of the ui tests: the audit tests' small trained root (main, a resume, a branch, a failed
run), built once per session, and the trainer tests' compilation cache it uses."""

from tests.audit._trained_root import built  # noqa: F401  (a session fixture)
from tests.train.conftest import _compilation_cache  # noqa: F401  (a session fixture)
