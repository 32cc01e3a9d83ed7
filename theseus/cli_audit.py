"""The ``theseus audit / theseus gc: integrity of a root`` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add these commands to a Typer app."""
