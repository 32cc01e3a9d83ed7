"""SLURM launches against a real single-node SLURM on 127.0.0.1 (the ``slurm_cluster`` fixture).

One sbatch job of 2 tasks trains one run as 2 processes x 2 CPU devices under
``jax.distributed``, checkpointing; the checkpoint then resumes on 1 process x 4
devices with the batch the 2-process run consumed at that step and the same
losses after it.
"""

from __future__ import annotations

import glob
import io
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

from tests.conftest import free_port
from tests.dispatch.conftest import InterruptOn, leftover_processes, make_spec, synthetic_root
from tests.train._subproc import run_python
from theseus.dispatch.inventory import Cluster, SlurmHost, SshHost
from theseus.dispatch.remote import HostUnreachable, LaunchFailed
from theseus.dispatch.slurm import job_state, launch_slurm, sbatch_script
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.store import Store

REPO = str(pathlib.Path(__file__).resolve().parents[2])
STEPS, CHECKPOINT = 10, 5


def local_slurm(root: str, work_dir: str, env: dict[str, str], processes: int, chips: int) -> Placement:
    host = SlurmHost(name="local-slurm", cluster="lab", chip="cpu", login="localhost", chips=processes * chips,
                     partitions=("debug",), time="00:10:00", groups=("cpu",), env=env)
    return Placement(host, Cluster(name="lab", root=root, work_dir=work_dir), 1, processes, chips)


def train_tiny(config) -> None:
    """A one-layer GPT (vocabulary 256) on the trainer tests' synthetic dataset: 10 steps of 8 x 32 tokens."""
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head, arch.block_size, arch.vocab_size = 32, 1, 2, 32, 256
    arch.dtype.activation = "float32"
    config.training.batch_size, config.training.per_device_batch_size = 8, 2
    config.training.tokens = STEPS * 8 * 32
    config.training.validation = False
    config.logging.report_interval = 1
    config.logging.checkpoint_interval = CHECKPOINT
    config.logging.validation_interval = 100


RESUME = r"""
import sys
sys.path.insert(0, {repo!r})
import jax, numpy as np
from theseus.data.loader import Loader
from theseus.data.store import open_dataset
from theseus.quick import quick

with quick({root!r}) as q:
    q.find().nonce({nonce!r}).seq({seq}).resume()
    job = q.build().create()
    cfg = job.config
    batch = job.batch()
    ref = Loader(open_dataset({root!r}, cfg.data.dataset), "train", seed=cfg.data.seed,
                 batch_size=cfg.training.batch_size, block_size=cfg.architecture.block_size).batch({seq})
    out = dict(devices=jax.device_count(), processes=jax.process_count(), step=job.trainer.step,
               same_batch=all(bool(np.array_equal(np.asarray(batch[k]), ref[k])) for k in ("x", "y")),
               rows=int(np.asarray(batch["x"]).shape[0]), nonce=job.node.nonce)
    job()
    rows = q.find().nonce(out["nonce"]).has("train/loss").select(keys=["train/loss"])
    out["losses"] = [r["train/loss"] for r in rows]
emit(out)
"""


