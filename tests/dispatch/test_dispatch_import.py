"""Launches of a job from the user's own file: the spec carries the imported experiments (their source, as
plain JSON) and every launched process imports them before it builds the job, locally (`theseus launch`,
``launch_local``) and over SSH (``q.submit`` against the ``sshd_server`` fixture)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.experiment_files import KEY, SOURCE, write_experiment
from theseus.cli import app
from theseus.dispatch.bootstrap import BadInput, check_spec
from theseus.dispatch.local import launch_local
from theseus.dispatch.spec import LaunchSpec
from theseus.experiments import Experiment, ExperimentError, import_experiment, job_source, shipped
from theseus.quick import build_spec, quick, spec_from_quick
from theseus.store import Store

pytestmark = pytest.mark.usefixtures("scratch_experiments")


def test_the_spec_carries_experiments_as_plain_json():
    files = (Experiment(path="/home/me/mix.py", source="X = 1\n"), Experiment(module="mylab.experiments"))
    spec = LaunchSpec(KEY, "count", "n: 2\n", "/r", nonce="abcdef", experiments=list(files))
    assert spec.experiments == files
    data = json.loads(spec.to_json())
    assert data["experiments"] == [{"path": "/home/me/mix.py", "source": "X = 1\n"}, {"module": "mylab.experiments"}]
    assert LaunchSpec.from_json(spec.to_json()) == spec
    data["experiments"] = [{"path": "/home/me/mix.py"}]
    with pytest.raises(ValueError, match="field 'experiments': an experiment has the fields path and source, "
                                         "or module; got path"):
        LaunchSpec.from_dict(data)
    with pytest.raises(ValueError, match="field 'experiments': a str is not an Experiment"):
        LaunchSpec(KEY, "count", "", "/r", experiments=("/home/me/mix.py",))


def test_a_spec_ships_the_imported_files_and_the_job_class_file(tmp_path, monkeypatch):
    path = write_experiment(tmp_path / "lab")
    import_experiment(path)
    spec = build_spec(str(tmp_path / "root"), KEY, "count", ["n=5"])
    assert spec.experiments == (Experiment(path=os.path.realpath(path), source=path.read_text()),)
    assert not (tmp_path / "root").exists()

    plain = write_experiment(tmp_path / "plain", name="plain_dispatch_experiments.py", key="mylab/test/plain")
    monkeypatch.syspath_prepend(str(plain.parent))
    import plain_dispatch_experiments  # a plain import, not --import: its file ships all the same

    with quick(tmp_path / "root") as q:
        q.build(plain_dispatch_experiments.Count, "plain")
        assert [e.path for e in spec_from_quick(q).experiments] == [os.path.realpath(path), os.path.realpath(plain)]

    class Scripted(plain_dispatch_experiments.Count):
        pass

    Scripted.__module__ = "__main__"
    with pytest.raises(ExperimentError, match="Scripted is defined in __main__ .* move it into a file"):
        shipped(Scripted)
    Scripted.__module__ = "mylab_installed.experiments"  # a module of a package: the host imports it by name
    assert shipped(Scripted)[-1] == Experiment(module="mylab_installed.experiments")


def test_check_spec_imports_what_the_spec_ships_and_refuses_what_fails(tmp_path):
    origin = str(tmp_path / "only-on-the-laptop" / "shipped_experiments.py")  # no such file here
    good = Experiment(path=origin, source=SOURCE.format(key="mylab/test/shipped"))
    cls, cfg = check_spec(LaunchSpec("mylab/test/shipped", "s", "n: 4\n", str(tmp_path), experiments=(good,)))
    assert cfg.n == 4 and job_source(cls) == f"{origin}:Count"
    bad = Experiment(path="/elsewhere/bad_experiments.py", source="import nowhere_at_all\n")
    with pytest.raises(BadInput, match="cannot import experiment /elsewhere/bad_experiments.py: "
                                       "ModuleNotFoundError: No module named 'nowhere_at_all'"):
        check_spec(LaunchSpec(KEY, "s", "", str(tmp_path), experiments=(bad,)))


def test_submit_dry_run_names_the_experiments_it_ships(tmp_path):
    path = write_experiment(tmp_path / "lab")
    inventory = tmp_path / "theseus.yaml"
    inventory.write_text(yaml.safe_dump({
        "clusters": [{"name": "lab", "root": str(tmp_path / "root"), "work_dir": str(tmp_path / "work")}],
        "hosts": [{"name": "hpc", "type": "slurm", "cluster": "lab", "chip": "cpu", "chips": 2}]}))
    result = CliRunner().invoke(app, ["--import", str(path), "submit", KEY, "count", "n=2", "--chip", "cpu",
                                      "--n", "2", "--inventory", str(inventory), "--dry-run", "--allow-dirty"])
    assert result.exit_code == 0, result.output
    assert f"experiments: {os.path.realpath(path)}" in result.output
    assert not (tmp_path / "root").exists() and not (tmp_path / "work").exists()


@pytest.mark.slow
def test_launch_runs_the_shipped_file_in_a_fresh_process(tmp_path):
    path = write_experiment(tmp_path / "lab")
    root = str(tmp_path / "root")
    result = CliRunner().invoke(app, ["--import", str(path), "launch", KEY, "count", root, "n=3", "--timeout", "300"])
    assert result.exit_code == 0, result.output
    store = Store(root)
    node = store.find().job(KEY).finished().last()
    assert node.seq == 3
    assert store.run_record(node.nonce)["_job_source"] == f"{os.path.realpath(path)}:Count"

    spec = build_spec(root, KEY, "count-again", ["n=2"])
    path.write_text("raise RuntimeError('edited after the launch was built')\n")  # the spec holds the source
    done = launch_local(spec, timeout=300, output=None)
    assert done.ok, Path(root, "objects", spec.first_node().id, "logs", "process-0.log").read_text()[-3000:]
    assert store.find().nonce(spec.nonce).finished().last().seq == 2


@pytest.mark.slow
def test_submit_over_ssh_ships_the_file_and_the_remote_imports_it(tmp_path, sshd_server, uv_env, uv_binary,
                                                                  remote_work_dir):
    path = write_experiment(tmp_path / "laptop")
    root = str(tmp_path / "cluster-root")
    inventory = tmp_path / "theseus.yaml"
    inventory.write_text(yaml.safe_dump({
        "clusters": [{"name": "lab", "root": root, "work_dir": remote_work_dir}],
        "hosts": [{"name": "box", "type": "ssh", "cluster": "lab", "chip": "cpu", "chips": 1, "groups": ["cpu"],
                   "address": sshd_server.address, "port": sshd_server.port, "user": sshd_server.user,
                   "identity_file": sshd_server.identity_file, "env": uv_env}]}))
    import_experiment(path)
    with quick(tmp_path / "mine") as q:
        q.build(KEY, "remote-count").config.n = 4
        os.remove(path)  # only the copy the spec carries can reach the host
        done = q.submit(chip="cpu", n=1, inventory=str(inventory), allow_dirty=True, uv=uv_binary, timeout=600,
                        known_hosts=sshd_server.known_hosts)
    assert done.launched.ok
    store = Store(root)
    record = store.run_record(done.nonce)
    assert record["_status"] == "finished" and record["_job"] == KEY
    assert record["_job_source"] == f"{os.path.realpath(tmp_path / 'laptop' / 'my_experiments.py')}:Count"
    assert [r["count/i"] for r in store.find().nonce(done.nonce).has("count/i").select(keys=["count/i"])] == [
        0, 1, 2, 3]
