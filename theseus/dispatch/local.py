"""Launch a run as N local processes under ``jax.distributed``, without any scheduler.

``launch_local(spec, processes=N, devices_per_process=K)`` checks the spec
(before anything starts: unknown job key and invalid config are errors and
nothing is written), writes it to a temporary folder,
picks a free port on 127.0.0.1 for this launch's coordinator and starts N
``python -m theseus.dispatch.bootstrap`` processes, each in its own process group.
Their output is streamed with a ``[i]`` prefix. Every launch has a deadline: past
it each bootstrap stops its worker (SIGTERM: the job records the failure) and
publishes the output; bootstraps still running ``MARGIN`` seconds later, or
``grace`` seconds after another process failed, are stopped (SIGTERM, then
SIGKILL of their process group).

With ``devices_per_process=K`` each process runs on the CPU with K virtual devices
(``--xla_force_host_platform_device_count=K``), which is how multi-host behaviour
is tested on one machine (gloo CPU collectives). Without it, processes inherit
the environment (set ``CUDA_VISIBLE_DEVICES`` and friends through ``spec.env``).

This is ``theseus launch JOB_KEY RUN_NAME ROOT [key=value ...] --processes N``.

>>> free_port() > 0
True
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from theseus.dispatch.bootstrap import BadInput, check_spec
from theseus.dispatch.spec import LaunchSpec

__all__ = ["LaunchResult", "free_port", "launch_local"]

DEVICE_FLAG = "--xla_force_host_platform_device_count"
MARGIN = 30.0  # seconds a bootstrap gets past the deadline to stop its worker and publish its output


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """What a launch did: the spec, each process's exit code, its wall time; ``ok`` when all exited 0.

    >>> LaunchResult(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), (0, 0), 1.0).ok
    True
    """

    spec: LaunchSpec
    returncodes: tuple[int, ...]
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Every process exited with code 0."""
        return all(code == 0 for code in self.returncodes)

    @property
    def nonce(self) -> str:
        """The nonce of the run the launch wrote (``theseus logs ROOT NONCE``)."""
        return self.spec.nonce

    @property
    def returncode(self) -> int:
        """One code for the launch: 0, else 2 when the input was refused, else the first failure.

        >>> LaunchResult(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), (0, -9), 1.0).returncode
        1
        """
        if self.ok:
            return 0
        if all(code == 2 for code in self.returncodes):
            return 2
        return next(code for code in self.returncodes if code != 0 and code > 0) if any(
            code > 0 for code in self.returncodes) else 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (one per launch: jobs never share a coordinator port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _device_env(base: Mapping[str, str], devices: int | None) -> dict[str, str]:
    env = dict(base)
    if devices is not None:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
        env["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_FLAG}={devices}"])
        env["JAX_PLATFORMS"] = "cpu"
    return env


def _stream(proc: subprocess.Popen, prefix: bytes, out: IO[bytes] | None) -> None:
    for line in iter(proc.stdout.readline, b""):
        if out is not None:
            try:
                out.write(prefix + line)
                out.flush()
            except (OSError, ValueError):
                pass


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Signal the process group this launch started for ``proc`` (its bootstrap and worker)."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def launch_local(spec: LaunchSpec, processes: int = 1, devices_per_process: int | None = None, *,
                 timeout: float = 3600.0, grace: float = 60.0, env: Mapping[str, str] | None = None,
                 output: IO[bytes] | None | Any = ...) -> LaunchResult:
    """Run ``spec`` as ``processes`` local processes (see the module docstring); waits for them.

    ``output`` receives every process's lines prefixed ``[i] `` (default: this
    process's stdout; ``None`` drops them: they are in the root either way). Bad input
    raises ``BadInput`` before anything starts.

    >>> spec = LaunchSpec("data/tokenize/nope", "r", "", "/tmp/nowhere", nonce="abcdef")
    >>> try:
    ...     launch_local(spec)
    ... except BadInput as e:
    ...     print(e)
    unknown job 'data/tokenize/nope' (`theseus jobs` lists them all)
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise BadInput(f"processes must be a positive integer, got {processes!r}")
    if devices_per_process is not None and (isinstance(devices_per_process, bool) or
                                            not isinstance(devices_per_process, int) or devices_per_process < 1):
        raise BadInput(f"devices_per_process must be a positive integer, got {devices_per_process!r}")
    if not timeout or timeout <= 0:
        raise BadInput(f"timeout must be a positive number of seconds, got {timeout!r}")
    check_spec(spec, processes)
    out = getattr(sys.stdout, "buffer", sys.stdout) if output is ... else output
    started = time.monotonic()
    deadline = started + timeout + MARGIN  # each bootstrap stops its worker at `timeout` and publishes first
    with tempfile.TemporaryDirectory(prefix="theseus-launch-") as folder:
        spec_path = os.path.join(folder, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            f.write(spec.to_json())
        coordinator = f"127.0.0.1:{free_port()}"
        child_env = _device_env({**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, devices_per_process)
        procs: list[subprocess.Popen] = []
        pumps: list[threading.Thread] = []
        try:
            for i in range(processes):
                command = [sys.executable, "-m", "theseus.dispatch.bootstrap", spec_path,
                           "--num-processes", str(processes), "--process-id", str(i),
                           "--timeout", str(timeout)]
                if processes > 1:
                    command += ["--coordinator", coordinator]
                proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env,
                                        start_new_session=True)
                procs.append(proc)
                pump = threading.Thread(target=_stream, args=(proc, f"[{i}] ".encode(), out), daemon=True)
                pump.start()
                pumps.append(pump)
            timed_out = _wait(procs, deadline, grace)
        finally:
            _stop(procs)
            for pump in pumps:
                pump.join(timeout=10)
    codes = tuple(p.returncode if p.returncode is not None else -signal.SIGKILL for p in procs)
    seconds = time.monotonic() - started
    late = timed_out or (any(codes) and seconds >= timeout)  # the bootstraps stopped their workers at `timeout`
    return LaunchResult(spec, codes, seconds, late)


def _wait(procs: list[subprocess.Popen], deadline: float, grace: float) -> bool:
    """Wait for every process; stop the rest ``grace`` s after a failure, or at the deadline. True on timeout."""
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(code is not None for code in codes):
            return False
        now = time.monotonic()
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = now
        if now >= deadline:
            return True
        if failed_at is not None and now - failed_at >= grace:
            return False
        time.sleep(0.1)


def _stop(procs: list[subprocess.Popen], patience: float = 20.0) -> None:
    """SIGTERM the bootstraps still running (they publish their output), then SIGKILL their groups."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        try:
            p.terminate()  # the supervisor only: it forwards to its worker and publishes the output
        except ProcessLookupError:
            pass
    end = time.monotonic() + patience
    for p in running:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        _signal_group(p, signal.SIGKILL)
        if p.poll() is None:
            p.wait()
