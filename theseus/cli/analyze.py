"""The ``theseus analyze`` command: one analysis of any checkpoint, its picture to a PNG and its scalars printed.

::

    theseus analyze ROOT NODE_ID --analysis attention --layer 1 --head 0 -o map.png
    theseus analyze ROOT 949e88 --analysis logit-lens --sample 0 -o lens.png   # the run's last checkpoint

>>> import typer
>>> from typer.testing import CliRunner
>>> from theseus.cli.app import app
>>> CliRunner().invoke(app, ["analyze", "/tmp/nowhere", "bad-id", "--analysis", "attention"]).exit_code
2
"""

from __future__ import annotations

import json
from typing import Annotated

import fsspec
import typer
from rich.console import Console
from rich.table import Table

from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message
from theseus.store import EmptyResult


def analyze(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    node_id: Annotated[str, typer.Argument(help="A node id with a committed checkpoint, or a run's nonce (its last)")],
    analysis: Annotated[str, typer.Option("--analysis", "-a",
                                          help="attention, norms or logit-lens (`theseus parts analysis`)")],
    layer: Annotated[int | None, typer.Option("--layer", help="One layer (attention; default: all)")] = None,
    head: Annotated[int | None, typer.Option("--head", help="One head (attention; default: all)")] = None,
    sample: Annotated[int | None, typer.Option(
        "--sample", help="One row of the first validation batch (attention, logit-lens; default: the first rows)")
    ] = None,
    out: Annotated[str | None, typer.Option("--out", "-o", help="Write the picture here (a PNG path or URL)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scalars as JSON")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level of the trainer's log")] = "WARNING",
) -> None:
    """Run one analysis on NODE_ID's checkpoint: the picture to -o, the scalars printed; nothing written to ROOT.

    Bad input (an unknown analysis, an option it does not take or out of range, an unknown
    node or one without a checkpoint, a picture path that cannot be written) exits with code 2.
    \f
    >>> from typer.testing import CliRunner
    >>> from theseus.cli.app import app
    >>> result = CliRunner().invoke(app, ["analyze", "/tmp/nowhere", "949e88", "-a", "nope"])
    >>> result.exit_code, "unknown analysis part 'nope'" in result.output
    (2, True)
    """
    from theseus.replay.analyze import analyze as run_analysis  # lazily: JAX loads only for this command

    log_to_stderr(log_level)
    if out is not None:
        try:  # a picture that cannot be written fails before the model loads
            fs, path = fsspec.core.url_to_fs(out)
            parent = path.rsplit("/", 1)[0] if "/" in path else "."
            if not fs.isdir(parent):
                raise FileNotFoundError(f"cannot write {out}: folder {parent} does not exist")
        except (ValueError, OSError) as e:
            fail(str(e), 2)
    try:
        result = run_analysis(root, node_id, analysis, layer=layer, head=head, sample=sample)
    except EmptyResult as e:
        fail(str(e), 2)
    except ROOT_ERRORS as e:  # a damaged or unreadable checkpoint too: one line naming the file and the node
        fail(message(e), 2)
    scalars = {f"analysis/{analysis}/{key}": float(value) for key, value in result.scalars.items()}
    if out is not None:
        try:
            with fsspec.open(out, "wb") as f:
                f.write(result.picture)
        except OSError as e:
            fail(f"cannot write {out}: {e}", 2)
    if as_json:
        print(json.dumps({"scalars": scalars, "picture": out}, indent=2))
        return
    table = Table("key", "value", title=f"{analysis} of {node_id}")
    for key, value in scalars.items():
        table.add_row(key, f"{value:.6g}")
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    if out is not None:
        console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add ``analyze`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['analyze']
    """
    app.command("analyze")(analyze)
