"""The ``theseus export`` command: a root's runs in another tool's format (TensorBoard event files).

>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> "OUT_DIR" in CliRunner().invoke(app, ["--help"]).output
True
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

from theseus.cli.errors import fail, reported
from theseus.mirror import require
from theseus.mirror.export import export_tensorboard


class Format(str, enum.Enum):
    """The formats ``theseus export`` writes.

    >>> Format("tensorboard").value
    'tensorboard'
    """

    tensorboard = "tensorboard"


def export(
    format: Annotated[Format, typer.Argument(metavar="FORMAT", help="what to write: tensorboard (event files)")],
    root: Annotated[str, typer.Argument(metavar="ROOT", help="root folder or gs:// URL")],
    targets: Annotated[list[str], typer.Argument(
        metavar="[NONCE...] OUT_DIR", help="the runs' nonces (none: every run), then the folder to write into")],
) -> None:
    """Write TensorBoard event files of existing runs: ``OUT_DIR/<name>/<nonce>/`` per run, every key a scalar at
    the run's training step, the config as text; then ``tensorboard --logdir OUT_DIR`` shows them.

    Example: ``theseus export tensorboard /tmp/root 949e88 /tmp/tb``

    \f
    >>> import tempfile
    >>> from typer.testing import CliRunner
    >>> from theseus.store.store import _doc_store
    >>> store, node = _doc_store()
    >>> app = typer.Typer(); register(app)
    >>> CliRunner().invoke(app, ["tensorboard", store.root, tempfile.mkdtemp()]).output.splitlines()[-1]
    '1 runs exported; view them with: tensorboard --logdir ...'
    """
    if not targets:
        fail("missing OUT_DIR: theseus export tensorboard ROOT [NONCE...] OUT_DIR", 2)
    *nonces, out = targets
    require(format.value)  # the optional `remote` group: the error names the command installing it
    folders = export_tensorboard(root, nonces, out)
    console = Console(soft_wrap=True)
    for folder in folders:
        console.print(f"wrote {folder}")
    console.print(f"{len(folders)} runs exported; view them with: tensorboard --logdir {out}")


def register(app: typer.Typer) -> None:
    """Add ``export`` to a Typer app.

    >>> app = typer.Typer(); register(app); [c.name for c in app.registered_commands]
    ['export']
    """
    app.command("export")(reported(export))
