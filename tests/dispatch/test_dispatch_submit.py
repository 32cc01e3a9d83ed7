"""`theseus submit` and `q.submit`: solve, package, plan (--dry-run) or launch; bad input refused before anything
starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from theseus.cli import app
from theseus.dispatch.bootstrap import BadInput
from theseus.dispatch.inventory import parse_inventory
from theseus.dispatch.logs import find_logs
from theseus.dispatch.submit import NotRunHere, request_for, submit
from theseus.quick import build_spec, quick
from theseus.store import Store


def inventory(tmp_path: Path, ssh: dict | None = None) -> tuple[str, dict]:
    """An inventory file with one host of each type; returns its path and the roots/work dirs by cluster."""
    folders = {name: {"root": str(tmp_path / name / "root"), "work_dir": str(tmp_path / name / "work")}
               for name in ("lab", "k8s", "gcp")}
    folders["k8s"] = {"root": "/mnt/runs/root", "work_dir": "/mnt/runs/work"}
    folders["gcp"] = {"root": "gs://bucket/runs", "work_dir": "/tmp/theseus"}
    data = {
        "clusters": [{"name": name, **paths} for name, paths in folders.items()],
        "hosts": [
            {"name": "box", "type": "ssh", "cluster": "lab", "chip": "cpu", "address": "10.0.0.9", "user": "me",
             "chips": 2, "groups": ["cpu"], **(ssh or {})},
            {"name": "hpc", "type": "slurm", "cluster": "lab", "chip": "cpu", "chips": 2, "nodes": 2,
             "partitions": ["debug"], "account": "acct", "groups": ["cpu"]},
            {"name": "vc", "type": "volcano", "cluster": "k8s", "chip": "h100", "namespace": "ml",
             "image": "ghcr.io/me/theseus:1", "volume": {"claim": "runs", "mount_path": "/mnt/runs"}, "chips": 8,
             "nodes": 2, "groups": ["cuda12"]},
            {"name": "pod", "type": "tpu", "cluster": "gcp", "chip": "v5p", "zone": "us-east5-a", "project": "p",
             "accelerator_type": "v5p-16", "version": "v2-alpha-tpuv5", "groups": ["tpu"]},
        ],
    }
    path = tmp_path / "theseus.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path), folders


def cli(*args: str):
    result = CliRunner().invoke(app, ["submit", *args])
    return result.exit_code, " ".join(result.output.split())


def nothing_written(tmp_path: Path) -> bool:
    return not any((tmp_path / "lab" / f).exists() for f in ("root", "work"))


PLANS = [
    (["--chip", "cpu", "--n", "2"], ["-> ssh host box (cluster lab): 1 node(s), 1 process(es) x 2 cpu",
                                     "to me@10.0.0.9:", "uv groups: cpu", "sync --no-default-groups --group cpu",
                                     "theseus.dispatch.bootstrap"]),
    (["--chip", "cpu", "--n", "4"], ["-> slurm host hpc (cluster lab): 2 node(s), 2 process(es) x 2 cpu",
                                     "#SBATCH --ntasks=2", "#SBATCH --partition=debug", "#SBATCH --account=acct"]),
    (["--chip", "h100", "--n", "16"], ["-> volcano host vc (cluster k8s): 2 node(s), 2 process(es) x 8 h100",
                                       "root: /mnt/runs/root", "kind: Job", "namespace: ml", "nvidia.com/gpu: 8"]),
    (["--chip", "v5p", "--n", "8"], ["-> tpu host pod (cluster gcp): 2 node(s), 2 process(es) x 4 v5p",
                                     "root: gs://bucket/runs", "gcloud compute tpus tpu-vm create",
                                     "--accelerator-type=v5p-16", "--worker=all"]),
]


@pytest.mark.parametrize(("request_args", "expected"), PLANS, ids=["ssh", "slurm", "volcano", "tpu"])
def test_dry_run_prints_the_plan_for_each_host_type_and_starts_nothing(tmp_path, request_args, expected):
    path, _ = inventory(tmp_path)
    code, out = cli("data/tokenize/pydoc", "tok", "data.max_samples=3", *request_args, "--inventory", path,
                    "--dry-run", "--allow-dirty")
    assert code == 0, out
    for text in expected:
        assert text in out, text
    assert "nonce" in out and nothing_written(tmp_path)


@pytest.mark.parametrize(("args", "code", "message"), [
    (["gpt/train/pretrain", "r", "--chip", "h100", "--n", "64"], 2,
     "no host fits 64 x h100: box (ssh, cluster lab): has cpu chips, h100 asked hpc (slurm, cluster lab)"),
    (["data/tokenize/pydok", "r"], 2, "did you mean data/tokenize/pydoc"),
    (["data/tokenize/pydoc", "r", "data.max_sampels=3"], 2, "data.max_sampels"),
    (["data/tokenize/pydoc", "r", "--chip", "cpu", "--n", "2", "--cluster", "nope"], 2, "no cluster 'nope'"),
    (["data/tokenize/pydoc", "r", "--chip", "h100", "--n", "8", "--cluster", "lab"], 2,
     "vc (volcano, cluster k8s): cluster k8s is forbidden"),
    (["data/tokenize/pydoc", "r", "--chip", "h100", "--n", "8"], 2, "does not run them; use --dry-run"),
    (["data/tokenize/pydoc", "r", "--resume", "Z2VuZXJhbC5kZWZhdWx0LnI6YWJjZGVmOjI"], 2, "has no records"),
])
def test_bad_requests_are_refused_before_anything_starts(tmp_path, args, code, message):
    path, _ = inventory(tmp_path)
    got, out = cli(*args, "--inventory", path, "--allow-dirty")
    assert got == code and message in out, out
    assert nothing_written(tmp_path)


def test_a_malformed_inventory_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("clusters:\n  - {name: lab, root: /r, work_dir: /w}\nhosts:\n  - {name: b, type: ssh, "
                    "cluster: lab, chip: cpu, address: a, chips: -1}\n")
    code, out = cli("data/tokenize/pydoc", "r", "--inventory", str(path))
    assert code == 2 and f"{path}:4" in out and "chips" in out, out


def test_an_unreachable_host_is_a_clear_error_and_nothing_is_written(tmp_path):
    from tests.conftest import free_port

    path, _ = inventory(tmp_path, ssh={"address": "127.0.0.1", "port": free_port()})
    code, out = cli("data/tokenize/pydoc", "r", "--chip", "cpu", "--n", "2", "--inventory", path, "--allow-dirty")
    assert code == 2 and "cannot reach ssh host 'box'" in out, out
    assert nothing_written(tmp_path)


def test_quick_submit_plans_the_pending_job_on_the_cluster_root(tmp_path):
    path, folders = inventory(tmp_path)
    with quick(tmp_path / "mine") as q:
        q.build("data/tokenize/pydoc", "tok").config.data.max_samples = 9
        plan = q.submit(chip="cpu", n=4, inventory=path, dry_run=True, allow_dirty=True)
        with pytest.raises(NotRunHere, match="volcano host 'vc'"):
            q.submit(chip="h100", n=16, inventory=path, allow_dirty=True)
    assert plan.placement.host.name == "hpc" and plan.spec.root == folders["lab"]["root"]
    assert "max_samples: 9" in plan.spec.config_yaml and plan.spec.groups == ("cpu",)
    assert plan.spec.revision and plan.nonce == plan.spec.nonce
    assert not (tmp_path / "mine").exists() and nothing_written(tmp_path)


def test_a_resumed_job_must_come_from_the_cluster_root(tmp_path):
    path, _ = inventory(tmp_path)
    inv = parse_inventory(Path(path).read_text(), path)
    elsewhere = str(tmp_path / "elsewhere")
    first = build_spec(elsewhere, "data/tokenize/pydoc", "tok")
    with Store(elsewhere).writer() as w:
        w.job(first.first_node(), first.job_key, first.config_yaml)
    resumed = build_spec(elsewhere, "data/tokenize/pydoc", "tok", base_node=first.first_node().id)
    with pytest.raises(BadInput, match=r"restores node .* but host 'hpc' \(cluster 'lab'\) writes to root"):
        submit(resumed, inv, request_for(inv, "cpu", 4), dry_run=True, allow_dirty=True)


@pytest.mark.slow
def test_submit_over_loopback_ssh_runs_the_job_into_the_cluster_root(tmp_path, sshd_server, uv_env, uv_binary,
                                                                     remote_work_dir):
    ssh = {"address": sshd_server.address, "port": sshd_server.port, "user": sshd_server.user,
           "identity_file": sshd_server.identity_file, "env": uv_env}
    path, folders = inventory(tmp_path, ssh=ssh)
    text = Path(path).read_text().replace(folders["lab"]["work_dir"], remote_work_dir)
    Path(path).write_text(text)
    with quick(tmp_path / "mine") as q:
        q.build("data/tokenize/pydoc", "remote-tok").config.data.max_samples = 20
        done = q.submit(chip="cpu", n=2, inventory=path, allow_dirty=True, uv=uv_binary, timeout=600,
                        known_hosts=str(tmp_path / "known_hosts"))
    root = folders["lab"]["root"]
    assert done.launched.ok and done.launched.node_id == done.spec.first_node().id
    record = Store(root).run_record(done.nonce)
    assert record["_status"] == "finished" and record["_job"] == "data/tokenize/pydoc"
    logs = find_logs(root, done.nonce)
    assert [log.process for log in logs] == [0] and "JOB remote-tok | finished" in logs[0].text()
    assert os.path.isdir(Path(root, "data", "pydoc"))
