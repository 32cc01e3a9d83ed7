"""Issue 27, section 3: a preempted launch resumes (`--auto-resume`), locally and on the test SLURM.

SIGTERM makes a training worker commit a checkpoint at the end of its step and exit 75;
`theseus launch --auto-resume` starts the run again, and a requeued SLURM job
(`#SBATCH --requeue`, `scontrol requeue`) starts the same spec again: either way the
start resumes the lineage, which ends finished with every step written exactly once.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import polars as pl
import pytest

from tests.dispatch.conftest import make_spec, synthetic_root
from tests.dispatch.test_dispatch_local import TINY, make_root, records
from tests.dispatch.test_dispatch_slurm import local_slurm, train_tiny
from theseus.dispatch.bootstrap import EXIT_FAILED, ProcessInfo, run_worker
from theseus.dispatch.slurm import launch_slurm
from theseus.jobs import EXIT_PREEMPTED
from theseus.store import Node, Store

LONG = 1500  # steps: long enough that the signal finds the run mid-way on a loaded machine


def _steps_written(root: str, nonce: str) -> list[int]:
    """The seq of every train/loss record of the lineage ``nonce``, as the log holds them (repeats included)."""
    frame = records(root).filter((pl.col("nonce") == nonce) & (pl.col("key") == "train/loss"))
    return sorted(frame["seq"].to_list())


def _wait_for_nodes(store: Store, name: str, count: int, alive, deadline_s: float = 300) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and alive():
        try:
            if len(store.find().spec(run=name).all()) >= count:
                return
        except FileNotFoundError:  # nothing written yet
            pass
        time.sleep(0.1)
    raise AssertionError(f"run {name} did not write {count} nodes")


def _workers_of(pid: int) -> list[int]:
    """The bootstrap workers (``--worker``) among the descendants of process ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"--worker" in f.read():
                        found.append(child)
            except OSError:
                pass
    return found


def _one_finished_lineage(root: str, name: str, steps: int) -> str:
    store = Store(root)
    nonces = {n.nonce for n in store.find().spec(run=name).all()}
    assert len(nonces) == 1, nonces
    [nonce] = nonces
    assert store.find().nonce(nonce).finished().last().seq == steps
    assert _steps_written(root, nonce) == list(range(1, steps + 1))  # no step missing, none written twice
    return nonce


@pytest.mark.slow
def test_launch_auto_resume_starts_a_preempted_run_again_and_it_resumes(tmp_path):
    root = make_root(tmp_path)
    args = [sys.executable, "-m", "theseus.cli", "launch", "gpt/train/pretrain", "pre", root, *TINY,
            "training.tokens=null", f"training.steps={LONG}", "logging.checkpoint_interval=100000",
            "logging.validation_interval=100000", "--auto-resume", "--timeout", "600"]
    launch = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_nodes(Store(root), "pre", 4, lambda: launch.poll() is None)
    [worker] = _workers_of(launch.pid)
    os.kill(worker, signal.SIGTERM)  # what a preemption sends
    out, err = launch.communicate(timeout=600)
    assert launch.returncode == 0, out[-4000:] + err[-3000:]
    assert "was preempted; starting it again to resume it (1 of 3)" in err
    nonce = _one_finished_lineage(root, "pre", LONG)
    assert "resuming " + nonce in out  # the second start resumed the lineage
    logs = sorted(os.listdir(f"{root}/objects/{Node('general.default.pre', nonce, 0).id}/logs"))
    assert logs == ["process-0.2.log", "process-0.log"]  # each start's output


@pytest.mark.slow
def test_two_processes_agree_on_the_step_a_signal_to_one_of_them_stops_at(tmp_path):
    """SIGTERM to process 1 only: both stop at one step (agreed through jax.distributed's store), commit the
    checkpoint together and exit 75; the relaunch resumes that lineage on both processes to its end."""
    root = make_root(tmp_path)
    args = [sys.executable, "-m", "theseus.cli", "launch", "gpt/train/pretrain", "pair", root, *TINY,
            "training.tokens=null", f"training.steps={LONG}", "logging.checkpoint_interval=100000",
            "logging.validation_interval=100000", "--processes", "2", "--devices-per-process", "1",
            "--auto-resume", "--timeout", "600"]
    launch = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_nodes(Store(root), "pair", 4, lambda: launch.poll() is None)
    workers = _workers_of(launch.pid)
    assert len(workers) == 2
    with open(f"/proc/{workers[0]}/cmdline", "rb") as f:
        first = b"--process-id\x001" in f.read()
    os.kill(workers[0] if first else workers[1], signal.SIGTERM)  # process 1 only
    out, err = launch.communicate(timeout=600)
    assert launch.returncode == 0, out[-4000:] + err[-3000:]
    assert "was preempted; starting it again to resume it (1 of 3)" in err
    nonce = _one_finished_lineage(root, "pair", LONG)
    assert out.count("resuming " + nonce) == 2  # both processes of the second start resumed it
    assert "another process's signal: stopped after step" in out  # process 0 stopped on process 1's signal