@pytest.mark.slow
def test_sbatch_two_tasks_train_one_run_and_resume_on_four_devices(slurm_cluster, code_tarball, remote_work_dir,
                                                                   uv_env, uv_binary, tmp_path):
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)
    spec = make_spec("gpt/train/pretrain", "train-slurm", root, revision, train_tiny)
    out = io.StringIO()
    done = launch_slurm(spec, local_slurm(root, remote_work_dir, uv_env, processes=2, chips=2), tarball,
                        uv=uv_binary, timeout=300, poll=0.2, stream=out)
    assert done.ok and done.job_id.isdigit() and done.host == "local-slurm"
    assert not leftover_processes(done.stage)

    store = Store(root)
    run = store.find().nonce(spec.nonce)
    assert run.finished().all() and store.run_record(spec.nonce)["_job"] == "gpt/train/pretrain"
    checkpoints = run.checkpoint().all()
    assert [n.seq for n in checkpoints] == [CHECKPOINT, STEPS]
    for node in checkpoints:  # both processes wrote their part of every checkpoint
        names = os.listdir(f"{root}/objects/{node.id}/checkpoint")
        assert {"process-00000.json", "process-00001.json"} <= set(names), names
    logs = f"{root}/objects/{spec.first_node().id}/logs"
    assert sorted(os.listdir(logs)) == ["process-0.log", "process-1.log"]
    assert '"process_count": 2' in open(f"{logs}/process-0.log").read()
    assert "BOOTSTRAP | process 1/2" in open(f"{logs}/process-1.log").read()
    streamed = out.getvalue()
    assert "[slurm] 0: " in streamed and "[slurm] 1: " in streamed and "coordinator 127.0.0.1:" in streamed
    two = [r["train/loss"] for r in run.has("train/loss").select(keys=["train/loss"])]
    assert len(two) == STEPS

    # the step-5 checkpoint on 1 process x 4 devices: the same batch at that step, the same losses after it
    resumed = run_python(RESUME.format(repo=REPO, root=root, nonce=spec.nonce, seq=CHECKPOINT), devices=4,
                         timeout=300)
    assert (resumed["devices"], resumed["processes"], resumed["step"]) == (4, 1, CHECKPOINT)
    assert resumed["same_batch"] and resumed["rows"] == 8
    assert resumed["nonce"] != spec.nonce  # not the tip: the resumed run branches
    np.testing.assert_allclose(resumed["losses"], two[CHECKPOINT:], rtol=2e-5)


@pytest.mark.slow
def test_failed_job_reports_state_exit_code_and_output(slurm_cluster, code_tarball, remote_work_dir, uv_env,
                                                       uv_binary, tmp_path):
    revision, tarball = code_tarball
    root = str(tmp_path / "root")
    spec = LaunchSpec("gpt/train/pretrian", "typo", "{}\n", root, revision=revision, groups=("cpu",))
    with pytest.raises(LaunchFailed, match=r"(?s)SLURM job \d+ \(gpt/train/pretrian 'typo'\) ended FAILED with "
                                           r"exit code 2:0.*gpt/train/pretrain") as failed:
        launch_slurm(spec, local_slurm(root, remote_work_dir, uv_env, processes=1, chips=1), tarball, uv=uv_binary,
                     timeout=300, poll=0.2, stream=None)
    assert failed.value.returncodes == (2,)
    assert not os.path.exists(root)  # refused before anything was written


def endless(config) -> None:
    train_tiny(config)
    config.training.tokens = 8 * 32 * 1_000_000


def scontrol_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    return job_state(out.stdout)[0]


@pytest.mark.slow
def test_deadline_cancels_the_job(slurm_cluster, code_tarball, remote_work_dir, uv_env, uv_binary, tmp_path):
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)
    spec = make_spec("gpt/train/pretrain", "endless", root, revision, endless)
    with pytest.raises(LaunchFailed, match=r"SLURM job (\d+) \(gpt/train/pretrain 'endless'\) ran past its deadline "
                                           "of 4 s and was cancelled") as failed:
        launch_slurm(spec, local_slurm(root, remote_work_dir, uv_env, processes=1, chips=1), tarball, uv=uv_binary,
                     timeout=4, poll=0.2, stream=None)
    job_id = re.search(r"SLURM job (\d+)", str(failed.value)).group(1)
    assert scontrol_state(job_id) == "CANCELLED" and failed.value.returncodes == (None,)
    assert not leftover_processes(failed.value.stage)


@pytest.mark.slow
def test_interrupt_cancels_the_job(slurm_cluster, code_tarball, remote_work_dir, uv_env, uv_binary, tmp_path):
    """Ctrl-C while following the job: scancel, then the KeyboardInterrupt goes on."""
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)
    spec = make_spec("gpt/train/pretrain", "interrupted", root, revision, endless)
    stream = InterruptOn("[theseus] job ")
    with pytest.raises(KeyboardInterrupt):
        launch_slurm(spec, local_slurm(root, remote_work_dir, uv_env, processes=1, chips=1), tarball, uv=uv_binary,
                     timeout=300, poll=0.2, stream=stream)
    job_id = re.search(r"\[theseus\] job (\d+):", stream.text).group(1)
    assert scontrol_state(job_id) == "CANCELLED"
    [stage] = glob.glob(f"{remote_work_dir}/launches/{spec.nonce}-*")
    assert not leftover_processes(stage)


