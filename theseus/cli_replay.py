"""The ``theseus verify`` and ``theseus plot`` commands: replay a checkpoint, look at runs.

::

    theseus verify ROOT NODE_ID --steps 5            # exit 0 bitwise/tolerance, 1 diverged, 2 bad input
    theseus plot ROOT 949e88 train/loss --x train/tokens -o loss.png
    theseus plot ROOT 949e88 5a1b2c train/loss val/loss -o runs.png

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["plot", "/tmp/nowhere", "train/loss", "-o", "x.png"]).exit_code
2
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from theseus.cli_errors import fail
from rich.console import Console
from rich.table import Table

_NONCE = re.compile(r"^[0-9a-f]{6}$")


def verify(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    node_id: Annotated[str, typer.Argument(help="Id of a node with a committed checkpoint")],
    steps: Annotated[int, typer.Option("--steps", "-n", help="Steps to replay after the node")] = 1,
    rtol: Annotated[float, typer.Option(help="Relative tolerance of 'within tolerance'")] = 1e-5,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of 'within tolerance'")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level of the trainer's log")] = "WARNING",
) -> None:
    """Restore NODE_ID's checkpoint, replay N steps and compare with the logged train/loss.

    Prints bitwise / within tolerance / diverged, the largest differences and the
    first divergent step. Exit status: 0 bitwise or within tolerance, 1 diverged,
    2 bad input (unknown node, no checkpoint, nothing logged to compare). Nothing is
    written to the root.
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> CliRunner().invoke(app, ["verify", "/tmp/nowhere", "bad-id"]).exit_code
    2
    """
    from theseus import logs
    from theseus.replay.verify import verify as run_verify
    from theseus.store import EmptyResult

    logs.setup(log_level)
    try:
        result = run_verify(root, node_id, steps, rtol=rtol, atol=atol)
    except (ValueError, EmptyResult, FileNotFoundError) as e:
        fail(str(e), 2)
    verdict = result.verdict
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_verification(result)
    raise typer.Exit(0 if verdict.ok else 1)


def _print_verification(result) -> None:
    v = result.verdict
    words = {"bitwise": "[green]bitwise[/green]", "tolerance": "[yellow]within tolerance[/yellow]",
             "diverged": "[bold red]diverged[/bold red]"}
    table = Table("step", "logged train/loss", "replayed", "abs diff", title=f"replay of {result.node} from step {result.start}")
    for k in v.steps:
        a, b = result.logged[k], result.replayed[k]
        mark = " <- first divergence" if k == v.first_divergence else ""
        table.add_row(str(k), repr(a), repr(b), f"{abs(a - b):.3g}{mark}")
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    line = f"{words[v.status]}: {len(v.steps)} steps compared, max abs diff {v.max_abs_diff:.3g}, max rel diff {v.max_rel_diff:.3g}"
    if v.first_divergence is not None:
        line += f", first divergent step {v.first_divergence}"
    console.print(line)


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
    from theseus.replay.plot import plot as draw
    from theseus.store import EmptyResult

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
    try:
        fig = draw(root, nonces, keys, x=x, out=out)
    except (ValueError, EmptyResult, FileNotFoundError) as e:
        fail(str(e), 2)
    lines = fig.axes[0].get_lines()
    Console(highlight=False, soft_wrap=True).print(f"wrote {out}: {len(lines)} line(s), "
                                   + ", ".join(f"{ln.get_label()} ({len(ln.get_xdata())} points)" for ln in lines))


def register(app: typer.Typer) -> None:
    """Add ``verify`` and ``plot`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> sorted(c.name for c in app.registered_commands)
    ['plot', 'verify']
    """
    app.command("verify")(verify)
    app.command("plot")(plot)
