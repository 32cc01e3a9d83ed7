"""The bootstrap on one process: output published into the root, failures and crashes recorded; `theseus logs`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.dispatch.bootstrap import log_path, publish_log
from theseus.dispatch.logs import find_logs
from theseus.dispatch.spec import LaunchSpec
from theseus.quick import build_spec
from theseus.store import Store


def bootstrap(spec: LaunchSpec, folder: Path, *args: str, **popen) -> subprocess.Popen:
    path = folder / f"spec-{spec.nonce}.json"
    path.write_text(spec.to_json())
    return subprocess.Popen([sys.executable, "-m", "theseus.dispatch.bootstrap", str(path), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def test_a_bootstrapped_job_runs_and_publishes_its_output(tmp_path):
    root = str(tmp_path / "root")
    spec = build_spec(root, "data/tokenize/pydoc", "tok", ["data.max_samples=5"])
    proc = bootstrap(spec, tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out.decode()[-3000:]
    store = Store(root)
    assert store.run_record(spec.nonce)["_status"] == "finished"
    logs = find_logs(root, spec.nonce)
    assert [(log.node, log.process, log.attempt) for log in logs] == [(spec.first_node(), 0, 1)]
    text = logs[0].text()
    assert "BOOTSTRAP | process 0/1 | data/tokenize/pydoc tok nonce" in text and "JOB tok | finished" in text
    assert Path(root, log_path(spec, 0)).read_text() == text
    shown = CliRunner().invoke(app, ["logs", root, spec.nonce, "--tail", "2"])
    assert shown.exit_code == 0 and "seq 0, process 0" in shown.output
    assert "BOOTSTRAP | process 0 | done at node" in shown.output and "BOOTSTRAP | process 0/1" not in shown.output
    assert len(shown.output.strip().splitlines()) == 3  # the heading and two lines


def test_a_job_failing_in_setup_is_recorded_with_its_error(tmp_path):
    root = str(tmp_path / "root")
    spec = build_spec(root, "data/tokenize/text", "no-corpus", [])
    proc = bootstrap(spec, tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out.decode()[-3000:]
    record = Store(root).run_record(spec.nonce)
    assert record["_status"] == "failed" and record["_job"] == "data/tokenize/text"
    assert "data.text.paths is empty" in record["_error"]
    assert "data.text.paths is empty" in find_logs(root, spec.nonce)[0].text()


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    root = str(tmp_path / "root")
    unknown = LaunchSpec("data/tokenize/nope", "r", "", root)
    bad_config = LaunchSpec("data/tokenize/pydoc", "r", "data:\n  max_sample: 3\n", root)
    for spec, message in ((unknown, "unknown job 'data/tokenize/nope'"), (bad_config, "data.max_sample")):
        proc = bootstrap(spec, tmp_path)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 2 and message in out.decode(), out.decode()[-2000:]
    (tmp_path / "junk.json").write_text('{"format": "theseus.launch/1"}')
    junk = subprocess.run([sys.executable, "-m", "theseus.dispatch.bootstrap", str(tmp_path / "junk.json")],
                          capture_output=True, text=True, timeout=60)
    assert junk.returncode == 2 and "missing field(s)" in junk.stdout
    assert not os.path.exists(root)


@pytest.mark.slow
def test_a_killed_worker_is_recorded_as_failed_with_its_last_lines(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 600_000)  # some seconds to tokenize
    root = str(tmp_path / "root")
    spec = build_spec(root, "data/tokenize/text", "big", [f"data.text.paths=[{corpus}]"])
    proc = bootstrap(spec, tmp_path)
    seen = b""
    deadline = time.monotonic() + 120
    while b"JOB big | starting" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    worker = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
    os.kill(worker, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, (seen + out).decode()[-3000:]
    record = Store(root).run_record(spec.nonce)
    assert record["_status"] == "failed", record
    assert "process 0 killed by signal 9" in record["_error"] and "JOB big | starting" in record["_error"]
    assert b"recorded the run" in out


def test_logs_of_unknown_or_silent_runs_say_so(tmp_path):
    root = str(tmp_path / "root")
    spec = LaunchSpec("data/tokenize/pydoc", "quiet", "", root, nonce="abcdef")
    with Store(root).writer() as w:
        w.job(spec.first_node(), spec.job_key, "")
    runner = CliRunner()
    silent = runner.invoke(app, ["logs", root, "abcdef"])
    assert silent.exit_code == 1 and "run abcdef has no published output" in silent.output
    assert runner.invoke(app, ["logs", root, "123456"]).exit_code == 2
    malformed = runner.invoke(app, ["logs", root, "nonce!"])
    assert malformed.exit_code == 2 and "6 lowercase hex" in malformed.output
    publish_log(spec, 1, b"one\n")
    publish_log(spec, 0, b"zero\n")
    publish_log(spec, 0, b"zero again\n")
    assert [(log.process, log.attempt) for log in find_logs(root, "abcdef")] == [(0, 1), (1, 1), (0, 2)]
    only = runner.invoke(app, ["logs", root, "abcdef", "--process", "0"])
    assert only.exit_code == 0 and "zero again" in only.output and "one" not in only.output
    none = runner.invoke(app, ["logs", root, "abcdef", "--process", "5"])
    assert none.exit_code == 1 and "process 5 of run abcdef" in none.output


def test_logs_of_a_run_without_a_job_record_are_none_not_an_unknown_run(tmp_path):
    from theseus.store import Node

    root = str(tmp_path / "root")
    node = Node.start("script.only.run")
    with Store(root).writer() as w:  # user keys only: no job, config or status record
        w.write(node, {"train/loss": 1.0})
    assert find_logs(root, node.nonce) == []
    said = CliRunner().invoke(app, ["logs", root, node.nonce])
    assert said.exit_code == 1 and f"run {node.nonce} has no published output" in said.output


def test_logs_of_a_resumed_lineage_come_after_its_checkpoints(tmp_path):
    root = str(tmp_path / "root")
    first = LaunchSpec("gpt/train/pretrain", "run", "", root, nonce="abcdef")
    node = first.first_node()
    with Store(root).writer() as w:
        w.job(node, first.job_key, "")
        for _ in range(3):
            node = node.next()
            w.write(node, {"train/loss": 1.0})
        w.checkpoint(node, f"objects/{node.id}")
    again = first.replace(base_node=node.id, resume=True)
    publish_log(first, 0, b"first launch\n")
    publish_log(again, 0, b"second launch\n")
    logs = find_logs(root, "abcdef")
    assert [(log.node.seq, log.text()) for log in logs] == [(0, "first launch\n"), (4, "second launch\n")]
    with Store(root).writer() as w:  # retention retires the checkpoint the second launch started from
        w.retire(node, "keep_checkpoints=1")
    assert [log.text() for log in find_logs(root, "abcdef")] == ["first launch\n", "second launch\n"]


def test_cli_dispatch_docstrings():
    import doctest

    import theseus.cli.dispatch

    result = doctest.testmod(theseus.cli.dispatch, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
