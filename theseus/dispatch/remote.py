"""Reaching a host over ssh: the client, shipping files into a folder there, and what a launch returns or raises.

The SSH and SLURM launchers share these: both probe a host, ship one tar stream
of files into a launch folder and report a ``Launched`` or raise
``HostUnreachable`` / ``LaunchFailed``.

>>> ssh = Ssh("10.0.0.2", port=2222, user="me", identity_file="/keys/id")
>>> ssh.argv("true")[-2:], ssh.target
(['me@10.0.0.2', 'true'], 'me@10.0.0.2')
"""

from __future__ import annotations

import dataclasses
import io
import os
import shlex
import subprocess
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from theseus.errors import BadInput, TheseusError

__all__ = ["FREE_PORT", "HostUnreachable", "LaunchFailed", "Launched", "Ssh", "absolute", "require_host", "ship",
           "ship_files"]

FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


class HostUnreachable(TheseusError, ConnectionError):
    """The host did not answer ``ssh HOST true``: nothing was shipped or started."""


class LaunchFailed(TheseusError, RuntimeError):
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
        theseus.dispatch.remote.HostUnreachable: cannot reach ssh host 'box' (127.0.0.1:1): ssh: ...Connection refused; ...
        """  # noqa: E501 - a doctest's expected output, printed on one line
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


def absolute(path: str, home: str) -> str:
    """``path`` with a leading ``~`` replaced by ``home`` (remote paths are quoted, so the shell won't).

    >>> absolute("~/theseus", "/home/me"), absolute("/w", "/home/me")
    ('/home/me/theseus', '/w')
    """
    if path == "~" or path.startswith("~/"):
        return home + path[1:]
    return path


def require_host(host: Any, kind: str, needs: str) -> None:
    """Raise ``ValueError`` (``needs``, then what ``host`` is) unless ``host`` is an inventory host of type ``kind``.

    >>> from theseus.dispatch.inventory import SshHost
    >>> box = SshHost(name="box", cluster="c", chip="cpu", address="a", chips=1)
    >>> require_host(box, "slurm", "f needs a slurm host")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: f needs a slurm host, got 'ssh' host 'box'
    """
    if getattr(host, "type", None) != kind:
        kind_of = getattr(host, "type", type(host).__name__)
        raise BadInput(f"{needs}, got {kind_of!r} host {getattr(host, 'name', host)!r}")
