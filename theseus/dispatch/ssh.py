"""Launch a run on an SSH host: probe it, ship the code and the spec, start the bootstrap, stream its output.

``launch_ssh(spec, placement, tarball)`` works with the system's ``ssh`` client
(BatchMode, so it never prompts; the host's port, user and key from the
inventory). In order:

1. probe the host (``ssh HOST true`` plus its home folder and a free port for
   the ``jax.distributed`` coordinator). An unreachable host is a
   ``HostUnreachable`` error before anything is shipped or started, and
   nothing is written to the root;
2. ship one tar stream with the code tarball, ``spec.json`` and the bootstrap
   script (``theseus.dispatch.bootstrap.bootstrap_script``) into
   ``<work_dir>/launches/<nonce>-<token>/`` on the host;
3. start one process per entry of the placement (``bash bootstrap.sh`` with
   ``THESEUS_COORDINATOR``, ``THESEUS_NUM_PROCESSES``, ``THESEUS_PROCESS_ID`` and
   the host's, spec's and devices' environment), stream every line to ``stream``
   prefixed with ``[host/process]``, and wait with a deadline. Past the deadline,
   or when one process fails, the remote process groups are killed.

Every process writes into the spec's root, which both sides must see (a shared
folder or ``gs://``).

>>> from theseus.dispatch.inventory import Cluster, SshHost
>>> from theseus.dispatch.solver import Placement
>>> from theseus.dispatch.spec import LaunchSpec
>>> host = SshHost(name="box", cluster="lab", chip="h100", address="127.0.0.1", port=1, chips=8)
>>> placement = Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 2, 4)
>>> launch_ssh(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), placement, b"")
Traceback (most recent call last):
...
theseus.errors.BadInput: ssh host 'box': 2 processes of h100 chips on one host; ...
"""

from __future__ import annotations

import collections
import shlex
import subprocess
import sys
import threading
import time
from typing import IO, Any

from theseus.dispatch.remote import Launched, LaunchFailed, Ssh, absolute, require_host, ship
from theseus.dispatch.stage import device_env, exports, new_stage, stage_files
from theseus.errors import BadInput

__all__ = ["launch_ssh"]


class _Output:
    """Lines of several processes: written to a stream with a prefix, the last ``keep`` lines kept."""

    def __init__(self, stream: IO[str] | None, keep: int = 200):
        self.stream, self.lock = stream, threading.Lock()
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)

    def pump(self, pipe: IO[bytes], prefix: str) -> threading.Thread:
        def read() -> None:
            for raw in iter(pipe.readline, b""):
                line = f"[{prefix}] {raw.decode(errors='replace').rstrip()}"
                with self.lock:
                    self.lines.append(line)
                    if self.stream is not None:
                        print(line, file=self.stream, flush=True)
            pipe.close()

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def tail(self, n: int = 60) -> str:
        with self.lock:
            return "\n".join(list(self.lines)[-n:])


