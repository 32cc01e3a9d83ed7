"""Kubernetes with Volcano: the ``batch.volcano.sh/v1alpha1`` Job of a launch.

``volcano_manifest(spec, placement)`` builds the Job for a placement on a
``VolcanoHost``: one task (``worker``) with one pod per node, gang-scheduled
(``minAvailable`` = nodes) in the host's queue, the host's persistent volume
claim mounted in every pod, and the environment ``jax.distributed`` needs:

- the ``svc`` plugin gives every pod the DNS name ``<job>-worker-<i>.<job>``,
  so the coordinator is ``<job>-worker-0.<job>:8476`` (``THESEUS_COORDINATOR``);
- ``THESEUS_NUM_PROCESSES`` is the node count;
- the ``env`` plugin sets ``VC_TASK_INDEX`` in each pod, which the pod's command
  exports as ``THESEUS_PROCESS_ID``.

The pod's command writes the launch spec (plain JSON, inlined) and runs the
shared bootstrap script (unpack the code tarball, ``uv sync`` the spec's
groups, ``python -m theseus.dispatch.bootstrap``) in a pod-local folder
(``POD_WORK_DIR``), so pods never race on shared files. The code tarball is
read from the cluster's ``work_dir``, which must lie on the volume; the root
must lie on the volume too, or be a ``gs://`` URL.

Every manifest is checked against ``schemas/volcano-job.json`` (the subset of
the Volcano CRD that theseus writes) before it is returned. ``--dry-run``
prints ``manifest_yaml(manifest)``; nothing here talks to a cluster.

>>> from theseus.dispatch.spec import LaunchSpec
>>> from theseus.dispatch.solver import Placement
>>> from theseus.dispatch.inventory import Cluster, VolcanoHost, VolcanoVolume
>>> host = VolcanoHost(name="k8s", cluster="lab", chip="h100", namespace="ml", image="ghcr.io/me/theseus:1",
...                    volume=VolcanoVolume(claim="runs", mount_path="/mnt/runs"), chips=8, nodes=4)
>>> cluster = Cluster(name="lab", root="/mnt/runs/root", work_dir="/mnt/runs/work")
>>> spec = LaunchSpec("gpt/train/pretrain", "train-gpt", "", "/mnt/runs/root", nonce="949e88", revision="abc123")
>>> job = volcano_manifest(spec, Placement(host, cluster, 2, 2, 8))
>>> job["metadata"]["name"], job["spec"]["minAvailable"], job["spec"]["tasks"][0]["replicas"]
('theseus-train-gpt-949e88-0', 2, 2)
>>> env = {e["name"]: e["value"] for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
>>> env["THESEUS_COORDINATOR"], env["THESEUS_NUM_PROCESSES"]
('theseus-train-gpt-949e88-0-worker-0.theseus-train-gpt-949e88-0:8476', '2')
"""

from __future__ import annotations

import functools
import json
import posixpath
from importlib import resources
from typing import Any

import jsonschema
import yaml

from theseus.dispatch.inventory import VolcanoHost
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.stage import COORDINATOR_PORT, job_name, launch_script
from theseus.errors import BadInput

__all__ = ["POD_WORK_DIR", "ManifestError", "manifest_yaml", "validate_manifest", "volcano_manifest"]

POD_WORK_DIR = "/tmp/theseus"
TASK = "worker"
VOLUME = "theseus"


class ManifestError(BadInput):
    """A manifest that does not match the Volcano Job schema; the message names every offending field.

    >>> issubclass(ManifestError, ValueError)
    True
    """


def volcano_manifest(spec: LaunchSpec, placement: Placement, *, tarball: str | None = None) -> dict[str, Any]:
    """The Volcano Job (a plain dict, checked against the schema) that runs ``spec`` on ``placement``.

    ``tarball`` is the code tarball's path inside the pods (default
    ``<work_dir>/<revision>.tar.gz``); whoever submits the Job copies it there first.

    >>> from theseus.dispatch.inventory import Cluster, SshHost
    >>> from theseus.dispatch.solver import Placement
    >>> ssh = SshHost(name="box", cluster="lab", chip="cpu", address="a", chips=4)
    >>> spec = LaunchSpec("k/x", "r", "", "/r", nonce="abcdef", revision="abc")
    >>> volcano_manifest(spec, Placement(ssh, Cluster(name="lab", root="/r", work_dir="/w"), 1, 1, 4))
    Traceback (most recent call last):
    ...
    TypeError: a Volcano manifest needs a volcano host, got ssh host 'box'
    """
    host, cluster = placement.host, placement.cluster
    if not isinstance(host, VolcanoHost):
        raise TypeError(f"a Volcano manifest needs a volcano host, got {host.type} host {host.name!r}")
    tarball = _pod_tarball(spec, host, cluster, tarball)
    name = job_name(spec)
    container = _container(spec, placement, name, tarball)
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": host.namespace,
                     "labels": {"app.kubernetes.io/name": "theseus", "theseus/nonce": spec.nonce}},
        "spec": {
            "schedulerName": "volcano",
            "queue": host.queue,
            "minAvailable": placement.nodes,
            "maxRetry": 0,  # a retry would rewrite the same nodes: fail, and resume from a checkpoint instead
            "plugins": {"svc": [], "env": []},
            "policies": [{"event": "PodFailed", "action": "AbortJob"}, {"event": "PodEvicted", "action": "AbortJob"}],
            "tasks": [{
                "name": TASK,
                "replicas": placement.nodes,
                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": host.volume.claim}}],
                }},
            }],
        },
    }
    validate_manifest(manifest)
    return manifest


