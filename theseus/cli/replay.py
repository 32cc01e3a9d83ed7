"""The ``theseus verify`` command: replay a checkpoint and compare with what the run logged.

::

    theseus verify ROOT NODE_ID --steps 5            # exit 0 bitwise/tolerance, 1 diverged, 2 bad input

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["verify", "/tmp/nowhere", "bad-id"]).exit_code
2
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message


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
    # lazily: replay loads JAX, which the other commands never need
    from theseus.replay.verify import verify as run_verify
    from theseus.store import EmptyResult

    log_to_stderr(log_level)
    try:
        result = run_verify(root, node_id, steps, rtol=rtol, atol=atol)
    except EmptyResult as e:
        fail(str(e), 2)
    except ROOT_ERRORS as e:  # a damaged or unreadable checkpoint too: one line naming the file and the node
        fail(message(e), 2)
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
    table = Table("step", "logged train/loss", "replayed", "abs diff",
                  title=f"replay of {result.node} from step {result.start}")
    for k in v.steps:
        a, b = result.logged[k], result.replayed[k]
        mark = " <- first divergence" if k == v.first_divergence else ""
        table.add_row(str(k), repr(a), repr(b), f"{abs(a - b):.3g}{mark}")
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    line = (f"{words[v.status]}: {len(v.steps)} steps compared, max abs diff {v.max_abs_diff:.3g}, "
            f"max rel diff {v.max_rel_diff:.3g}")
    if v.first_divergence is not None:
        line += f", first divergent step {v.first_divergence}"
    console.print(line)


def register(app: typer.Typer) -> None:
    """Add ``verify`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['verify']
    """
    app.command("verify")(verify)
