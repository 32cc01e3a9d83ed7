"""`theseus --import FILE`: the user's experiment files (or modules) are imported before any command runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.experiment_files import KEY, write_experiment
from theseus.cli import app
from theseus.store import Node, Store

pytestmark = pytest.mark.usefixtures("scratch_experiments")
runner = CliRunner()


def theseus(*args) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.output.split())


def test_jobs_lists_and_run_runs_the_jobs_of_an_imported_file(tmp_path):
    path = write_experiment(tmp_path / "lab")
    code, out = theseus("--import", path, "jobs", "mylab")
    assert code == 0 and KEY in out and "Count to n, one node per number" in out
    code, out = theseus("--import", path, "run", KEY, "count", tmp_path / "root", "n=4")
    assert code == 0, out
    node = Store(tmp_path / "root").find().job(KEY).finished().last()
    assert node.seq == 4
    assert Store(tmp_path / "root").run_record(node.nonce)["_job_source"] == f"{os.path.realpath(path)}:Count"


def test_import_is_repeatable_and_takes_module_names(tmp_path, monkeypatch):
    write_experiment(tmp_path / "mylab_cli_pkg", name="__init__.py")
    other = write_experiment(tmp_path / "other", key="mylab/test/other")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = theseus("--import", "mylab_cli_pkg", "--import", other, "jobs", "mylab/test")
    assert code == 0 and KEY in out and "mylab/test/other" in out
    code, out = theseus("--import", "mylab_cli_pkg", "run", KEY, "count", tmp_path / "root")
    assert code == 0, out
    [run] = Store(tmp_path / "root").runs()["nonce"].to_list()
    assert Store(tmp_path / "root").run_record(run)["_job_source"] == "mylab_cli_pkg:Count"


def test_a_file_that_is_missing_or_fails_is_bad_input_naming_it(tmp_path):
    missing = tmp_path / "nowhere.py"
    assert theseus("--import", missing, "jobs") == (2, f"error: cannot import experiment {missing}: no such file")
    broken = write_experiment(tmp_path, name="broken.py", source="raise RuntimeError('no GPU here')\n")
    assert theseus("--import", broken, "jobs") == (
        2, f"error: cannot import experiment {broken}: RuntimeError: no GPU here")
    assert not (tmp_path / "root").exists()
    code, out = theseus("run", KEY, "count", tmp_path / "root")  # without --import: an unknown key
    assert code == 2 and f"unknown job '{KEY}'" in out


def written_run(root, path) -> Node:
    """A finished count run of ``path``'s job with a checkpoint record at its tip and a logged loss after it."""
    node = Node.start("count")
    with Store(root).writer() as w:
        w.job(node, KEY, "n: 2\n", source=f"{os.path.realpath(path)}:Count")
        w.checkpoint(node, f"objects/{node.id}")
        w.write(node.next(), {"train/loss": 2.5})
        w.finished(node.next())
    return node


def test_audit_and_verify_name_the_file_to_import_and_work_once_it_is(tmp_path):
    path = write_experiment(tmp_path / "lab")
    root = tmp_path / "root"
    node = written_run(root, path)
    hint = f"`theseus --import {os.path.realpath(path)} ...`"
    code, out = theseus("audit", root, "--no-checksums")
    assert code == 1  # the made-up checkpoint folder is missing: an integrity failure, reported as usual
    assert f"warning unregistered-job: general.default.count:{node.nonce}: job '{KEY}' is not registered" in out
    assert hint in out and f"{KEY} ({os.path.realpath(path)}:Count)" in out
    code, out = theseus("verify", root, node.id)
    assert code == 2 and "is not registered in this process" in out and hint in out

    code, out = theseus("--import", path, "audit", root, "--no-checksums")
    assert code == 1 and "unregistered-job" not in out
    code, out = theseus("--import", path, "verify", root, node.id)
    assert code == 2 and "not registered" not in out and "no MANIFEST.json" in out  # on to the checkpoint itself


@pytest.mark.slow
def test_the_real_command_line_imports_before_the_command(tmp_path):
    path = write_experiment(tmp_path / "lab")
    done = subprocess.run([sys.executable, "-m", "theseus.cli", "--import", str(path), "run", KEY, "count",
                           str(tmp_path / "root"), "n=2", "--log-level", "WARNING"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert Store(tmp_path / "root").find().job(KEY).finished().last().seq == 2
