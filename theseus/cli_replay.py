"""The ``theseus verify / theseus plot: replay and look at runs`` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add these commands to a Typer app."""
