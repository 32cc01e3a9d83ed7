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

>>> ssh = Ssh("10.0.0.2", port=2222, user="me", identity_file="/keys/id")
>>> ssh.argv("true")[-2:], ssh.target
(['me@10.0.0.2', 'true'], 'me@10.0.0.2')
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import secrets
import shlex
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["FREE_PORT", "HostUnreachable", "LaunchFailed", "Launched", "Ssh", "device_env", "exports", "launch_ssh",
           "new_stage", "require_host", "ship", "ship_files"]

FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


class HostUnreachable(ConnectionError):
    """The host did not answer ``ssh HOST true``: nothing was shipped or started."""


class LaunchFailed(RuntimeError):
    """A launched process exited with an error, or the launch ran past its deadline.

    ``returncodes`` lists each process's exit status (None: stopped at the deadline),
    ``tail`` the last lines of output and ``stage`` the launch's folder on the host.

    >>> LaunchFailed("boom", (1,), "last line", "/w/launches/x").returncodes
    (1,)
    """

    def __init__(self, message: str, returncodes: tuple[int | None, ...] = (), tail: str = "", stage: str = ""):
        super().__init__(message)
        self.returncodes, self.tail, self.stage = returncodes, tail, stage


@dataclasses.dataclass(frozen=True)
class Launched:
    """A finished launch: where it ran, the first node it wrote, each process's exit status and output tail.

    >>> Launched("box", "/w/launches/abc", "Z2E6YWJjZGVmOjA", (0,), "done").ok
    True
    """

    host: str
    stage: str
    node_id: str
    returncodes: tuple[int, ...]
    tail: str
    job_id: str | None = None  # the scheduler's id (SLURM)

    @property
    def ok(self) -> bool:
        """Every process exited with status 0."""
        return all(rc == 0 for rc in self.returncodes)


