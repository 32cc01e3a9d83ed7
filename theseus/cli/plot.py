"""The ``theseus plot`` command: runs' metrics to a PNG, one line per (run, key).

::

    theseus plot ROOT 949e88 train/loss --x train/tokens -o loss.png
    theseus plot ROOT 949e88 5a1b2c train/loss val/loss -o runs.png

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["plot", "/tmp/nowhere", "train/loss", "-o", "x.png"]).exit_code
2
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.console import Console

from theseus.cli.errors import fail, reported

_NONCE = re.compile(r"^[0-9a-f]{6}$")


def plot(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    runs_and_keys: Annotated[list[str], typer.Argument(
        help="One or more run nonces (6 hex characters), then one or more keys, e.g. 949e88 train/loss")],
    x: Annotated[str, typer.Option("--x", help="The x axis: 'seq' (the node's seq) or a logged key")] = "seq",
    out: Annotated[str, typer.Option("--out", "-o", help="The PNG to write (a path or fsspec URL)")] = ...,
) -> None:
    """Plot runs' metrics to a PNG: one line per (run, key).

    Arguments: ROOT, then NONCE [NONCE...], then KEY [KEY...]. Unknown runs or keys
    exit with code 2 and name close matches.
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> "KEY" in CliRunner().invoke(app, ["plot", "/tmp/nowhere", "949e88", "-o", "x.png"]).output
    True
    """
    from theseus.viewer.plot import plot as draw  # lazily: matplotlib loads only when a plot is drawn

    nonces = []
    for item in runs_and_keys:  # the leading 6-hex items are runs, the rest keys
        if not _NONCE.match(item):
            break
        nonces.append(item)
    keys = runs_and_keys[len(nonces):]
    if not nonces or not keys:
        fail(f"expected ROOT NONCE [NONCE...] KEY [KEY...] (e.g. `theseus plot ROOT 949e88 train/loss -o loss.png`); "
              f"got runs {nonces} and keys {keys}", 2)
    stray = [k for k in keys if _NONCE.match(k)]
    if stray:
        fail(f"nonces must come before the keys; {stray} came after {keys[0]!r}", 2)
    fig = draw(root, nonces, keys, x=x, out=out)  # a run it cannot find, a key no run logged: reported()'s line
    lines = fig.axes[0].get_lines()
    Console(highlight=False, soft_wrap=True).print(f"wrote {out}: {len(lines)} line(s), "
                                   + ", ".join(f"{ln.get_label()} ({len(ln.get_xdata())} points)" for ln in lines))


def register(app: typer.Typer) -> None:
    """Add ``plot`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['plot']
    """
    app.command("plot")(reported(plot))
