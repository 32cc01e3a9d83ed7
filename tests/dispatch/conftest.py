"""Fixtures of the dispatch tests: a real sshd and a real single-node SLURM on 127.0.0.1.

Both come from the distribution's packages (``openssh-server``; ``slurmctld slurmd
slurm-client munge``) and live in a temporary folder: their configs, keys, PID and
log files. They start in about a second, every wait has a deadline, every
daemon writes its output to a file, and they are stopped by their PIDs. The test
command installs the packages where it may; a binary still missing skips the test
with the command that installs it, and fails it under CI.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import system_packages
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def binary(name: str, package: str) -> str:
    """The absolute path of ``name``; a missing one skips the test with the command that installs it
    (the test command installs them where it may: ``tests/system_packages.py``), and fails it under CI."""
    found = system_packages.which(name)
    if found is None:
        why = (f"{name} not found: install the distribution package {package!r} "
               f"({' '.join(system_packages.install_command(sorted(set(system_packages.BINARIES.values()))))})")
        system_packages.skip_or_fail(why)
    return found


def wait_until(what: str, ready, deadline_s: float, procs=(), logs=()) -> None:
    """Poll ``ready()`` every 50 ms until it is true; fail with the daemons' logs past the deadline
    or as soon as one of ``procs`` exits."""
    deadline = time.monotonic() + deadline_s
    while True:
        if ready():
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"exited with {dead[0].returncode}" if dead else f"not ready after {deadline_s:.0f} s"
            tails = "\n".join(f"--- {log}:\n{Path(log).read_text(errors='replace')[-2000:]}"
                              for log in logs if Path(log).exists())
            raise RuntimeError(f"{what} {why}\n{tails}")
        time.sleep(0.05)


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a daemon in the foreground with stdout and stderr into ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM ``proc`` by its PID, wait, SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


# -- sshd -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SshServer:
    """A running sshd: where it listens, who may log in with which key, and its files.

    ``known_hosts`` lists its host key: pass it to the launchers (``known_hosts=``) so
    nothing is added to the user's ``~/.ssh/known_hosts``.
    """

    address: str
    port: int
    user: str
    identity_file: str
    folder: Path
    pid: int

    @property
    def log(self) -> Path:
        return self.folder / "sshd.log"

    @property
    def known_hosts(self) -> str:
        return str(self.folder / "known_hosts")


def keygen(path: Path) -> None:
    subprocess.run([binary("ssh-keygen", "openssh-client"), "-q", "-t", "ed25519", "-N", "", "-C", "theseus-test",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


@pytest.fixture
def sshd_server(tmp_path_factory):
    """sshd on 127.0.0.1 on a free port, accepting a key generated for this test (for the current user)."""
    sshd = binary("sshd", "openssh-server")
    folder = tmp_path_factory.mktemp("sshd")
    keygen(folder / "host_key")
    keygen(folder / "user_key")
    (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
    port = free_port()
    host_key = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (folder / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
AuthorizedKeysFile {folder}/authorized_keys
PidFile {folder}/sshd.pid
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
""")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation folder
    proc = start([sshd, "-D", "-e", "-f", str(folder / "sshd_config")], folder / "sshd.log")
    try:
        wait_until("sshd", lambda: "Server listening" in (folder / "sshd.log").read_text(), 15,
                   procs=[proc], logs=[folder / "sshd.log"])
        yield SshServer("127.0.0.1", port, getpass.getuser(), str(folder / "user_key"), folder, proc.pid)
    finally:
        stop(proc)


# -- SLURM ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    """A running single-node SLURM: its config file, node name, CPU count and folder."""

    conf: str
    node: str
    cpus: int
    folder: Path
    pids: tuple[int, ...]


def slurm_conf(folder: Path, node: str, cpus: int, socket_path: Path) -> str:
    ctld_port, slurmd_port = free_port(), free_port()
    return f"""\
ClusterName=theseus-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={getpass.getuser()}
SlurmdUser={getpass.getuser()}
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
KillWait=10
MinJobAge=300
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _munge_ok(munge: str, unmunge: str, socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    cred = subprocess.run([munge, "-n", "-S", str(socket_path)], capture_output=True, timeout=5)
    if cred.returncode != 0:
        return False
    back = subprocess.run([unmunge, "-S", str(socket_path)], input=cred.stdout, capture_output=True, timeout=5)
    return back.returncode == 0


def _node_idle(sinfo: str, env: dict[str, str]) -> bool:
    out = subprocess.run([sinfo, "-h", "-o", "%T"], capture_output=True, text=True, env=env, timeout=5)
    return out.returncode == 0 and out.stdout.strip() == "idle"


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld + slurmd on 127.0.0.1 with 4 CPUs on one node named ``hostname -s``.

    ``SLURM_CONF`` points at its config for the module's tests (and the
    processes they start); restored afterwards.
    """
    munged = binary("munged", "munge")
    munge, unmunge = binary("munge", "munge"), binary("unmunge", "munge")
    slurmctld, slurmd = binary("slurmctld", "slurmctld"), binary("slurmd", "slurmd")
    sinfo = binary("sinfo", "slurm-client")
    binary("sbatch", "slurm-client")
    folder = tmp_path_factory.mktemp("slurm")
    folder.chmod(0o755)
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    keys = folder / "munge-key"  # private
    keys.mkdir(mode=0o700)
    (keys / "munge.key").write_bytes(os.urandom(1024))
    (keys / "munge.key").chmod(0o600)
    sockets = folder / "munge-socket"  # world-executable, or clients cannot reach the socket
    sockets.mkdir(mode=0o755)
    socket_path = sockets / "munge.socket"
    node, cpus = socket.gethostname().split(".")[0], 4
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node, cpus, socket_path))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: list[subprocess.Popen] = []
    saved = os.environ.get("SLURM_CONF")
    try:
        procs.append(start([munged, "-F", "-f", f"--key-file={keys}/munge.key", f"--socket={socket_path}",
                            f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
                            f"--seed-file={keys}/munged.seed"], folder / "munged.out"))
        wait_until("munged", lambda: _munge_ok(munge, unmunge, socket_path), 10, procs,
                   [folder / "munged.out", folder / "munged.log"])
        procs.append(start([slurmctld, "-D", "-f", str(conf)], folder / "slurmctld.out", env))
        procs.append(start([slurmd, "-D", "-f", str(conf)], folder / "slurmd.out", env))
        logs = [folder / f for f in ("slurmctld.out", "slurmctld.log", "slurmd.out", "slurmd.log")]
        wait_until("SLURM (sinfo: node idle)", lambda: _node_idle(sinfo, env), 20, procs, logs)
        os.environ["SLURM_CONF"] = str(conf)
        yield SlurmCluster(str(conf), node, cpus, folder, tuple(p.pid for p in procs))
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        for proc in reversed(procs):
            stop(proc)


