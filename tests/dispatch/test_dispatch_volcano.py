"""The Volcano Job: generated from a placement, checked against the shipped schema, and its pod command run under bash.

No cluster here: the pod's script runs with a stand-in ``uv`` that reports what
the real one would have been asked to run.
"""

from __future__ import annotations

import copy
import io
import json
import os
import stat
import subprocess
import tarfile
from importlib import resources

import pytest
import yaml

from theseus.dispatch.inventory import Cluster, SshHost, VolcanoHost, VolcanoVolume
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.volcano import ManifestError, manifest_yaml, validate_manifest, volcano_manifest


def host(**changes):
    fields = dict(name="k8s", cluster="lab", chip="h100", namespace="ml", queue="research",
                  image="ghcr.io/me/theseus:1",
                  volume=VolcanoVolume(claim="runs", mount_path="/mnt/runs"), chips=8, nodes=4, memory_gb=200, cpus=32,
                  env={"NCCL_DEBUG": "WARN"})
    return VolcanoHost(**{**fields, **changes})


CLUSTER = Cluster(name="lab", root="/mnt/runs/root", work_dir="/mnt/runs/work")
SPEC = LaunchSpec("gpt/train/pretrain", "train-gpt", "training:\n  steps: 10\n", "/mnt/runs/root", nonce="949e88",
                  revision="abc123", groups=("cuda12",), env={"THESEUS_LOG": "1"})


def manifest(nodes=2, per_node=8, **host_changes):
    return volcano_manifest(SPEC, Placement(host(**host_changes), CLUSTER, nodes, nodes, per_node))


def container(m):
    return m["spec"]["tasks"][0]["template"]["spec"]["containers"][0]


def test_one_gang_scheduled_task_with_a_pod_per_node():
    m = manifest()
    assert (m["apiVersion"], m["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert m["metadata"]["namespace"] == "ml" and m["metadata"]["labels"]["theseus/nonce"] == "949e88"
    spec = m["spec"]
    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"], spec["maxRetry"]) == (
        "volcano", "research", 2, 0)
    assert spec["plugins"] == {"svc": [], "env": []}
    (task,) = spec["tasks"]
    assert (task["name"], task["replicas"]) == ("worker", 2)
    pod = task["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "theseus", "persistentVolumeClaim": {"claimName": "runs"}}]
    c = container(m)
    assert c["image"] == "ghcr.io/me/theseus:1"
    assert c["volumeMounts"] == [{"name": "theseus", "mountPath": "/mnt/runs"}]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 8, "memory": "200Gi", "cpu": 32}}


def test_the_environment_of_jax_distributed():
    env = {e["name"]: e["value"] for e in container(manifest(nodes=3))["env"]}
    name = "theseus-train-gpt-949e88-0"
    assert env == {"NCCL_DEBUG": "WARN", "THESEUS_NUM_PROCESSES": "3",
                   "THESEUS_COORDINATOR": f"{name}-worker-0.{name}:8476"}  # the svc plugin's DNS name of pod 0
    assert "THESEUS_COORDINATOR" not in {e["name"] for e in container(manifest(nodes=1))["env"]}


def test_a_cpu_host_gets_host_devices_instead_of_an_accelerator_limit():
    c = container(manifest(nodes=2, per_node=4, chip="cpu", memory_gb=None, cpus=None))
    assert "resources" not in c
    assert {"name": "XLA_FLAGS", "value": "--xla_force_host_platform_device_count=4"} in c["env"]


def test_dry_run_yaml_round_trips_and_shows_the_script_as_a_block():
    m = manifest()
    text = manifest_yaml(m)
    assert yaml.safe_load(text) == m
    assert "- |\n" in text and "exec \"$UV\" run --no-sync python -m theseus.dispatch.bootstrap" in text


def fake_uv(folder):
    """A `uv` that prints its arguments, the THESEUS_* environment and the spec file it is asked to run."""
    folder.mkdir()
    uv = folder / "uv"
    uv.write_text("#!/usr/bin/env bash\n"
                  "echo \"uv $*\"\n"
                  "if [ \"$1\" = run ]; then env | grep -E '^(THESEUS|XLA)_' | sort; echo SPEC; cat \"${@: -1}\"; fi\n")
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    return folder


