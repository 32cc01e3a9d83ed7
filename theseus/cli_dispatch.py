"""The ``theseus submit / launch / logs: run jobs on other machines`` commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add these commands to a Typer app."""
