"""The ``theseus`` command (typer + rich).

``theseus jobs [PREFIX]`` lists the registered jobs; ``theseus run JOB_KEY
RUN_NAME ROOT key=value ...`` builds a job, applies the overrides, creates and
runs it, like ``quick(root)`` does in Python. ``--import FILE`` (repeatable, a file
or a dotted module name) imports the user's experiments before the command runs,
so their jobs are registered for every command::

    theseus jobs data/tokenize
    theseus run data/tokenize/pydoc tokenize-pydoc /tmp/root data.max_samples=100
    theseus --import my_experiments.py run mylab/train/mix mix /tmp/root

>>> from typer.testing import CliRunner
>>> "data/tokenize/pydoc" in CliRunner().invoke(app, ["jobs", "data/tokenize/py"]).output
True
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from theseus import catalog
from theseus.cli import analyze as analyze_commands
from theseus.cli import audit as audit_commands
from theseus.cli import dispatch as dispatch_commands
from theseus.cli import evaluate as evaluate_commands
from theseus.cli import export as export_commands
from theseus.cli import manage as manage_commands
from theseus.cli import parts as parts_commands
from theseus.cli import plot as plot_commands
from theseus.cli import replay as replay_commands
from theseus.cli import sample as sample_commands
from theseus.cli import store as store_commands
from theseus.cli import ui as ui_commands
from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message
from theseus.config import apply_overrides
from theseus.experiments import ExperimentError, import_experiment
from theseus.quick import quick

app = typer.Typer(
    name="theseus",
    help="theseus: a JAX language-model trainer whose every moment is a record in one store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(
    imports: Annotated[list[str] | None, typer.Option(
        "--import", metavar="FILE",
        help="Import this experiment file (or dotted module) first, registering its jobs; repeatable")] = None,
) -> None:
    """theseus: jobs, runs and the store.

    \f
    >>> from typer.testing import CliRunner
    >>> result = CliRunner().invoke(app, [])  # no command: the help, listing the commands
    >>> all(command in result.output for command in ("jobs", "ls", "audit", "launch", "verify", "--import"))
    True
    >>> CliRunner().invoke(app, ["--import", "/nowhere/mine.py", "jobs"]).exit_code  # a missing file: bad input
    2
    """
    for target in imports or ():
        try:
            import_experiment(target)
        except ExperimentError as e:
            fail(str(e), 2)


@app.command()
def jobs(prefix: Annotated[str, typer.Argument(help="Only jobs whose key starts with this, e.g. data/tokenize")] = "",
         ) -> None:
    """List the registered jobs (key and one-line description).

    \f
    >>> from typer.testing import CliRunner
    >>> "Description" in CliRunner().invoke(app, ["jobs"]).output
    True
    """

    found = catalog.jobs(prefix)  # the built-in jobs from catalog.json: their modules import JAX
    if not found:
        fail(f"no job key starts with {prefix!r} (`theseus jobs` lists them all)", 2)
    table = Table("Job", "Description")
    for key, description in found.items():
        table.add_row(key, description)
    Console().print(table)


@app.command(context_settings={"ignore_unknown_options": True})
def run(
    job_key: Annotated[str, typer.Argument(help="A registered job key, e.g. data/tokenize/fineweb")],
    run_name: Annotated[str, typer.Argument(help="The run name: 'run' or 'project.group.run'")],
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL where everything goes")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Config overrides, e.g. data.max_tokens=1000")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level: DEBUG, INFO, WARNING...")] = "DEBUG",
) -> None:
    """Build JOB_KEY as RUN_NAME in ROOT, apply key=value overrides, create and run it.

    Bad input (unknown job or config key, wrong type, missing file...) exits with
    code 2 and writes nothing; a failed run is recorded in the store and exits 1.
    \f
    >>> from typer.testing import CliRunner
    >>> CliRunner().invoke(app, ["run", "data/tokenize/nope", "r", "/tmp/nowhere"]).exit_code
    2
    """

    log_to_stderr(log_level)
    try:
        with quick(root) as q:
            q.build(job_key, run_name)
            apply_overrides(q.config, overrides or [])
            job = q.create()
    except ROOT_ERRORS as e:
        fail(message(e), 2)
    try:
        job()
    except KeyboardInterrupt:
        fail(f"interrupted; the failure is recorded at node {job.node.id}", 130)
    except Exception as e:
        fail(f"{type(e).__name__}: {e} (recorded at node {job.node.id})", 1)


store_commands.register(app)  # ls, show, compact
manage_commands.register(app)  # tag, untag, note, hide, unhide
audit_commands.register(app)  # audit, gc
replay_commands.register(app)  # verify
sample_commands.register(app)  # sample
evaluate_commands.register(app)  # eval
plot_commands.register(app)  # plot
dispatch_commands.register(app)  # submit, launch, logs
parts_commands.register(app)  # parts
analyze_commands.register(app)  # analyze
export_commands.register(app)  # export tensorboard
ui_commands.register(app)  # ui

