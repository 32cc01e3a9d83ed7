"""The mirror tests need the optional `remote` group (TensorBoard's writer and reader, wandb, Comet): without it
they skip, naming the command that installs it, except under CI, where they fail (CI installs the group)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.system_packages import skip_or_fail

REMOTE_MODULES = ("tensorboard", "wandb", "comet_ml")


@pytest.fixture(scope="session")
def remote_group() -> None:
    missing = [m for m in REMOTE_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        skip_or_fail(f"{', '.join(missing)} not installed: the optional `remote` group "
                     "(`uv run --group remote --group hf pytest`)")