# -- what a launch ships and how the "remote" side bootstraps ------------------------


@pytest.fixture(scope="session")
def code_tarball():
    """``(revision, tar.gz bytes)`` of this repository (``package_code``; the working tree when it is dirty)."""
    from theseus.dispatch.package import package_code

    return package_code(REPO, allow_dirty=True)


@pytest.fixture(scope="session")
def uv_binary() -> str:
    """The uv found on PATH: the "remote" side uses the same one."""
    found = shutil.which("uv")
    if found is None:
        pytest.fail("uv is not on PATH: the launches bootstrap their environment with `uv sync`")
    return found


@pytest.fixture(scope="session")
def uv_env(uv_binary) -> dict[str, str]:
    """Environment of the "remote" side: ``uv sync`` from this user's uv cache, offline, with this interpreter;
    Python caches bytecode there even when this process says not to (sbatch passes its environment on)."""
    cache = os.environ.get("UV_CACHE_DIR") or subprocess.run(
        [uv_binary, "cache", "dir"], capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    return {"UV_CACHE_DIR": cache, "UV_OFFLINE": "1", "UV_PYTHON": os.path.realpath(sys.executable),
            "PYTHONDONTWRITEBYTECODE": ""}


@pytest.fixture(scope="session")
def remote_work_dir(tmp_path_factory) -> str:
    """The hosts' ``work_dir``: shared by the session's launches, so the code is unpacked and synced once."""
    return str(tmp_path_factory.mktemp("remote-work"))


def leftover_processes(marker: str, wait: float = 10) -> list[str]:
    """Command lines of live processes that mention ``marker`` (a launch's stage folder), after
    waiting up to ``wait`` seconds for them to end (killed processes take a moment to go)."""
    deadline = time.monotonic() + wait
    while (found := _processes_mentioning(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def _processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie:
            found.append(f"{pid}: {cmd}")
    return found


def make_spec(job_key: str, run_name: str, root: str, revision: str, edit=None, **fields):
    """A launch spec of ``job_key`` with its default config edited in place by ``edit(config)``."""
    from theseus import config as configs
    from theseus.dispatch.spec import LaunchSpec
    from theseus.jobs import get_job

    config = get_job(job_key).defaults()
    if edit is not None:
        edit(config)
    return LaunchSpec(job_key, run_name, configs.to_yaml(config), root, revision=revision, groups=("cpu",), **fields)


def seed_peak_cache(root: str) -> None:
    """The root's cached CPU matmul peak (as a root that trained before has it): skips the measurement."""
    os.makedirs(f"{root}/meta/cpu_peak")
    with open(f"{root}/meta/cpu_peak/cpu-float32.json", "w") as f:
        json.dump({"cpu/float32": 5e10}, f)


def synthetic_root(folder: Path) -> str:
    """A root under ``folder`` with the trainer tests' synthetic ``fineweb`` dataset (vocabulary 256)
    and a cached CPU peak: ready for a tiny training run."""
    from tests.train._helpers import write_dataset

    root = str(folder / "root")
    write_dataset(root, tokens=12_000)
    seed_peak_cache(root)
    return root


class InterruptOn:
    """A text stream that keeps what it is given and interrupts the main thread (as Ctrl-C does)
    the first time a line contains ``needle``."""

    def __init__(self, needle: str):
        self.needle, self.text, self.fired = needle, "", False
        self.lock = threading.Lock()
        # interrupt_main() does nothing unless SIGINT raises KeyboardInterrupt, as in a fresh
        # process; a test that ran before in this worker may have left another handler
        handler = signal.getsignal(signal.SIGINT)
        if handler is not signal.default_int_handler:
            print(f"InterruptOn: SIGINT handler was {handler!r}; restoring Python's default", file=sys.stderr)
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def write(self, text: str) -> int:
        import _thread

        with self.lock:
            self.text += text
            fire = not self.fired and self.needle in text
            self.fired = self.fired or fire
        if fire:
            _thread.interrupt_main()
        return len(text)

    def flush(self) -> None:
        pass
