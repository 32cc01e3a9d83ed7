"""Run management commands of the ``theseus`` CLI: ``tag``, ``untag``, ``note``, ``hide``, ``unhide``.

Each writes records (``theseus.store.marks``) and never changes or deletes a file: ``theseus ls``
and the UI show the tags and notes, ``theseus ls --tag x`` and ``find().tag("x")`` select by
tag, and hidden runs are listed only with ``--all``.
"""

from __future__ import annotations

import typer

from theseus.cli.errors import fail, reported
from theseus.store import EmptyResult, Store, marks

ROOT = typer.Argument(..., help="root folder or gs:// URL")
NONCE = typer.Argument(..., help="the run's 6-hex nonce (theseus ls)")


def _mark(root: str, nonce: str, **change) -> None:
    """Write ``change`` on the run and print its marks; no such run is bad input (exit 2, naming the nonce)."""
    try:
        found = marks.mark(Store(root), nonce, **change)
    except EmptyResult:
        fail(f"no run with nonce {nonce!r} in {root} (theseus ls {root} --all lists them)", 2)
    hidden = " (hidden: theseus ls --all lists it)" if found["hidden"] else ""
    typer.echo(f"{nonce}: tags {', '.join(found['tags']) or '-'}; note {found['note'] or '-'}{hidden}")


def tag(root: str = ROOT, nonce: str = NONCE,
        tags: list[str] = typer.Argument(..., help="tags to add (letters, digits, '_.-')")) -> None:
    """Add tags to a run (they add up across calls); ``theseus ls --tag TAG`` lists the runs tagged so.

    Example: ``theseus tag /tmp/root 949e88 baseline lr-sweep``
    """
    _mark(root, nonce, tags=tags)


def untag(root: str = ROOT, nonce: str = NONCE, tags: list[str] = typer.Argument(..., help="tags to remove")) -> None:
    """Remove tags from a run (a new record of its tag set: nothing is deleted).

    Example: ``theseus untag /tmp/root 949e88 lr-sweep``
    """
    _mark(root, nonce, untag=tags)


def note(root: str = ROOT, nonce: str = NONCE, text: str = typer.Argument(..., help="the note")) -> None:
    """Set a run's note (the latest note is the run's; ``theseus show`` and the UI show it).

    Example: ``theseus note /tmp/root 949e88 "diverged after warmup"``
    """
    _mark(root, nonce, note=text)


def hide(root: str = ROOT, nonce: str = NONCE) -> None:
    """Hide a run from ``theseus ls`` and the UI's runs page (``--all``, "hidden too" show it); nothing is deleted.

    Example: ``theseus hide /tmp/root 949e88``
    """
    _mark(root, nonce, hidden=True)


def unhide(root: str = ROOT, nonce: str = NONCE) -> None:
    """List a hidden run again.

    Example: ``theseus unhide /tmp/root 949e88``
    """
    _mark(root, nonce, hidden=False)


def register(app: typer.Typer) -> None:
    """Add the run management commands to a Typer app."""
    for command in (tag, untag, note, hide, unhide):
        app.command(command.__name__)(reported(command))