def launch_ssh(spec: Any, placement: Any, tarball: bytes, *, uv: str | None = None, timeout: float = 3600,
               stream: IO[str] | None = sys.stderr, known_hosts: str | None = None, grace: float = 15) -> Launched:
    """Run ``spec`` on the placement's SSH host: ``placement.processes`` processes of
    ``placement.chips_per_process`` chips each, under ``jax.distributed`` when more than one.

    ``tarball`` is ``package_code()``'s bytes; ``uv``, when a path, is the uv
    executable to use on the host (its folder goes first on PATH). Returns
    ``Launched``; raises ``HostUnreachable`` before anything starts, ``LaunchFailed``
    when a process fails or the ``timeout`` (seconds) passes.

    >>> from theseus.dispatch.inventory import Cluster, SshHost
    >>> from theseus.dispatch.solver import Placement
    >>> from theseus.dispatch.spec import LaunchSpec
    >>> host = SshHost(name="box", cluster="lab", chip="cpu", address="127.0.0.1", port=1, chips=4)
    >>> placement = Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 1, 4)
    >>> launch_ssh(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), placement, b"")
    Traceback (most recent call last):
    ...
    theseus.dispatch.remote.HostUnreachable: cannot reach ssh host 'box' (127.0.0.1:1): ssh: ...: Connection refused; ...
    """  # noqa: E501 - a doctest's expected output, printed on one line
    host, n = placement.host, placement.processes
    require_host(host, "ssh", "launch_ssh needs an ssh host")
    if n > 1 and host.chip != "cpu":
        raise BadInput(f"ssh host {host.name!r}: {n} processes of {host.chip} chips on one host; an ssh host runs "
                         "one process that sees all its chips (use chips_per_process = the host's chips)")
    ssh = Ssh.of(host, known_hosts)
    home, port = ssh.probe(host.python, host.name)
    work_dir = absolute(placement.cluster.work_dir, home)
    stage = new_stage(work_dir, spec.nonce)
    ship(ssh.run, ssh.target, stage, stage_files(spec, tarball, work_dir, stage, host.python))
    base = {**device_env(host.chip, placement.chips_per_process), **host.env, **spec.env}
    coordinator = f"127.0.0.1:{port}"  # every process runs on this one host
    output = _Output(stream)
    procs, pumps = [], []
    for i in range(n):
        env = {**base, "THESEUS_COORDINATOR": coordinator, "THESEUS_NUM_PROCESSES": str(n),
               "THESEUS_PROCESS_ID": str(i)}
        setup = "".join(f"{line}; " for line in exports(env, uv))
        command = f"cd {shlex.quote(stage)} && echo $$ > process-{i}.pid && {setup}exec bash bootstrap.sh"
        proc = subprocess.Popen(ssh.argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        procs.append(proc)
        pumps.append(output.pump(proc.stdout, f"{host.name}/{i}"))
    try:
        codes = _wait(procs, time.monotonic() + timeout, grace)
    finally:  # past the deadline, after a failure, or interrupted (Ctrl-C): stop what still runs, there and here
        if any(p.poll() is None for p in procs):
            _kill_remote(ssh, stage, n)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
    for pump in pumps:
        pump.join(timeout=5)
    if None in codes or any(codes):
        why = f"ran past its deadline of {timeout:.0f} s" if None in codes and not any(codes) else "failed"
        raise LaunchFailed(f"launch of {spec.job_key} {spec.run_name!r} on ssh host {host.name!r} {why} "
                           f"(exit status per process: {list(codes)}); output in {ssh.target}:{stage}; "
                           f"last lines:\n{output.tail()}", tuple(codes), output.tail(), stage)
    return Launched(host.name, stage, spec.first_node().id, tuple(codes), output.tail())


def _wait(procs: list[subprocess.Popen], deadline: float, grace: float) -> list[int | None]:
    """Exit codes of ``procs``, waiting until ``deadline``; once one fails the rest get ``grace``
    seconds. A process still running then is reported as None (the caller stops it)."""
    while True:
        codes = [p.poll() for p in procs]
        if None not in codes:
            return codes
        if any(codes):
            deadline = min(deadline, time.monotonic() + grace)
            grace = float("inf")  # set the failure deadline once
        if time.monotonic() > deadline:
            return codes
        time.sleep(0.1)


def _kill_remote(ssh: Ssh, stage: str, n: int, term_wait: float = 3, leaf_wait: float = 20) -> None:
    """Stop the process group of every remote process of a launch (their PIDs are in the stage).

    SIGTERM first. A worker under ``jax.distributed`` ignores it (JAX's preemption
    notifier catches it), so after ``term_wait`` s the bootstrap's workers
    (``python -m theseus.dispatch.bootstrap --worker ...``) get SIGKILL: their
    supervisors then publish the output, record the failure and exit. Whatever is
    left after ``leaf_wait`` s gets SIGKILL."""
    script = f"""cd {shlex.quote(stage)} || exit 0
groups=""
for i in $(seq 0 {n - 1}); do p=$(cat process-$i.pid 2>/dev/null) && groups="$groups $p"; done
alive() {{ for g in $groups; do kill -0 -- -$g 2>/dev/null && return 0; done; return 1; }}
wait_gone() {{ for t in $(seq $1); do alive || exit 0; sleep 0.1; done; }}
for g in $groups; do kill -TERM -- -$g 2>/dev/null; done
wait_gone {int(term_wait * 10)}
for g in $groups; do pkill -KILL -g $g -f 'theseus[.]dispatch[.]bootstrap --worker' 2>/dev/null; done
wait_gone {int(leaf_wait * 10)}
for g in $groups; do kill -KILL -- -$g 2>/dev/null; done
true
"""
    ssh.run("bash -s", input=script.encode(), timeout=term_wait + leaf_wait + 30)