@dataclasses.dataclass(frozen=True)
class Ssh:
    """How the ``ssh`` client reaches one host (``known_hosts``: a file to use instead of the user's).

    >>> "-i" in Ssh("h", identity_file="/k").argv("true")
    True
    """

    address: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    connect_timeout: int = 10

    @classmethod
    def of(cls, host: Any, known_hosts: str | None = None) -> Ssh:
        """The ``Ssh`` of an inventory host (``SshHost``, or a ``SlurmHost``'s login host).

        >>> from theseus.dispatch.inventory import SshHost
        >>> Ssh.of(SshHost(name="b", cluster="c", chip="cpu", address="10.1.1.1", port=2200, chips=1)).port
        2200
        """
        address = getattr(host, "address", None) or host.login
        identity = os.path.expanduser(host.identity_file) if host.identity_file else None
        return cls(address, host.port, host.user, identity, known_hosts)

    @property
    def target(self) -> str:
        """``user@address`` (or the address alone)."""
        return f"{self.user}@{self.address}" if self.user else self.address

    def argv(self, command: str) -> list[str]:
        """The ``ssh`` command line that runs the shell ``command`` on the host (never prompts).

        >>> Ssh("h", known_hosts="/tmp/kh").argv("ls")[:3]
        ['ssh', '-p', '22']
        """
        options = {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "accept-new",
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": "15",
            "LogLevel": "ERROR",
        }
        if self.identity_file:
            options["IdentitiesOnly"] = "yes"
        if self.known_hosts:
            options["UserKnownHostsFile"] = self.known_hosts
        argv = ["ssh", "-p", str(self.port)]
        if self.identity_file:
            argv += ["-i", self.identity_file]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        return [*argv, self.target, command]

    def run(self, command: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``command`` on the host; returns the completed process (bytes out/err), never raises on status.

        >>> Ssh("127.0.0.1", port=1, connect_timeout=2).run("true").returncode
        255
        """
        return subprocess.run(self.argv(command), input=input, capture_output=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def probe(self, python: str = "python3", name: str | None = None) -> tuple[str, int]:
        """Check the host answers; return its home folder and a free TCP port there.

        Raises ``HostUnreachable`` naming the host and ssh's own message.

        >>> Ssh("127.0.0.1", port=1, connect_timeout=2).probe(name="box")
        Traceback (most recent call last):
        ...
        theseus.dispatch.ssh.HostUnreachable: cannot reach ssh host 'box' (127.0.0.1:1): ssh: ...Connection refused; ...
        """
        label = f"ssh host {name!r} ({self.target}:{self.port})" if name else f"ssh host {self.target}:{self.port}"
        command = f'true && printf "%s\\n" "$HOME" && {shlex.quote(python)} -c {shlex.quote(FREE_PORT)}'
        try:
            out = self.run(command, timeout=self.connect_timeout + 20)
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"cannot reach {label}: no answer in {self.connect_timeout + 20} s; "
                                  "nothing was shipped or started") from None
        err = out.stderr.decode(errors="replace").strip()
        if out.returncode == 255:
            raise HostUnreachable(f"cannot reach {label}: {err or 'ssh failed'}; nothing was shipped or started")
        lines = out.stdout.decode(errors="replace").split()
        if out.returncode != 0 or len(lines) != 2 or not lines[1].isdigit():
            raise HostUnreachable(f"{label} answers, but `{python}` could not run there ({err or lines}); "
                                  "set the host's `python` in the inventory; nothing was shipped or started")
        return lines[0], int(lines[1])


def ship_files(files: Mapping[str, bytes]) -> bytes:
    """An uncompressed tar stream of ``{name: content}`` (mode 0644, no owners), to unpack with ``tar -x``.

    >>> names = tarfile.open(fileobj=io.BytesIO(ship_files({"a.txt": b"hi"}))).getnames(); names
    ['a.txt']
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def device_env(chip: str, chips_per_process: int) -> dict[str, str]:
    """Environment that gives each process its devices: ``chips_per_process`` CPU devices for chip ``cpu``.

    >>> device_env("cpu", 2)
    {'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'}
    >>> device_env("h100", 8)
    {}
    """
    if chip == "cpu":
        return {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={chips_per_process}"}
    return {}


def absolute(path: str, home: str) -> str:
    """``path`` with a leading ``~`` replaced by ``home`` (remote paths are quoted, so the shell won't).

    >>> absolute("~/theseus", "/home/me"), absolute("/w", "/home/me")
    ('/home/me/theseus', '/w')
    """
    if path == "~" or path.startswith("~/"):
        return home + path[1:]
    return path


def exports(env: Mapping[str, str], uv: str | None = None) -> list[str]:
    """Shell ``export`` lines for ``env`` (values quoted), and ``uv``'s folder first on PATH when it is a path.

    >>> for line in exports({"A": "x y"}, "/opt/uv/bin/uv"): print(line)
    export A='x y'
    export PATH=/opt/uv/bin:"$PATH"
    """
    out = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    if uv and os.sep in uv:
        out.append(f'export PATH={shlex.quote(os.path.dirname(uv))}:"$PATH"')
    return out


def stage_files(spec: Any, tarball: bytes, work_dir: str, stage: str, python: str = "python3") -> dict[str, bytes]:
    """The files a launch ships into ``stage``: ``code.tar.gz``, ``spec.json`` and ``bootstrap.sh``.

    The bootstrap script (``theseus.dispatch.bootstrap.bootstrap_script``) unpacks the
    code into ``<work_dir>/<revision>``, syncs the spec's uv groups and runs the
    bootstrap, which reads its process id, count and coordinator from the environment.

    >>> from theseus.dispatch.spec import LaunchSpec
    >>> spec = LaunchSpec("k/x", "r", "", "/root", nonce="abcdef", revision="abc")
    >>> files = stage_files(spec, b"tgz", "/w", "/w/s")
    >>> sorted(files), "tar -xzf /w/s/code.tar.gz" in files["bootstrap.sh"].decode()
    (['bootstrap.sh', 'code.tar.gz', 'spec.json'], True)
    """
    from theseus.dispatch.bootstrap import bootstrap_script

    script = bootstrap_script(spec, work_dir, f"{stage}/code.tar.gz", f"{stage}/spec.json", python=python)
    return {"code.tar.gz": tarball, "spec.json": spec.to_json().encode(), "bootstrap.sh": script.encode()}


def require_host(host: Any, kind: str, needs: str) -> None:
    """Raise ``ValueError`` (``needs``, then what ``host`` is) unless ``host`` is an inventory host of type ``kind``.

    >>> from theseus.dispatch.inventory import SshHost
    >>> box = SshHost(name="box", cluster="c", chip="cpu", address="a", chips=1)
    >>> require_host(box, "slurm", "f needs a slurm host")
    Traceback (most recent call last):
    ...
    ValueError: f needs a slurm host, got 'ssh' host 'box'
    """
    if getattr(host, "type", None) != kind:
        kind_of = getattr(host, "type", type(host).__name__)
        raise ValueError(f"{needs}, got {kind_of!r} host {getattr(host, 'name', host)!r}")


def new_stage(work_dir: str, nonce: str) -> str:
    """A fresh launch folder on the host: ``<work_dir>/launches/<nonce>-<token>`` (a relaunch never reuses one).

    >>> new_stage("/w", "abcdef").startswith("/w/launches/abcdef-")
    True
    """
    return f"{work_dir}/launches/{nonce}-{secrets.token_hex(3)}"


def ship(run: Any, where: str, stage: str, files: Mapping[str, bytes]) -> None:
    """Unpack ``files`` into ``stage`` with ``run`` (``Ssh.run`` or ``Login.run``); ``LaunchFailed`` names ``where``.

    >>> import tempfile
    >>> stage = tempfile.mkdtemp() + "/s"
    >>> run = lambda command, input, timeout: subprocess.run(["bash", "-c", command], input=input, capture_output=True)
    >>> ship(run, "localhost", stage, {"a.txt": b"hi"}); open(stage + "/a.txt").read()
    'hi'
    """
    q = shlex.quote
    shipped = run(f"mkdir -p {q(stage)} && tar -x -C {q(stage)}", input=ship_files(files), timeout=600)
    if shipped.returncode != 0:
        raise LaunchFailed(f"could not ship the code to {where}:{stage}: "
                           f"{shipped.stderr.decode(errors='replace').strip()}")


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
    theseus.dispatch.ssh.HostUnreachable: cannot reach ssh host 'box' (127.0.0.1:1): ssh: ...: Connection refused; ...
    """
    host, n = placement.host, placement.processes
    require_host(host, "ssh", "launch_ssh needs an ssh host")
    if n > 1 and host.chip != "cpu":
        raise ValueError(f"ssh host {host.name!r}: {n} processes of {host.chip} chips on one host; an ssh host runs "
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