def test_unanswering_controller_is_a_clear_error_before_anything_is_shipped(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=gone\nSlurmctldHost=gone(127.0.0.1)\nSlurmctldPort={free_port()}\n"
                    "AuthType=auth/none\nNodeName=gone CPUs=1\nPartitionName=p Nodes=gone\nMessageTimeout=2\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    root, work_dir = str(tmp_path / "root"), str(tmp_path / "work")
    spec = LaunchSpec("data/tokenize/pydoc", "tok", "{}\n", root, revision="abc")
    with pytest.raises(HostUnreachable, match="the SLURM controller of host 'local-slurm' does not answer "
                                              r"`scontrol ping` on localhost: Slurmctld\(primary\) at gone is DOWN; "
                                              "nothing was shipped or submitted"):
        launch_slurm(spec, local_slurm(root, work_dir, {}, 1, 1), b"", timeout=30)
    assert not os.path.exists(root) and not os.path.exists(work_dir)


def test_sbatch_script_carries_the_hosts_settings(tmp_path):
    host = SlurmHost(name="hpc", cluster="lab", chip="h100", login="login.hpc", chips=8, nodes=4,
                     partitions=("gpu", "gpu-long"), account="ml", qos="high", time="02:30:00", cpus_per_task=12,
                     memory_gb=64, env={"NCCL_DEBUG": "WARN"})
    spec = LaunchSpec("gpt/train/pretrain", "big", "{}\n", "gs://b/r", nonce="abcdef", env={"A": "x y"})
    placement = Placement(host, Cluster(name="lab", root="gs://b/r", work_dir="/scratch/theseus"), 2, 2, 8)
    script = sbatch_script(spec, placement, stage="/scratch/theseus/launches/abcdef-0")
    options = [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert options == ["--job-name=theseus-big-abcdef", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                       "--cpus-per-task=12", "--partition=gpu,gpu-long", "--account=ml", "--qos=high",
                       "--time=02:30:00", "--mem=65536M", "--gres=gpu:8",
                       "--output=/scratch/theseus/launches/abcdef-0/slurm-%j.out",
                       "--chdir=/scratch/theseus/launches/abcdef-0", "--no-requeue"]
    assert "export NCCL_DEBUG=WARN\nexport A='x y'\n" in script
    assert 'export THESEUS_COORDINATOR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1):$port"' in script
    assert "srun --kill-on-bad-exit=1 --label bash /scratch/theseus/launches/abcdef-0/bootstrap.sh" in script
    # a spec that resumes itself: SLURM requeues the job (preemption, `scontrol requeue`) instead of ending it
    requeued = sbatch_script(spec.replace(auto_resume=True), placement, stage="/scratch/theseus/launches/abcdef-0")
    assert "#SBATCH --requeue\n" in requeued and "--no-requeue" not in requeued
    one_node = Placement(host, placement.cluster, 1, 1, 8)
    assert 'THESEUS_COORDINATOR="127.0.0.1:$port"' in sbatch_script(spec, one_node)


def test_sbatch_script_refuses_bad_placements(tmp_path):
    cluster = Cluster(name="lab", root="/r", work_dir="/w")
    spec = LaunchSpec("gpt/train/pretrain", "big", "{}\n", "/r", nonce="abcdef")
    host = SlurmHost(name="hpc", cluster="lab", chip="cpu", chips=4, nodes=4)
    with pytest.raises(ValueError, match="slurm host 'hpc': 3 processes do not split evenly over 2 nodes"):
        sbatch_script(spec, Placement(host, cluster, 2, 3, 1))
    box = SshHost(name="box", cluster="lab", chip="cpu", address="10.0.0.1", chips=4)
    with pytest.raises(ValueError, match="sbatch_script needs a slurm host, got 'ssh' host 'box'"):
        sbatch_script(spec, Placement(box, cluster, 1, 1, 4))

