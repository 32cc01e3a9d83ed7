"""The ``theseus launch / submit / logs`` commands: run jobs as several processes, on other machines.

::

    theseus launch gpt/train/pretrain train-gpt /tmp/root training.per_device_batch_size=2 \\
        --processes 2 --devices-per-process 2
    theseus logs /tmp/root 949e88

``launch`` starts N local processes under ``jax.distributed`` (one run, one root);
``submit`` picks a host from the inventory and starts the run there; ``logs``
prints what the processes of a launched run wrote. Bad input (unknown job or
config key, wrong type, unknown node) exits
with code 2 before anything starts and writes nothing.

>>> from typer.testing import CliRunner
>>> from theseus.cli import app
>>> CliRunner().invoke(app, ["launch", "data/tokenize/nope", "r", "/tmp/nowhere"]).exit_code
2
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from theseus.cli.errors import BAD_INPUT, fail
from theseus.dispatch.inventory import load_inventory
from theseus.dispatch.local import launch_local
from theseus.dispatch.logs import find_logs
from theseus.dispatch.remote import HostUnreachable, LaunchFailed
from theseus.dispatch.solver import solve
from theseus.dispatch.submit import request_for
from theseus.dispatch.submit import submit as submit_spec
from theseus.jobs import EXIT_PREEMPTED
from theseus.quick import build_spec

RESTARTS = 3  # starts of a preempted run --auto-resume makes before it reports the preemption


def _say(message: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(message)


def launch(
    job_key: Annotated[str, typer.Argument(help="A registered job key, e.g. gpt/train/pretrain")],
    run_name: Annotated[str, typer.Argument(help="The run name: 'run' or 'project.group.run'")],
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL every process writes to")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Config overrides, e.g. training.tokens=100000")] = None,
    processes: Annotated[int, typer.Option("--processes", "-n", help="How many processes (jax.distributed)")] = 1,
    devices_per_process: Annotated[int | None, typer.Option(
        "--devices-per-process", help="Run each process on the CPU with this many virtual devices")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Continue the run from this node id")] = None,
    branch: Annotated[str | None, typer.Option("--branch", help="Start RUN_NAME as a branch of this node id")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop every process after this many seconds")] = 3600.0,
    auto_resume: Annotated[bool, typer.Option(
        "--auto-resume", help=f"Start the run again, resuming it, when it is preempted (at most {RESTARTS} times)")
    ] = False,
) -> None:
    """Run JOB_KEY as RUN_NAME in ROOT as N local processes under jax.distributed.

    Every process writes to ROOT: process 0 the log records, each its own checkpoint
    shards and its output (``theseus logs ROOT NONCE``). Exit code 0 when every
    process succeeded, 1 when the run failed (recorded in the root), 2 on bad input,
    75 when it was preempted (SIGTERM: a checkpoint committed); with --auto-resume a
    preempted run is started again and resumes from that checkpoint.
    \f
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> result = CliRunner().invoke(app, ["launch", "gpt/train/pretrain", "r", "/tmp/nowhere", "training.tokenz=5"])
    >>> result.exit_code, "training.tokenz" in result.output
    (2, True)
    """

    if resume and branch:
        fail("--resume and --branch exclude each other: continue a run, or start a branch of it", 2)
    try:
        spec = build_spec(root, job_key, run_name, overrides or [], base_node=resume or branch, branch=bool(branch))
        spec = spec.replace(auto_resume=auto_resume)
        _say(f"launch | {spec.job_key} {spec.first_node().name} nonce [bold]{spec.nonce}[/bold] | "
             f"{processes} process(es) | root {spec.root}")
        result = launch_local(spec, processes, devices_per_process, timeout=timeout)
        for restart in range(1, RESTARTS + 1 if auto_resume else 0):
            if result.returncode != EXIT_PREEMPTED or result.timed_out:  # a run past its deadline stays stopped
                break
            _say(f"launch | run {spec.nonce} was preempted; starting it again to resume it ({restart} of {RESTARTS})")
            result = launch_local(spec, processes, devices_per_process, timeout=timeout)
    except BAD_INPUT as e:
        fail(str(e), 2)
    if result.ok:
        _say(f"launch | run {spec.nonce} done in {result.seconds:.1f} s")
        return
    why = "past its deadline" if result.timed_out else f"exit codes {list(result.returncodes)}"
    fail(f"run {spec.nonce} failed ({why}); its output: theseus logs {spec.root} {spec.nonce}", result.returncode)


def submit(
    job_key: Annotated[str, typer.Argument(help="A registered job key, e.g. gpt/train/pretrain")],
    run_name: Annotated[str, typer.Argument(help="The run name: 'run' or 'project.group.run'")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Config overrides, e.g. training.tokens=100000")] = None,
    chip: Annotated[str, typer.Option("--chip", help="Chip kind: cpu, h100, v5p...")] = "cpu",
    n: Annotated[int, typer.Option("--n", help="How many chips")] = 1,
    cluster: Annotated[list[str] | None, typer.Option(
        "--cluster", help="Only this cluster (repeat for several, in priority order)")] = None,
    memory_gb: Annotated[float | None, typer.Option("--memory-gb", help="Memory each process needs")] = None,
    cpus: Annotated[int | None, typer.Option("--cpus", help="CPUs each process needs")] = None,
    inventory: Annotated[str | None, typer.Option(
        "--inventory", help="Inventory file (default ~/.theseus.yaml)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; start nothing")] = False,
    allow_dirty: Annotated[bool, typer.Option("--allow-dirty", help="Ship uncommitted changes too")] = False,
    repo: Annotated[str | None, typer.Option(
        "--repo", help="The git checkout to ship (default: theseus's own)")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Continue the run from this node id")] = None,
    branch: Annotated[str | None, typer.Option("--branch", help="Start RUN_NAME as a branch of this node id")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop the run after this many seconds")] = 3600.0,
    auto_resume: Annotated[bool, typer.Option(
        "--auto-resume", help="A preempted run resumes: SLURM requeues it (--requeue), an ssh host starts it again")
    ] = False,
) -> None:
    """Run JOB_KEY as RUN_NAME on a host of the inventory that has N x CHIP.

    The host is chosen by the solver; the code at the current commit and the job
    spec are shipped, the host's environment is synced with uv, and one process per
    node starts under jax.distributed, writing into the cluster's root. --dry-run
    prints the plan (script, sbatch file, Volcano manifest or TPU commands) instead.
    \f
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> CliRunner().invoke(app, ["submit", "gpt/train/pretrain", "r", "--inventory", "/nonexistent.yaml"]).exit_code
    2
    """

    if resume and branch:
        fail("--resume and --branch exclude each other: continue a run, or start a branch of it", 2)
    try:
        inv = load_inventory(inventory)
        request = request_for(inv, chip, n, cluster or (), memory_gb, cpus)
        root = solve(inv, request).cluster.root
        spec = build_spec(root, job_key, run_name, overrides or [], base_node=resume or branch, branch=bool(branch))
        spec = spec.replace(auto_resume=auto_resume)
        done = _submit_resuming(spec, inv, request, dry_run, repo=repo, allow_dirty=allow_dirty, timeout=timeout)
    except (*BAD_INPUT, HostUnreachable) as e:  # an unreachable host: nothing started
        fail(str(e), 2)
    except LaunchFailed as e:  # the launch failed or ran past its deadline: recorded in the root
        fail(str(e), 1)
    if dry_run:
        Console(highlight=False, soft_wrap=True).out(done.plan, end="", highlight=False)
        return
    _say(f"submit | run {done.nonce} done on {done.placement.host.name}; its output: "
         f"theseus logs {done.spec.root} {done.nonce}")


def _submit_resuming(spec, inventory, request, dry_run: bool, **options):
    """``submit`` the spec; on an ssh host, a run with ``auto_resume`` that ended preempted is submitted again
    (at most ``RESTARTS`` times): SLURM requeues such a run itself."""
    for restart in range(RESTARTS + 1):
        try:
            return submit_spec(spec, inventory, request, dry_run, **options)
        except LaunchFailed as e:
            if not spec.auto_resume or EXIT_PREEMPTED not in e.returncodes or restart == RESTARTS:
                raise
            _say(f"submit | run {spec.nonce} was preempted; submitting it again to resume it "
                 f"({restart + 1} of {RESTARTS})")
    raise AssertionError("unreachable")


def logs(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    nonce: Annotated[str, typer.Argument(help="The run's nonce (6 hex characters)")],
    process: Annotated[int | None, typer.Option("--process", "-p", help="Only this process")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines of each output")] = None,
) -> None:
    """Print the output of every process of every launch of run NONCE.

    \f
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> import tempfile
    >>> CliRunner().invoke(app, ["logs", tempfile.mkdtemp(), "abcdef"]).exit_code
    2
    """

    try:
        found = find_logs(root, nonce, process)
    except BAD_INPUT as e:
        fail(str(e), 2)
    if not found:
        which = f"process {process} of " if process is not None else ""
        fail(f"{which}run {nonce} has no published output in {root} (was it launched with theseus launch/submit?)", 1)
    console = Console(highlight=False, soft_wrap=True)
    for log in found:
        console.rule(escape(log.title))
        text = log.text()
        if tail is not None:
            text = "\n".join(text.splitlines()[-tail:]) + "\n"
        console.out(text, end="", highlight=False)


def register(app: typer.Typer) -> None:
    """Add these commands to a Typer app.

    >>> import typer
    >>> app = typer.Typer()
    >>> register(app); sorted(c.name or c.callback.__name__ for c in app.registered_commands)
    ['launch', 'logs', 'submit']
    """
    app.command(context_settings={"ignore_unknown_options": True})(launch)
    app.command(context_settings={"ignore_unknown_options": True})(submit)
    app.command()(logs)
