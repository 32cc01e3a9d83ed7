"""The ``theseus eval`` command: evaluate any checkpoint, the results written as a new lineage under it.

::

    theseus eval ROOT NONCE --tasks pydoc,addition --limit 64
    theseus eval ROOT NODE_ID --tasks hellaswag eval.hellaswag.path=/data/hellaswag
    theseus eval ROOT NONCE --harness arc_easy,mytask --include-path ./tasks --limit 100

A nonce means that run's last committed checkpoint. It runs the ``gpt/evaluate`` job
(`theseus.replay.evaluate`): one node whose parent is the checkpoint's node, holding
``eval/<task>/<metric>``, visible in ``theseus ls`` / ``theseus show`` and to
``find().job("gpt/evaluate")``. ``key=value`` arguments set the job's config (each task's
``eval.<task>.*`` settings). ``--harness`` runs lm-evaluation-harness tasks on the checkpoint
too (`theseus.train.evals.harness`; lm-eval is in the optional ``eval`` group): its own
tasks, or YAML tasks in the ``--include-path`` folders, their scores recorded the same way.
Bad input (no such run or node, a node without a checkpoint, an unknown task or none,
lm-eval not installed for ``--harness``) exits 2 and writes nothing.

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["eval", "/tmp/nowhere", "abc123", "--tasks", ""]).exit_code
2
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message
from theseus.store import EmptyResult


def evaluate(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    target: Annotated[str, typer.Argument(metavar="NODE_ID|NONCE",
                                          help="A node with a checkpoint, or a run's nonce (its last checkpoint)")],
    tasks: Annotated[str, typer.Option("--tasks", "-t", help="Evaluations, comma-separated (`theseus parts "
                                                              "evaluation`: pydoc, addition, hellaswag...)")] = "",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value settings, e.g. eval.hellaswag.path=DIR")
                         ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="The first N examples of each evaluation, N >= 1 "
                                                              "(eval.length; -1 or left out: all; 0 is refused)")
                     ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Run name of the results (default: <run>-eval)")
                    ] = None,
    harness: Annotated[str, typer.Option("--harness", help="lm-evaluation-harness tasks, comma-separated (its own, "
                                                           "or YAML tasks in an --include-path folder)")] = "",
    include_path: Annotated[list[str] | None, typer.Option("--include-path", help="A folder of lm-eval task YAML "
                                                                                  "files; repeatable")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level of the trainer's log")] = "WARNING",
) -> None:
    """Evaluate NODE_ID's checkpoint (or a run's last, by NONCE) on TASKS; write the results as a new lineage.

    Exit status 2 on bad input: unknown run or node, no checkpoint, an unknown task or none,
    a --limit of 0 or below -1, an empty --name, a bad key=value (or one of evaluate.*, which
    the arguments set), --harness without lm-eval installed; nothing is recorded then. A
    failed evaluation is recorded on its node and exits 1.
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> result = CliRunner().invoke(app, ["eval", "/tmp/nowhere", "abc123", "--tasks", "nope"])
    >>> result.exit_code
    2
    """
    from theseus.config import apply_overrides  # lazily: the job and JAX load only for this command
    from theseus.quick import quick
    from theseus.replay.evaluate import evaluation_parts
    from theseus.replay.restore import checkpoint_for

    log_to_stderr(log_level)
    check_inputs(limit, name, overrides or [])
    lm_tasks = [t.strip() for t in harness.split(",") if t.strip()]
    try:
        if tasks.strip() or not lm_tasks:
            evaluation_parts(tasks)  # an unknown task fails before the checkpoint is read
        with quick(root) as q:
            node, _ = checkpoint_for(q.store, target)
            q.build("gpt/evaluate", name or f"{node.name}-eval")
            q.config.evaluate.checkpoint = node.id
            q.config.evaluate.tasks = [t.strip() for t in tasks.split(",") if t.strip()]
            q.config.evaluate.harness = lm_tasks
            q.config.evaluate.include_path = [os.path.abspath(p) for p in include_path or []]
            if limit is not None:
                q.config.eval.length = limit
            apply_overrides(q.config, overrides or [])
            job = q.create()
    except EmptyResult as e:
        fail(str(e), 2)
    except ROOT_ERRORS as e:
        fail(message(e), 2)
    except ImportError as e:  # --harness without the optional eval group: the message says how to install it
        fail(str(e), 2)
    try:
        metrics = job()
    except Exception as e:
        fail(f"{type(e).__name__}: {e} (recorded at node {job.node.id})", 1)
    table = Table(title=f"{node.name}:{node.nonce}:{node.seq} -> {job.node.name}:{job.node.nonce} ({job.node.id})")
    table.add_column("key")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    Console(highlight=False, soft_wrap=True).print(table)


def check_inputs(limit: int | None, name: str | None, overrides: list[str]) -> None:
    """Exit 2 on an empty ``--name`` or an override of what an argument sets (``evaluate.*``; ``eval.length``
    beside ``--limit``), before anything is read or recorded. (The job refuses a ``--limit`` of 0 or below -1.)

    >>> check_inputs(-1, None, ["eval.hellaswag.path=/data"])
    >>> try:
    ...     check_inputs(None, "", [])
    ... except typer.Exit as e:
    ...     e.exit_code
    2
    """
    if name is not None and not name.strip():
        fail("--name is empty: give the results' run name, or leave it out for <run>-eval", 2)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key.startswith("evaluate.") or key == "evaluate":
            fail(f"{item!r}: evaluate.* is set by the arguments (NODE_ID|NONCE, --tasks, --harness, --include-path)",
                 2)
        if key == "eval.length" and limit is not None:
            fail(f"{item!r} and --limit both set eval.length: give one of them", 2)


def register(app: typer.Typer) -> None:
    """Add ``eval`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['eval']
    """
    app.command("eval")(evaluate)
