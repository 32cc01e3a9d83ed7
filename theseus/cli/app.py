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
from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message
from theseus.cli.lazy import LazyGroup

app = typer.Typer(
    name="theseus",
    help="theseus: a JAX language-model trainer whose every moment is a record in one store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,  # the other commands' modules (theseus.cli.lazy.COMMANDS) load when their command runs
    rich_markup_mode=None,  # click's plain help: the rich one would import every command module
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
    from theseus.experiments import ExperimentError, import_experiment

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
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the newest unfinished lineage of RUN_NAME from its latest checkpoint")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level: DEBUG, INFO, WARNING...")] = "DEBUG",
) -> None:
    """Build JOB_KEY as RUN_NAME in ROOT, apply key=value overrides, create and run it.

    --resume continues the newest lineage of RUN_NAME when it did not finish, from its
    latest committed checkpoint (its own nonce, as ``q.find()...resume()`` does; the
    overrides apply to its recorded config); with no such lineage the run starts at step 0,
    and when that lineage finished there is nothing to do. Bad input (unknown job or config
    key, wrong type, missing file...) exits with code 2 and writes nothing; a failed run is
    recorded in the store and exits 1; a training run stopped by SIGTERM commits a
    checkpoint, is recorded ``preempted`` and exits 75 (--resume continues it).
    \f
    >>> from typer.testing import CliRunner
    >>> CliRunner().invoke(app, ["run", "data/tokenize/nope", "r", "/tmp/nowhere"]).exit_code
    2
    """
    from theseus.cli.resuming import newest_lineage  # lazily, as the CLI loads what one command needs
    from theseus.config import apply_overrides
    from theseus.jobs import EXIT_PREEMPTED, Preempted
    from theseus.quick import quick

    log_to_stderr(log_level)
    say = Console(stderr=True, highlight=False, soft_wrap=True).print
    again = f"theseus run {job_key} {run_name} {root} --resume"
    try:
        with quick(root) as q:
            lineage = newest_lineage(q.store, run_name)
            unfinished = lineage is not None and not lineage.finished
            if resume and lineage is not None and lineage.finished:
                say(f"resume | the newest lineage {lineage.label} finished: nothing to resume "
                    "(run without --resume to start a new lineage)")
                return
            if resume and unfinished and lineage.checkpoint_seq is not None:
                q.find().name(lineage.name).nonce(lineage.nonce).checkpoint().resume()
                if q.job_key != job_key:
                    fail(f"{lineage.label} is a run of job {q.job_key}, not {job_key}", 2)
            else:
                if resume:
                    why = (f"{lineage.label} ({lineage.status}) has no committed checkpoint" if unfinished
                           else f"no lineage of {run_name} in {root}")
                    say(f"resume | {why}: starting a new lineage at step 0")
                elif unfinished:
                    where = (f"its checkpoint at seq {lineage.checkpoint_seq}" if lineage.checkpoint_seq is not None
                             else "no checkpoint yet")
                    say(f"hint | the newest lineage {lineage.label} is {lineage.status} ({where}); `{again}` "
                        "continues it. Starting a new lineage at step 0")
                q.build(job_key, run_name)
            apply_overrides(q.config, overrides or [])
            job = q.create()
            if resume and job.base is not None:
                how = "continuing it" if job.node.nonce == job.base.nonce else \
                    f"as branch {job.node.nonce} (the lineage went on past that checkpoint)"
                say(f"resume | {lineage.label} ({lineage.status}) from its checkpoint at seq {job.base.seq}, {how}")
    except ROOT_ERRORS as e:
        fail(message(e), 2)
    try:
        job()
    except Preempted as e:
        fail(f"{e}; `{again}` continues it", EXIT_PREEMPTED)
    except KeyboardInterrupt:
        fail(f"interrupted; the failure is recorded at node {job.node.id}", 130)
    except Exception as e:
        fail(f"{type(e).__name__}: {e} (recorded at node {job.node.id})", 1)

