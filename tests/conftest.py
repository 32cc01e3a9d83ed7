"""Shared fixtures: temporary roots on local disk and on a GCS emulator (127.0.0.1 only), the
distribution packages the dispatch tests need, installed before the run, and a compilation cache
of the session's own."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import settings

from tests import system_packages

# Property tests check answers, not speed: on a shared 2-core machine an example's first run
# (imports, a jit) can take longer than hypothesis's default 200 ms deadline.
settings.register_profile("theseus", deadline=None)
settings.load_profile("theseus")

REPO = Path(__file__).resolve().parents[1]


COMPILATION_CACHE = "THESEUS_COMPILATION_CACHE"
SESSION_CACHE = pytest.StashKey[str]()


def pytest_configure(config):
    """Point JAX's compilation cache at a folder of this session, and install the distribution packages
    the dispatch and ui tests need, before any test runs.

    Only the controller does either (xdist's workers start after it and inherit its environment,
    so they and the subprocesses of tests share the session's cache). A
    ``THESEUS_COMPILATION_CACHE`` set by the caller (``off``, or a folder) is kept.
    """
    if hasattr(config, "workerinput"):
        return
    if COMPILATION_CACHE not in os.environ:  # never the user's ~/.cache: the session's own, removed at its end
        os.environ[COMPILATION_CACHE] = config.stash[SESSION_CACHE] = tempfile.mkdtemp(prefix="theseus-jax-")
    if not _runs_system_tests(config):
        return
    why = system_packages.install_missing()
    if why is not None:
        print(f"theseus tests: {why}", file=sys.stderr)


def pytest_unconfigure(config):
    """Remove the session's compilation cache (the controller made it, the controller removes it)."""
    folder = config.stash.get(SESSION_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(COMPILATION_CACHE, None)


def _runs_system_tests(config) -> bool:
    """Whether this run includes the tests that need distribution packages (dispatch's servers, ui's browser)."""
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [REPO]
    folders = [REPO / "tests" / "dispatch", REPO / "tests" / "ui"]
    return any(p == f or f in p.parents or p in f.parents for p in paths for f in folders)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, seconds: float, what: str, log: str | Path) -> None:
    """Wait until ``proc`` accepts connections on 127.0.0.1:``port``; raise naming ``what`` with the end of its
    ``log`` if it exits first or ``seconds`` pass."""
    deadline = time.time() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{what} did not start: {Path(log).read_text()[-2000:]}") from None
            time.sleep(0.1)


@contextlib.contextmanager
def scratch_registry():
    """Inside it, experiment files may be imported (``theseus.experiments``) and register their jobs; on
    leaving, the job registry, the experiments imported and their modules are as before, so later tests'
    launches ship none of them."""
    from theseus import experiments, jobs

    jobs.registry()  # the built-in jobs are loaded before the snapshot
    registered, imported = dict(jobs._REGISTRY), dict(experiments._IMPORTED)
    try:
        yield
    finally:
        added = set(experiments._IMPORTED) - set(imported)
        for name in [n for n in sys.modules
                     if n in added or (n.startswith("theseus_experiment_") and n not in imported)]:
            del sys.modules[name]
        jobs._REGISTRY.clear()
        jobs._REGISTRY.update(registered)
        experiments._IMPORTED.clear()
        experiments._IMPORTED.update(imported)


@pytest.fixture
def scratch_experiments():
    """Lets a test import experiment files and register their jobs (`scratch_registry`) for its duration."""
    with scratch_registry():
        yield


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """A gcp-storage-emulator on a free loopback port for the whole session; yields its URL.

    The environment of this process (and of subprocesses it starts) is pointed
    at it, so gcsfs and TensorStore talk to it instead of Google.
    """
    port = free_port()
    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    log = tmp_path_factory.mktemp("gcs") / "emulator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, proc, 30, "gcp-storage-emulator", log)
    except RuntimeError:
        proc.kill()
        raise
    url = f"http://127.0.0.1:{port}"
    env = {
        "STORAGE_EMULATOR_HOST": url,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "TENSORSTORE_GCS_HTTP_URL": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "x",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def gcs_bucket_root(emulator_url: str) -> str:
    """A fresh bucket on the emulator; returns ``gs://bucket/root``."""
    import gcsfs

    bucket = f"theseus-{secrets.token_hex(4)}"
    gcsfs.GCSFileSystem(skip_instance_cache=True).mkdir(bucket)
    return f"gs://{bucket}/root"


@pytest.fixture(params=["local", pytest.param("gcs", marks=pytest.mark.gcs)])
def root(request, tmp_path):
    """A fresh, empty root: a local folder, or a bucket prefix on the GCS emulator."""
    if request.param == "local":
        return str(tmp_path / "root")
    return gcs_bucket_root(request.getfixturevalue("gcs_emulator"))