def _pod_tarball(spec: LaunchSpec, host: VolcanoHost, cluster: Any, tarball: str | None) -> str:
    """The code tarball's path inside the pods (default ``<work_dir>/<revision>.tar.gz``), refused (BadInput)
    when it or a root that is not a URL lies off the host's volume, where pods could not read or keep it."""
    mount = host.volume.mount_path
    tarball = tarball or posixpath.join(cluster.work_dir, f"{spec.revision}.tar.gz")
    if not _under(tarball, mount):
        raise BadInput(f"the code tarball {tarball} is not on host {host.name!r}'s volume (mounted at {mount}): "
                         f"pods could not read it (set cluster {cluster.name!r}'s work_dir under {mount})")
    if "://" not in spec.root and not _under(spec.root, mount):
        raise BadInput(f"root {spec.root} is neither on host {host.name!r}'s volume (mounted at {mount}) nor a URL: "
                         "what the pods write would be lost")
    return tarball


def _container(spec: LaunchSpec, placement: Placement, name: str, tarball: str) -> dict[str, Any]:
    """The pod's one container of Job ``name``: its image, launch script, environment (the process count, the
    coordinator when several), the coordinator port, the volume and the chips, memory and cpus it asks for."""
    host = placement.host
    mount = host.volume.mount_path
    env = {**host.env, "THESEUS_NUM_PROCESSES": str(placement.processes)}
    if placement.processes > 1:
        env["THESEUS_COORDINATOR"] = f"{name}-{TASK}-0.{name}:{COORDINATOR_PORT}"
    resources_: dict[str, Any] = {}
    if host.chip == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={placement.chips_per_process}"
    else:
        resources_[host.chip_resource] = placement.chips_per_process
    if host.memory_gb is not None:
        resources_["memory"] = f"{host.memory_gb:g}Gi"
    if host.cpus is not None:
        resources_["cpu"] = host.cpus
    preamble = ['export THESEUS_PROCESS_ID="${VC_TASK_INDEX:?the Volcano env plugin sets VC_TASK_INDEX}"']
    container = {
        "name": "theseus",
        "image": host.image,
        "command": ["/bin/bash", "-c", launch_script(spec, POD_WORK_DIR, tarball, preamble)],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"containerPort": COORDINATOR_PORT, "name": "coordinator"}],
        "volumeMounts": [{"name": VOLUME, "mountPath": mount}],
    }
    if resources_:
        container["resources"] = {"limits": resources_}
    return container


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Raise ``ManifestError`` naming each field of ``manifest`` that breaks the Volcano Job schema.

    >>> try:
    ...     validate_manifest({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
    ...                        "spec": {"tasks": [{"name": "w", "replicas": "2",
    ...                                            "template": {"spec": {"containers": []}}}]}})
    ... except ManifestError as e:
    ...     print(e)
    Volcano Job manifest breaks the schema (theseus/dispatch/schemas/volcano-job.json):
      spec.tasks[0].replicas: '2' is not of type 'integer'
      spec.tasks[0].template.spec.containers: [] should be non-empty
    """
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(manifest), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        lines = [f"  {_path(e.absolute_path) or '(top)'}: {e.message}" for e in errors]
        head = "Volcano Job manifest breaks the schema (theseus/dispatch/schemas/volcano-job.json):"
        raise ManifestError("\n".join([head, *lines]))


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """The manifest as YAML for ``kubectl create -f -`` (what ``--dry-run`` prints).

    >>> print(manifest_yaml({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}), end="")
    apiVersion: batch.volcano.sh/v1alpha1
    kind: Job
    """
    return yaml.dump(manifest, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False, width=float("inf"))


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the pods' script) as ``|`` blocks, readable in a dry run."""


_BlockDumper.add_representer(str, lambda dumper, s: dumper.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(resources.files("theseus.dispatch").joinpath("schemas/volcano-job.json").read_text())


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _under(path: str, folder: str) -> bool:
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")
