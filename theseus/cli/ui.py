"""The ``theseus ui`` command: a local, read-only web app over a root (``theseus.ui``).

::

    theseus ui /tmp/root                 # http://127.0.0.1:8765
    theseus ui gs://bucket/root --port 9000

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["ui", "/no/such/theseus-root"]).exit_code
2
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from theseus.cli.errors import ROOT_ERRORS, fail, message
from theseus.ui.server import DEFAULT_PORT, create_app
from theseus.ui.status import STALE_AFTER_S


def ui(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL (only read, never written)")],
    host: Annotated[str, typer.Option(
        help="The address to listen on (127.0.0.1: this machine only); the app answers only requests "
             "naming it or a loopback name")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on")] = DEFAULT_PORT,
    stale_after: Annotated[float, typer.Option(
        "--stale-after", help="Seconds without a write after which a running run shows as stale")] = STALE_AFTER_S,
) -> None:
    """Serve a web app over ROOT: runs, charts, run and node pages, updated live. Reads only.

    Every script and style ships with theseus: the app needs no network.
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> "--port" in CliRunner().invoke(app, ["ui", "--help"]).output
    True
    """
    import uvicorn  # the server loads only when serving

    if not 0 < port < 65536:
        fail(f"--port must be between 1 and 65535, got {port}", 2)
    try:
        app = create_app(root, stale_after_s=stale_after, hosts=[host])
    except ROOT_ERRORS as e:
        fail(message(e), 2)
    Console(highlight=False).print(f"theseus ui: http://{host}:{port}/ over {root} (read-only; Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add ``ui`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['ui']
    """
    app.command("ui")(ui)
