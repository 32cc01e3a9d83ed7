"""The distribution packages the dispatch and ui tests need, installed by the test command itself.

``uv run pytest`` on a fresh machine has Python and uv only; the SSH and SLURM tests
need sshd, munge and SLURM from the distribution, the ui's browser tests a headless
Chromium and its driver. Before any test runs, the pytest
controller installs the missing ones with ``apt-get`` when it may (root, or sudo
without a password). Where it may not, the tests that need them skip with the
command that installs them, except under CI (``CI=true``), where a missing server
fails: CI never goes green without running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

# binary -> the Debian package that ships it
BINARIES = {
    "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
    "ssh": "openssh-client",
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "sinfo": "slurm-client",
    "chromium": "chromium",  # the ui's browser tests (tests/ui), driven by Selenium
    "chromedriver": "chromium-driver",
}
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def which(name: str) -> str | None:
    """``name``'s absolute path on PATH or in the sbin folders (None when missing).

    >>> which("sh").endswith("/sh")
    True
    """
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))


def missing_packages() -> list[str]:
    """The packages whose binaries are missing, sorted, each once.

    >>> set(missing_packages()) <= set(BINARIES.values())
    True
    """
    return sorted({package for name, package in BINARIES.items() if which(name) is None})


def install_command(packages: list[str]) -> list[str]:
    """The apt-get command that installs ``packages`` (with sudo when not root).

    >>> install_command(["munge"])[-1]
    'munge'
    """
    return [*_sudo(), "apt-get", "install", "-y", "-qq", *packages]


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def install_missing() -> str | None:
    """Install the missing packages when this user may; returns why not, or None when all are there."""
    packages = missing_packages()
    if not packages:
        return None
    hint = f"install them with: {' '.join(install_command(packages))}"
    if shutil.which("apt-get") is None:
        return f"missing {', '.join(packages)} and no apt-get here; {hint}"
    if os.geteuid() != 0 and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        return f"missing {', '.join(packages)} and no root or password-less sudo; {hint}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    update = subprocess.run([*_sudo(), "apt-get", "update", "-qq"], capture_output=True, text=True, env=env)
    done = subprocess.run(install_command(packages), capture_output=True, text=True, env=env)
    if done.returncode != 0 or missing_packages():
        return f"installing {', '.join(packages)} failed ({(update.stderr + done.stderr).strip()[-500:]}); {hint}"
    return None


def on_ci() -> bool:
    """Whether this run is CI's (``CI`` set to a true value), where a missing server is a failure.

    >>> isinstance(on_ci(), bool)
    True
    """
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(why: str) -> None:
    """Skip the test saying ``why`` (a missing server or privilege); under CI, fail it instead."""
    (pytest.fail if on_ci() else pytest.skip)(why)
