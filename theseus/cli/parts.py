"""The ``theseus parts`` command: the parts a training job is composed of, and the config keys each adds.

::

    theseus parts              # every kind
    theseus parts optimizer    # one kind

>>> from typer.testing import CliRunner
>>> from theseus.cli import app
>>> result = CliRunner().invoke(app, ["parts", "optimiser"])
>>> result.exit_code, "the kinds are model, optimizer" in result.output
(2, True)
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from theseus import catalog
from theseus.cli.errors import fail
from theseus.errors import BadInput


def list_parts(kind: Annotated[str | None, typer.Argument(
        help=f"Only the parts of this kind: {', '.join(catalog.kinds())}")] = None) -> None:
    """List the parts training jobs are composed of: kind, name, config section and keys, description.

    An unknown KIND exits with code 2 and lists the kinds.
    \f
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> output = CliRunner().invoke(app, ["parts", "optimizer"], env={"COLUMNS": "200"}).output
    >>> "adamw" in output and "optimization: weight_decay=0.1" in output and "wsd" not in output
    True
    """
    try:
        found = catalog.parts(kind)  # the built-in parts from catalog.json: their modules import JAX
    except BadInput as e:
        fail(str(e), 2)
    if not any(found.values()):
        Console(highlight=False).print(f"no {kind} parts are registered")
        return
    table = Table("Kind", "Name", "Config", "Description")
    for each_kind, members in found.items():
        for name, (config, description) in members.items():
            table.add_row(each_kind, name, config, description)
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add ``parts`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['parts']
    """
    app.command("parts")(list_parts)