def test_auto_resume_does_not_continue_a_lineage_past_its_last_checkpoint(tmp_path):
    """A start killed before it committed a checkpoint at its last node: resuming from an earlier
    checkpoint would write the later nodes twice, so the start refuses and says how to go on."""
    spec = make_spec("data/tokenize/pydoc", "tok", str(tmp_path), "", auto_resume=True, nonce="abcdef")
    with Store(spec.root).writer() as w:
        w.job(spec.first_node(), spec.job_key, spec.config_yaml)
        w.write(spec.first_node().next(), {"train/loss": 1.0})
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert run_worker(spec, ProcessInfo()) == EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, before)
    assert Store(spec.root).find().nonce("abcdef").last().seq == 1  # nothing more written


def test_auto_resume_of_a_finished_run_does_nothing(tmp_path):
    spec = make_spec("data/tokenize/pydoc", "tok", str(tmp_path), "", auto_resume=True,
                     edit=lambda c: setattr(c.data, "max_samples", 3))
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert run_worker(spec, ProcessInfo()) == 0
        written = Store(spec.root).find().nonce(spec.nonce).all()
        assert run_worker(spec, ProcessInfo()) == 0  # a second start of the same spec: the run finished
    finally:
        signal.signal(signal.SIGTERM, before)
    assert Store(spec.root).find().nonce(spec.nonce).all() == written


@pytest.mark.slow
def test_scontrol_requeue_ends_in_one_finished_lineage(slurm_cluster, code_tarball, remote_work_dir, uv_env,
                                                      uv_binary, tmp_path):
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)

    def long_tiny(config) -> None:
        train_tiny(config)
        config.training.tokens, config.training.steps = None, LONG
        config.logging.checkpoint_interval = 100000

    spec = make_spec("gpt/train/pretrain", "requeued", root, revision, long_tiny, auto_resume=True)
    out, done, failed = io.StringIO(), [], []

    def follow() -> None:
        try:
            done.append(launch_slurm(spec, local_slurm(root, remote_work_dir, uv_env, processes=1, chips=1),
                                     tarball, uv=uv_binary, timeout=600, poll=0.2, stream=out))
        except Exception as e:  # noqa: BLE001 - handed to the test's thread
            failed.append(e)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    _wait_for_nodes(Store(root), "requeued", 4, thread.is_alive, deadline_s=400)
    job_id = subprocess.run(["squeue", "-h", "-o", "%i", "-n", f"theseus-requeued-{spec.nonce}"],
                            capture_output=True, text=True, timeout=30).stdout.strip()
    requeue = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    thread.join(timeout=600)
    assert not failed, f"{failed[0]}\n{out.getvalue()[-4000:]}"
    assert done and done[0].ok
    nonce = _one_finished_lineage(root, "requeued", LONG)
    logs = f"{root}/objects/{Node('general.default.requeued', nonce, 0).id}/logs"
    first, second = (open(f"{logs}/{name}").read() for name in ("process-0.log", "process-0.2.log"))
    assert "preempted after step" in first  # the first start committed its step and stopped
    assert f"resuming {nonce} from its checkpoint" in second  # the requeued start resumed it


def _ssh_inventory(tmp_path) -> str:
    path = tmp_path / "theseus.yaml"
    path.write_text(f"clusters: [{{name: lab, root: {tmp_path / 'root'}, work_dir: {tmp_path / 'work'}}}]\n"
                    "hosts: [{name: box, type: ssh, cluster: lab, chip: cpu, address: 127.0.0.1, chips: 2}]\n")
    return str(path)


@pytest.mark.parametrize("auto_resume", [True, False])
def test_submit_auto_resume_submits_a_preempted_ssh_run_again(tmp_path, monkeypatch, auto_resume):
    """An ssh host has no scheduler to requeue: submit --auto-resume starts the preempted run again itself."""
    from typer.testing import CliRunner

    from theseus.cli import app
    from theseus.cli import dispatch as commands
    from theseus.dispatch.remote import LaunchFailed
    from theseus.dispatch.solver import solve
    from theseus.dispatch.submit import Submission

    starts = []

    def launched(spec, inventory, request, dry_run, **options):  # the first start is preempted, the next ends
        starts.append(spec)
        if len(starts) == 1:
            raise LaunchFailed(f"run {spec.nonce} ended with exit code 75", (EXIT_PREEMPTED,))
        return Submission(spec, solve(inventory, request), "plan", launched=True)

    monkeypatch.setattr(commands, "submit_spec", launched)
    result = CliRunner().invoke(app, ["submit", "data/tokenize/pydoc", "tok", "--chip", "cpu", "--n", "2",
                                      "--inventory", _ssh_inventory(tmp_path),
                                      *(["--auto-resume"] if auto_resume else [])])
    if auto_resume:
        assert result.exit_code == 0, result.output
        assert "was preempted; submitting it again to resume it (1 of 3)" in result.output
        assert len(starts) == 2 and all(s.auto_resume and s.nonce == starts[0].nonce for s in starts)
    else:
        assert result.exit_code == 1 and len(starts) == 1 and "exit code 75" in result.output
