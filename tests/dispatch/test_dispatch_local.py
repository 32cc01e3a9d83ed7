"""`theseus launch`: N local processes under jax.distributed train one run into one root.

The slow tests start real processes (gloo CPU collectives, 2 virtual CPU devices
each): one run in the log with every step node once, written by process 0 only;
checkpoints holding shards written by both processes; the checkpoint resumes on
1 process x 4 devices with the same batches and close losses; a failing launch
leaves a failed-run record and its output for `theseus logs`. The fast ones
check that bad input is refused before anything starts and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tests.train._helpers import write_dataset
from tests.train._subproc import run_python
from theseus.cli import app
from theseus.store import Store

TINY = [
    "architecture.n_embd=32", "architecture.n_layers=1", "architecture.n_head=2", "architecture.block_size=16",
    "architecture.vocab_size=256", "training.batch_size=8", "training.per_device_batch_size=2",
    f"training.tokens={8 * 16 * 4}", "training.validation_steps=1", "logging.report_interval=1",
    "logging.checkpoint_interval=2", "logging.validation_interval=2",
]
STEPS = 4


def make_root(path: Path) -> str:
    """A root with a small tokenized dataset and the CPU peak already cached (no 10 s measurement per run)."""
    root = str(path / "root")
    write_dataset(root, tokens=20_000)
    peak = Path(root, "meta", "cpu_peak", "cpu-bfloat16.json")
    peak.parent.mkdir(parents=True)
    peak.write_text(json.dumps({"cpu/bfloat16": 5e10}))
    return root


def theseus(*args: str, timeout: float = 400, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real command line, in a child process."""
    return subprocess.run([sys.executable, "-m", "theseus.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "THESEUS_LOG_LEVEL": "DEBUG", **(env or {})})


def records(root: str) -> pl.DataFrame:
    """The raw log, read without theseus; the partitions as strings (a nonce such as 945e12 or 012345 would
    otherwise be inferred as a number)."""
    return pl.read_parquet(f"{root}/log/**/*.parquet", hive_partitioning=True,
                           hive_schema={"name": pl.String, "nonce": pl.String})


def losses(store: Store, nonce: str) -> dict[int, float]:
    frame = store.find().nonce(nonce).has("train/loss").frame().select("seq", "train/loss").collect()
    return dict(frame.iter_rows())


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    root = make_root(tmp_path_factory.mktemp("launch"))
    done = theseus("launch", "gpt/train/pretrain", "multi", root, *TINY, "--processes", "2",
                   "--devices-per-process", "2", "--timeout", "360")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return root, done


@pytest.mark.slow
def test_two_processes_write_one_run_one_log_and_shards_from_both(two_process_run):
    root, done = two_process_run
    store = Store(root)
    runs = store.runs()
    assert runs.height == 1 and runs["_status"][0] == "finished"
    nonce = runs["nonce"][0]
    assert f"nonce {nonce}" in done.stderr
    # every step node once, all records by one writer (process 0)
    log = records(root)
    assert log["writer"].n_unique() == 1
    steps = log.filter(pl.col("key") == "train/loss")
    assert sorted(steps["seq"].to_list()) == list(range(1, STEPS + 1))
    assert [n.seq for n in store.find().nonce(nonce).all()] == list(range(STEPS + 1))
    # both processes wrote their own shards into each checkpoint
    checkpoints = store.find().nonce(nonce).checkpoint().all()
    assert [n.seq for n in checkpoints] == [2, 4]
    for node in checkpoints:
        folder = Path(store.objects(node))
        listed = {f["path"] for f in json.loads((folder / "MANIFEST.json").read_text())["files"]}
        assert {"checkpoint/process-00000.json", "checkpoint/process-00001.json"} <= listed
        for k in (0, 1):
            mine = json.loads((folder / f"checkpoint/process-0000{k}.json").read_text())["files"]
            assert any(f["path"].startswith("checkpoint/opt_state/") for f in mine), (k, mine[:3])
    # each process published its output into the root
    shown = CliRunner().invoke(app, ["logs", root, nonce])
    assert shown.exit_code == 0, shown.output
    assert "BOOTSTRAP | process 0/2" in shown.output and "BOOTSTRAP | process 1/2" in shown.output


RESTORED_BATCH = """
from theseus.quick import quick
from theseus.data.loader import Loader
with quick({root!r}) as q:
    job = q.find().node({node!r}).resume().create()
    batch = job.batch()
    loader = Loader(job.trainer.dataset, "train", seed=0, batch_size=8, block_size=16)
    emit({{"step": job.trainer.step, "devices": len(job.trainer.mesh.devices.flat),
          "x": batch["x"].tolist(), "same": bool((batch["x"] == loader.batch({step})["x"]).all())}})
    job.close()
"""


@pytest.mark.slow
def test_checkpoint_of_two_processes_resumes_on_one_process_with_four_devices(two_process_run):
    root, _ = two_process_run
    store = Store(root)
    original = store.runs()["nonce"][0]
    base = next(n for n in store.find().nonce(original).checkpoint().all() if n.seq == 2)
    # one process may autobatch: the bootstrap's job resolves -1 (only 2 of the candidates 4, 2 splits 8 rows
    # over 4 devices) before the run starts, and records the resolved size in the run's config
    done = theseus("launch", "gpt/train/pretrain", "multi", root, "training.per_device_batch_size=-1", "--resume",
                   base.id, "--processes", "1", "--devices-per-process", "4", "--timeout", "360",
                   env={"THESEUS_AUTOBATCH_SIZE_CANDIDATES": "4 2"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "AUTOBATCH | per_device_batch_size=2" in done.stdout
    branch = next(n for n in store.runs()["nonce"] if n != original)  # seq 2 is not the tip: a branch
    assert store.find().nonce(branch).first().parent == base.id
    assert "per_device_batch_size: 2" in store.run_record(branch)["_config"]
    before, after = losses(store, original), losses(store, branch)
    # the branch's seq j holds step 2 + j
    resumed = {2 + seq: loss for seq, loss in after.items()}
    assert sorted(resumed) == [3, 4]
    np.testing.assert_allclose([resumed[3], resumed[4]], [before[3], before[4]], rtol=2e-5)
    # the batch of step 2, restored on 4 devices from the 2-process checkpoint and on 1 device
    on_four = run_python(RESTORED_BATCH.format(root=root, node=base.id, step=2), devices=4, timeout=300)
    on_one = run_python(RESTORED_BATCH.format(root=root, node=base.id, step=2), devices=1, timeout=300)
    assert on_four["step"] == on_one["step"] == 2 and (on_four["devices"], on_one["devices"]) == (4, 1)
    assert on_four["x"] == on_one["x"] and on_four["same"] and on_one["same"]


@pytest.mark.slow
def test_a_failing_launch_leaves_a_failed_run_and_its_output(tmp_path):
    root = make_root(tmp_path)
    done = theseus("launch", "gpt/train/pretrain", "broken", root, *TINY, "data.dataset=nowhere",
                   "--processes", "2", "--devices-per-process", "1", "--timeout", "240")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-3000:]
    store = Store(root)
    runs = store.runs()
    assert runs.height == 1 and runs["_status"][0] == "failed"
    nonce = runs["nonce"][0]
    assert f"theseus logs {root} {nonce}" in done.stderr
    record = store.run_record(nonce)
    assert "nowhere" in record["_error"] and "data/tokenize/nowhere" in record["_error"], record["_error"]
    shown = CliRunner().invoke(app, ["logs", root, nonce])
    assert shown.exit_code == 0
    assert "process 0" in shown.output and "process 1" in shown.output
    assert shown.output.count("data/tokenize/nowhere") >= 2  # both processes' tracebacks
    only_one = CliRunner().invoke(app, ["logs", root, nonce, "--process", "1", "--tail", "3"])
    assert only_one.exit_code == 0 and "process 0" not in only_one.output


@pytest.mark.slow
def test_a_launch_past_its_deadline_is_stopped_and_recorded(tmp_path):
    root = make_root(tmp_path)
    done = theseus("launch", "gpt/train/pretrain", "slow", root, *TINY, "training.tokens=1000000",
                   "--processes", "2", "--devices-per-process", "1", "--timeout", "25", timeout=180)
    assert "past its deadline" in done.stderr, done.stdout[-4000:] + done.stderr[-3000:]
    store = Store(root)
    nonce = store.runs()["nonce"][0]
    record = store.run_record(nonce)
    # The deadline's SIGTERM stops both workers at one agreed step with its checkpoint committed: the run
    # is recorded preempted and resumes from there. If they cannot within the 15 s grace (a loaded
    # machine), the supervisor records the SIGKILL as a failure.
    if record["_status"] == "preempted":
        assert done.returncode == 75
        tip = store.find().nonce(nonce).last()
        assert store.find().nonce(nonce).checkpoint().last() == tip
    else:
        assert done.returncode == 1 and record["_status"] == "failed" and "killed by signal 9" in record["_error"]
    shown = CliRunner().invoke(app, ["logs", root, nonce])
    assert shown.output.count("deadline of 25 s passed") == 2  # both processes stopped


# --- bad input: refused before anything starts, nothing written ---------------------------

BAD = [
    (["data/tokenize/pydok", "r"], "did you mean data/tokenize/pydoc"),
    (["gpt/train/pretrain", "r", "training.tokenz=5"], "training.tokenz"),
    (["gpt/train/pretrain", "r", "training.tokens=lots"], "training.tokens"),
    (["gpt/train/pretrain", "r", "training.per_device_batch_size=2", "--processes", "0"], "processes must be"),
    (["gpt/train/pretrain", "r", "--resume", "Z2VuZXJhbC5kZWZhdWx0LnI6YWJjZGVmOjI"], "no records"),
    (["gpt/train/pretrain", "r", "--resume", "nonsense"], "malformed node id"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_refused_before_anything_starts(tmp_path, args, message):
    root = str(tmp_path / "root")
    job, run, *rest = args
    result = CliRunner().invoke(app, ["launch", job, run, root, *rest])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not os.path.exists(root)
