"""Launch a run on SLURM: an sbatch script whose ``srun`` starts the bootstrap once per task.

``sbatch_script(spec, placement)`` is the batch script: ``--nodes``, ``--ntasks``
(one task per process), ``--cpus-per-task``, the host's partitions, account,
qos, time and memory, output into the launch's stage folder, and ``--requeue``
when the spec has ``auto_resume`` (``--no-requeue`` otherwise): SLURM's SIGTERM
makes the training job commit a checkpoint and exit 75, and the requeued job's
start resumes it (`theseus.dispatch.bootstrap`). It picks a free
port for the ``jax.distributed`` coordinator on the first node (127.0.0.1 when
the job has one node), exports the devices' and the host's and spec's
environment, and runs ``srun --kill-on-bad-exit=1 bash bootstrap.sh``; each task's
bootstrap reads its process id from ``SLURM_PROCID`` (a ``THESEUS_PROCESS_ID``
passed on from the submitting shell is unset) and the count from ``SLURM_NTASKS``.

``launch_slurm(spec, placement, tarball)`` checks the controller answers
(``scontrol ping``; over ssh when the host's ``login`` is not ``localhost``),
ships the code, the spec and both scripts into
``<work_dir>/launches/<nonce>-<token>/`` (``work_dir`` must be on a filesystem
the nodes share), submits with ``sbatch --parsable``, polls ``squeue -h -j ID``
with a deadline (streaming the job's output), then reads the final state with
``scontrol show job ID`` (there is no accounting database).

>>> from theseus.dispatch.inventory import Cluster, SlurmHost
>>> from theseus.dispatch.solver import Placement
>>> from theseus.dispatch.spec import LaunchSpec
>>> host = SlurmHost(name="hpc", cluster="lab", chip="cpu", chips=4, partitions=("debug",))
>>> placement = Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 2, 2)
>>> script = sbatch_script(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), placement)
>>> [line for line in script.splitlines() if line.startswith("#SBATCH --n")]
['#SBATCH --nodes=1', '#SBATCH --ntasks=2', '#SBATCH --ntasks-per-node=2', '#SBATCH --no-requeue']
>>> "#SBATCH --requeue" in sbatch_script(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef", auto_resume=True), placement)
True
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from theseus.dispatch.remote import (
    FREE_PORT,
    HostUnreachable,
    Launched,
    LaunchFailed,
    Ssh,
    absolute,
    require_host,
    ship,
)
from theseus.dispatch.stage import device_env, exports, new_stage, stage_files
from theseus.errors import BadInput

__all__ = ["Login", "launch_slurm", "sbatch_script", "job_state"]


def sbatch_script(spec: Any, placement: Any, stage: str | None = None, uv: str | None = None) -> str:
    """The sbatch script of ``spec`` on the placement's SLURM host; its files live in ``stage``
    (default ``<work_dir>/launches/<nonce>``), where ``bootstrap.sh`` must be.

    >>> from theseus.dispatch.inventory import Cluster, SlurmHost
    >>> from theseus.dispatch.solver import Placement
    >>> from theseus.dispatch.spec import LaunchSpec
    >>> host = SlurmHost(name="hpc", cluster="lab", chip="h100", chips=8, nodes=4, account="ml", time="02:00:00")
    >>> placement = Placement(host, Cluster(name="lab", root="gs://b/r", work_dir="/scratch"), 2, 2, 8)
    >>> script = sbatch_script(LaunchSpec("k/x", "r", "", "gs://b/r", nonce="abcdef"), placement)
    >>> print("\\n".join(l for l in script.splitlines() if l.startswith(("#SBATCH --gres", "#SBATCH --acc", "srun"))))
    #SBATCH --account=ml
    #SBATCH --gres=gpu:8
    srun --kill-on-bad-exit=1 --label bash /scratch/launches/abcdef/bootstrap.sh
    """
    host = placement.host
    require_host(host, "slurm", "sbatch_script needs a slurm host")
    nodes, n = placement.nodes, placement.processes
    if nodes < 1 or n % nodes:
        raise BadInput(f"slurm host {host.name!r}: {n} processes do not split evenly over {nodes} nodes")
    stage = stage or f"{placement.cluster.work_dir}/launches/{spec.nonce}"
    per_node = n // nodes
    cpus = host.cpus_per_task or (placement.chips_per_process if host.chip == "cpu" else None)
    options = [f"--job-name=theseus-{spec.run_name}-{spec.nonce}", f"--nodes={nodes}", f"--ntasks={n}",
               f"--ntasks-per-node={per_node}"]
    options += [f"--cpus-per-task={cpus}"] if cpus else []
    options += [f"--partition={','.join(host.partitions)}"] if host.partitions else []
    options += [f"--account={host.account}"] if host.account else []
    options += [f"--qos={host.qos}"] if host.qos else []
    options += [f"--time={host.time}"]
    options += [f"--mem={int(host.memory_gb * 1024)}M"] if host.memory_gb else []
    options += [f"--gres=gpu:{per_node * placement.chips_per_process}"] if host.chip not in ("cpu", "tpu") else []
    options += [f"--output={stage}/slurm-%j.out", f"--chdir={stage}"]
    # auto_resume: a requeued job (preemption, `scontrol requeue`) starts the same spec again, which resumes it
    options += ["--requeue" if spec.auto_resume else "--no-requeue"]
    q = shlex.quote
    env = {**device_env(host.chip, placement.chips_per_process), **host.env, **spec.env}
    head = "127.0.0.1" if nodes == 1 else '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in options), "set -uo pipefail",
             *exports(env, uv),
             f"port=$(python3 -c {q(FREE_PORT)} 2>/dev/null || echo $((20000 + SLURM_JOB_ID % 20000)))",
             f'export THESEUS_COORDINATOR="{head}:$port"',
             'export THESEUS_NUM_PROCESSES="$SLURM_NTASKS"',
             "unset THESEUS_PROCESS_ID  # each task's id is its SLURM_PROCID",
             'echo "[theseus] job $SLURM_JOB_ID: $SLURM_NTASKS tasks on $SLURM_JOB_NODELIST, '
             'coordinator $THESEUS_COORDINATOR"',
             f"srun --kill-on-bad-exit=1 --label bash {q(stage + '/bootstrap.sh')}",
             "status=$?",
             f'echo "$status" > {q(stage + "/exit-code")}',
             'exit "$status"']
    return "\n".join(line for line in lines if line) + "\n"


class Login:
    """Where SLURM's commands run: here (``login: localhost``) or on the login host over ssh.

    >>> Login(None).run("echo hi").stdout
    b'hi\\n'
    """

    def __init__(self, ssh: Ssh | None):
        self.ssh = ssh

    @classmethod
    def of(cls, host: Any, known_hosts: str | None = None) -> Login:
        """The login of a ``SlurmHost``.

        >>> from theseus.dispatch.inventory import SlurmHost
        >>> Login.of(SlurmHost(name="h", cluster="c", chip="cpu", chips=1)).where
        'localhost'
        """
        return cls(None if host.login == "localhost" else Ssh.of(host, known_hosts))

    @property
    def where(self) -> str:
        """``localhost`` or ``user@login-host``."""
        return "localhost" if self.ssh is None else self.ssh.target

    def run(self, command: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run the shell ``command`` there (bytes out/err; never raises on status)."""
        if self.ssh is not None:
            return self.ssh.run(command, input=input, timeout=timeout)
        return subprocess.run(["bash", "-c", command], input=input, capture_output=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def home(self) -> str:
        """The home folder there; an unreachable login host raises ``HostUnreachable``."""
        if self.ssh is None:
            return os.path.expanduser("~")
        return self.ssh.probe()[0]


def job_state(text: str) -> tuple[str, str]:
    """``(JobState, ExitCode)`` from ``scontrol show job`` output.

    >>> job_state("JobId=7 JobName=x\\n   JobState=FAILED Reason=NonZeroExitCode\\n   ExitCode=1:0\\n")
    ('FAILED', '1:0')
    """
    state = re.search(r"\bJobState=(\S+)", text)
    code = re.search(r"\bExitCode=(\S+)", text)
    return (state.group(1) if state else "UNKNOWN", code.group(1) if code else "?")


def launch_slurm(spec: Any, placement: Any, tarball: bytes, *, uv: str | None = None, timeout: float = 3600,
                 poll: float = 0.5, stream: IO[str] | None = sys.stderr, known_hosts: str | None = None) -> Launched:
    """Submit ``spec`` to the placement's SLURM host, follow it to its end, return ``Launched`` (``job_id`` set).

    Raises ``HostUnreachable`` when the login host or the controller does not
    answer (nothing shipped or submitted), ``LaunchFailed`` when the job ends in
    any state but COMPLETED or runs past ``timeout`` seconds (it is then cancelled).

    >>> from theseus.dispatch.inventory import Cluster, SlurmHost
    >>> from theseus.dispatch.solver import Placement
    >>> from theseus.dispatch.spec import LaunchSpec
    >>> host = SlurmHost(name="hpc", cluster="lab", chip="cpu", login="127.0.0.1", port=1, chips=4)
    >>> placement = Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 1, 4)
    >>> launch_slurm(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), placement, b"")
    Traceback (most recent call last):
    ...
    theseus.dispatch.remote.HostUnreachable: cannot reach ssh host 127.0.0.1:1: ssh: ...: Connection refused; ...
    """
    host = placement.host
    require_host(host, "slurm", "launch_slurm needs a slurm host")
    login = Login.of(host, known_hosts)
    work_dir = absolute(placement.cluster.work_dir, login.home())
    _require_controller(login, host.name)
    stage = new_stage(work_dir, spec.nonce)
    files = stage_files(spec, tarball, work_dir, stage)
    files["job.sbatch"] = sbatch_script(spec, placement, stage, uv).encode()
    ship(login.run, login.where, stage, files)
    job_id = _submit(login, stage)
    out_file = f"{stage}/slurm-{job_id}.out"
    follow = _Follow(login, out_file, stream)
    _await_end(login, job_id, follow, time.monotonic() + timeout, poll, lambda: LaunchFailed(
        f"SLURM job {job_id} ({spec.job_key} {spec.run_name!r}) ran past its deadline "
        f"of {timeout:.0f} s and was cancelled; output in {login.where}:{out_file}; "
        f"last lines:\n{follow.tail()}", (None,), follow.tail(), stage))
    follow.read()
    state, code = _end_state(login, job_id, stage)
    status = int(code.split(":")[0]) if code.split(":")[0].isdigit() else 1
    if state != "COMPLETED":
        raise LaunchFailed(f"SLURM job {job_id} ({spec.job_key} {spec.run_name!r}) ended {state} with exit code "
                           f"{code}; output in {login.where}:{out_file}; last lines:\n{follow.tail()}",
                           (status,), follow.tail(), stage)
    return Launched(host.name, stage, spec.first_node().id, (status,), follow.tail(), job_id)


def _require_controller(login: Login, host_name: str) -> None:
    """Raise HostUnreachable unless the SLURM controller answers ``scontrol ping`` (checked before anything
    is shipped, so that a dead controller costs nothing)."""
    ping = login.run("scontrol ping", timeout=60)
    if ping.returncode != 0 or not re.search(rb"\bis UP\b", ping.stdout):
        said = " ".join(line.strip() for line in (ping.stdout + ping.stderr).decode(errors="replace").splitlines()
                        if line.strip() and not line.startswith("*"))
        raise HostUnreachable(f"the SLURM controller of host {host_name!r} does not answer `scontrol ping` on "
                              f"{login.where}: {said or 'no output'}; nothing was shipped or submitted")


def _submit(login: Login, stage: str) -> str:
    """``sbatch`` the staged ``job.sbatch``, returning its job id (LaunchFailed naming sbatch's words when
    it refuses)."""
    submitted = login.run(f"sbatch --parsable {shlex.quote(stage + '/job.sbatch')}", timeout=120)
    job_id = submitted.stdout.decode(errors="replace").strip().split(";")[0]
    if submitted.returncode != 0 or not job_id.isdigit():
        raise LaunchFailed(f"sbatch refused the job on {login.where}: "
                           f"{(submitted.stdout + submitted.stderr).decode(errors='replace').strip()}")
    return job_id


def _await_end(login: Login, job_id: str, follow: _Follow, deadline: float, poll: float,
               overdue: Callable[[], Exception]) -> None:
    """Stream the job's output while it is queued; past ``deadline`` (monotonic) cancel it and raise
    ``overdue()``, and cancel it too when interrupted here (the job is ours)."""
    try:
        while _queued(login, job_id):
            follow.read()
            if time.monotonic() > deadline:
                _cancel(login, job_id)
                follow.read()
                raise overdue()
            time.sleep(poll)
    except (KeyboardInterrupt, SystemExit):  # the job is ours: interrupted here, it is cancelled there
        _cancel(login, job_id)
        raise


def _end_state(login: Login, job_id: str, stage: str) -> tuple[str, str]:
    """The ended job's ``(state, exit code)`` from ``scontrol``, or from the status the script wrote when the
    controller has forgotten the job (MinJobAge)."""
    shown = login.run(f"scontrol show job {job_id}", timeout=60)
    state, code = job_state(shown.stdout.decode(errors="replace"))
    if state == "UNKNOWN":  # the controller forgot the job (MinJobAge): the script wrote srun's status
        written = login.run(f"cat {shlex.quote(stage + '/exit-code')}").stdout.decode().strip()
        state, code = ("COMPLETED" if written == "0" else "FAILED"), f"{written or '?'}:0"
    return state, code


def _cancel(login: Login, job_id: str, wait: float = 60) -> None:
    """``scancel`` the job and wait (at most ``wait`` seconds) until it has left the queue."""
    login.run(f"scancel {job_id}", timeout=60)
    deadline = time.monotonic() + wait
    while _queued(login, job_id) and time.monotonic() < deadline:
        time.sleep(0.2)


def _queued(login: Login, job_id: str) -> bool:
    """True while ``squeue`` lists the job (pending, running or completing)."""
    out = login.run(f"squeue -h -j {job_id} -o %T", timeout=60)
    return out.returncode == 0 and bool(out.stdout.strip())


class _Follow:
    """Reads what was appended to the job's output file since the last call, streams it, keeps a tail."""

    def __init__(self, login: Login, path: str, stream: IO[str] | None, keep: int = 200):
        self.login, self.path, self.stream, self.keep = login, path, stream, keep
        self.offset, self.lines, self.partial = 0, [], ""

    def read(self) -> None:
        got = self.login.run(f"tail -c +{self.offset + 1} {shlex.quote(self.path)} 2>/dev/null").stdout
        if not got:
            return
        self.offset += len(got)
        *complete, self.partial = (self.partial + got.decode(errors="replace")).split("\n")
        for line in complete:
            if self.stream is not None:
                print(f"[slurm] {line}", file=self.stream, flush=True)
        self.lines = (self.lines + complete)[-self.keep:]

    def tail(self, n: int = 60) -> str:
        return "\n".join((self.lines + ([self.partial] if self.partial else []))[-n:])