def run_pod(m, tmp_path, index: str | None):
    """Run the pod's command as Volcano would (bash, the container env, VC_TASK_INDEX from the env plugin)."""
    c = container(m)
    env = {"PATH": f"{fake_uv(tmp_path / f'bin{index}')}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    env.update({e["name"]: e["value"] for e in c["env"]})
    if index is not None:
        env["VC_TASK_INDEX"] = index
    return subprocess.run(c["command"], env=env, capture_output=True, text=True, timeout=60)


def test_the_pod_command_runs_the_bootstrap_with_its_index_and_the_inlined_spec(tmp_path):
    mount, pod_dir = tmp_path / "mnt", tmp_path / "pod"
    (mount / "work").mkdir(parents=True)
    with tarfile.open(mount / "work" / "abc123.tar.gz", "w:gz") as tar:
        data = b"print('code')\n"
        info = tarfile.TarInfo("hello.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    cluster = Cluster(name="lab", root=str(mount / "root"), work_dir=str(mount / "work"))
    spec = SPEC.replace(root=str(mount / "root"))
    placement = Placement(host(volume=VolcanoVolume(claim="runs", mount_path=str(mount))), cluster, 2, 2, 8)
    m = volcano_manifest(spec, placement)
    m = json.loads(json.dumps(m).replace("/tmp/theseus", str(pod_dir)))  # the pod-local folder, here under tmp_path
    out = run_pod(m, tmp_path, "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "uv sync --no-default-groups --group cuda12"
    assert lines[1].startswith("uv run --no-sync python -m theseus.dispatch.bootstrap ")
    assert "THESEUS_PROCESS_ID=1" in lines and "THESEUS_NUM_PROCESSES=2" in lines and "THESEUS_LOG=1" in lines
    assert any(line.startswith("THESEUS_COORDINATOR=theseus-train-gpt-949e88-0-worker-0.") for line in lines)
    assert LaunchSpec.from_json("\n".join(lines[lines.index("SPEC") + 1:])) == spec
    assert (pod_dir / "abc123" / "hello.py").read_text() == "print('code')\n"  # unpacked pod-locally
    missing = run_pod(m, tmp_path, None)
    assert missing.returncode != 0 and "the Volcano env plugin sets VC_TASK_INDEX" in missing.stderr


def test_the_root_and_the_code_must_be_reachable_from_the_pods():
    with pytest.raises(ValueError,
                       match=r"root /elsewhere is neither on host 'k8s'.s volume \(mounted at /mnt/runs\) nor a URL"):
        volcano_manifest(SPEC.replace(root="/elsewhere"), Placement(host(), CLUSTER, 1, 1, 8))
    outside = Cluster(name="lab", root="/mnt/runs/root", work_dir="/scratch/work")
    with pytest.raises(ValueError, match=r"code tarball /scratch/work/abc123.tar.gz is not on host 'k8s'.s volume"):
        volcano_manifest(SPEC, Placement(host(), outside, 1, 1, 8))
    assert volcano_manifest(SPEC.replace(root="gs://bucket/runs"), Placement(host(), CLUSTER, 1, 1, 8))


def test_only_a_volcano_host_makes_a_manifest():
    ssh = SshHost(name="box", cluster="lab", chip="cpu", address="a", chips=4)
    with pytest.raises(TypeError, match="needs a volcano host, got ssh host 'box'"):
        volcano_manifest(SPEC, Placement(ssh, CLUSTER, 1, 1, 4))


def broken(change):
    m = copy.deepcopy(manifest())
    change(m)
    return m


@pytest.mark.parametrize("change,says", [
    (lambda m: m["spec"]["tasks"][0].update(replicas="2"), "spec.tasks[0].replicas: '2' is not of type 'integer'"),
    (lambda m: container(m).pop("image"), "spec.tasks[0].template.spec.containers[0]: 'image' is a required property"),
    (lambda m: m["spec"].update(minAvaliable=2),
     "spec: Additional properties are not allowed ('minAvaliable' was unexpected)"),
    (lambda m: m["spec"].update(minAvailable=-1), "spec.minAvailable: -1 is less than the minimum of 0"),
    (lambda m: m["metadata"].update(name="Theseus_Run"), "metadata.name: 'Theseus_Run' does not match"),
    (lambda m: m.update(apiVersion="batch/v1"), "apiVersion: 'batch.volcano.sh/v1alpha1' was expected"),
    (lambda m: container(m)["resources"]["limits"].update(memory="lots"),
     "spec.tasks[0].template.spec.containers[0].resources.limits.memory: 'lots' is not valid"),
    (lambda m: m["spec"]["tasks"][0]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"].pop("claimName"),
     "volumes[0].persistentVolumeClaim: 'claimName' is a required property"),
    (lambda m: container(m)["env"].append({"name": "N", "value": 3}),
     "containers[0].env[3].value: 3 is not of type 'string'"),
])
def test_a_broken_manifest_is_refused_naming_the_field(change, says):
    with pytest.raises(ManifestError) as e:
        validate_manifest(broken(change))
    assert says in str(e.value), str(e.value)
    assert str(e.value).startswith("Volcano Job manifest breaks the schema")


def test_every_error_is_listed_at_once():
    def two(m):
        m["spec"]["tasks"][0]["replicas"] = "2"
        container(m).pop("image")

    with pytest.raises(ManifestError) as e:
        validate_manifest(broken(two))
    assert len(str(e.value).splitlines()) == 3


def test_the_schema_ships_in_the_package_and_is_a_valid_schema():
    import jsonschema

    text = resources.files("theseus.dispatch").joinpath("schemas/volcano-job.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["apiVersion"] == {"const": "batch.volcano.sh/v1alpha1"}
