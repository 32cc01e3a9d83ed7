"""The Cloud TPU commands: generated in order, and each worker's command run under bash with a stand-in metadata server.

No TPU here: ``curl`` answers as the TPU VM metadata server would, and ``uv``
reports what it would have been asked to run.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile

import pytest

from theseus.dispatch.inventory import Cluster, SshHost, TpuHost
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.tpu import format_commands, tpu_commands

SPEC = LaunchSpec("gpt/train/pretrain", "train-gpt", "training:\n  steps: 10\n", "gs://bucket/runs", nonce="949e88",
                  revision="abc123", groups=("tpu",))
NAME = "theseus-train-gpt-949e88-0"


def tpu(accelerator_type="v5p-16", **changes):
    fields = dict(name="pod", cluster="gcp", chip="v5p", zone="us-east5-a", project="my-proj",
                  accelerator_type=accelerator_type, version="v2-alpha-tpuv5", env={"LIBTPU_INIT_ARGS": "--xla_x"})
    return TpuHost(**{**fields, **changes})


def placement(host, work_dir="/home/me/theseus"):
    return Placement(host, Cluster(name="gcp", root="gs://bucket/runs", work_dir=work_dir), host.workers,
                     host.workers, host.chips // host.workers)


def test_create_prepare_copy_run_delete_in_that_order():
    commands = tpu_commands(SPEC, placement(tpu(spot=True)), tarball="/tmp/code.tar.gz")
    where = ["--zone=us-east5-a", "--project=my-proj"]
    base = ["gcloud", "compute", "tpus", "tpu-vm"]
    assert commands[0] == [*base, "create", NAME, *where, "--accelerator-type=v5p-16", "--version=v2-alpha-tpuv5",
                           "--spot"]
    assert commands[1] == [*base, "ssh", NAME, *where, "--worker=all", "--command=mkdir -p /home/me/theseus"]
    assert commands[2] == [*base, "scp", "/tmp/code.tar.gz", f"{NAME}:/home/me/theseus/abc123.tar.gz", *where,
                           "--worker=all"]
    assert (commands[3][:9] == [*base, "ssh", NAME, *where, "--worker=all"]
            and commands[3][9].startswith("--command=bash -c "))
    assert commands[4] == [*base, "delete", NAME, *where, "--quiet"]


def test_on_demand_and_kept_slices():
    commands = tpu_commands(SPEC, placement(tpu()), tarball="t.tar.gz", keep=True)
    assert "--spot" not in commands[0] and [c[4] for c in commands] == ["create", "ssh", "scp", "ssh"]


def test_the_dry_run_text_is_a_shell_script_of_exactly_these_commands(tmp_path):
    commands = tpu_commands(SPEC, placement(tpu()), tarball="/tmp/my code.tar.gz")
    gcloud = tmp_path / "gcloud"
    gcloud.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    gcloud.chmod(0o755)
    out = subprocess.run(["bash", "-c", format_commands(commands)], capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    assert [["gcloud", *json.loads(line)] for line in out.stdout.splitlines()] == commands


def fake_bin(folder, endpoints: str | None):
    """``curl`` answering as the metadata server of worker $WORKER (or failing), and a reporting ``uv``."""
    folder.mkdir()
    curl = ("#!/usr/bin/env bash\n"
            'url="${@: -1}"\n'
            + ('exit 22\n' if endpoints is None else
               f'case "$url" in */agent-worker-number) echo -n "$WORKER";; '
               f'*/worker-network-endpoints) echo -n {shlex.quote(endpoints)};; *) exit 22;; esac\n'))
    uv = ("#!/usr/bin/env bash\n"
          'echo "uv $*"\n'
          "if [ \"$1\" = run ]; then env | grep -E '^(THESEUS|LIBTPU)_' | sort; fi\n")
    for name, text in (("curl", curl), ("uv", uv)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755 | stat.S_IEXEC)
    return folder


def run_worker(command: list[str], tmp_path, worker: int, endpoints: str | None):
    """Run the ``--command`` of a ``gcloud ... ssh --worker=all`` as worker ``worker`` would."""
    (flag,) = [a for a in command if a.startswith("--command=")]
    argv = shlex.split(flag.removeprefix("--command="))
    env = {"PATH": f"{fake_bin(tmp_path / f'bin{worker}', endpoints)}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "WORKER": str(worker)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def copy_tarball(work_dir):
    """What the scp step leaves on every worker."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(work_dir / "abc123.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("hello.py")
        tar.addfile(info, io.BytesIO(b""))


def test_each_worker_finds_its_index_and_worker_zero_from_the_metadata_server(tmp_path):
    work_dir = tmp_path / "work"
    copy_tarball(work_dir)
    run = tpu_commands(SPEC, placement(tpu(), str(work_dir)), tarball="t.tar.gz")[3]
    endpoints = "unknown:unknown:10.130.0.7,unknown:unknown:10.130.0.8"
    for worker in (0, 1):
        out = run_worker(run, tmp_path, worker, endpoints)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "uv sync --no-default-groups --group tpu"
        assert lines[1] == (f"uv run --no-sync python -m theseus.dispatch.bootstrap "
                            f"{work_dir}/specs/{SPEC.first_node().id}.json")
        assert f"THESEUS_PROCESS_ID={worker}" in lines and "THESEUS_NUM_PROCESSES=2" in lines
        assert "THESEUS_COORDINATOR=10.130.0.7:8476" in lines and "LIBTPU_INIT_ARGS=--xla_x" in lines
    assert LaunchSpec.from_json((work_dir / "specs" / f"{SPEC.first_node().id}.json").read_text()) == SPEC
    assert (work_dir / "abc123" / "hello.py").exists()


def test_a_silent_metadata_server_stops_the_worker_before_the_bootstrap(tmp_path):
    work_dir = tmp_path / "work"
    copy_tarball(work_dir)
    run = tpu_commands(SPEC, placement(tpu(), str(work_dir)), tarball="t.tar.gz")[3]
    out = run_worker(run, tmp_path, 1, None)
    assert out.returncode != 0 and "uv run" not in out.stdout


def test_a_one_worker_slice_needs_no_coordinator(tmp_path):
    work_dir = tmp_path / "work"
    copy_tarball(work_dir)
    host = tpu("v5p-8")
    run = tpu_commands(SPEC, placement(host, str(work_dir)), tarball="t.tar.gz")[3]
    out = run_worker(run, tmp_path, 0, None)  # the metadata server is never asked
    assert out.returncode == 0, out.stderr
    assert "THESEUS_NUM_PROCESSES=1" in out.stdout.splitlines() and "THESEUS_COORDINATOR" not in out.stdout


def test_only_a_matching_tpu_placement_makes_commands():
    ssh = SshHost(name="box", cluster="gcp", chip="cpu", address="a", chips=4)
    with pytest.raises(TypeError, match="TPU commands need a tpu host, got ssh host 'box'"):
        tpu_commands(SPEC, Placement(ssh, placement(tpu()).cluster, 1, 1, 4), tarball="t")
    with pytest.raises(ValueError, match="TPU workers need an absolute work_dir, got '~/theseus' in cluster 'gcp'"):
        tpu_commands(SPEC, placement(tpu(), "~/theseus"), tarball="t")
    wrong = Placement(tpu(), placement(tpu()).cluster, 1, 1, 8)
    with pytest.raises(ValueError, match="slice v5p-16 has 2 workers, the placement asks for 1 processes"):
        tpu_commands(SPEC, wrong, tarball="t")
