"""Cloud TPU VMs: the ``gcloud compute tpus tpu-vm`` commands of a launch.

``tpu_commands(spec, placement, tarball=...)`` lists, in order, the commands
that run ``spec`` on a fresh slice of a ``TpuHost``:

1. ``create`` the slice (``--accelerator-type``, ``--version``, ``--spot``);
2. ``ssh --worker=all`` to make the cluster's ``work_dir`` on every worker;
3. ``scp --worker=all`` the code tarball there;
4. ``ssh --worker=all --command`` the launch script: each worker reads its index
   (``agent-worker-number``) and worker 0's address (``worker-network-endpoints``)
   from the TPU VM metadata server, as ``jax.distributed`` does on Cloud TPU,
   exports them as ``THESEUS_PROCESS_ID`` / ``THESEUS_COORDINATOR`` (port 8476),
   writes the inlined spec and runs the shared bootstrap script;
5. ``delete`` the slice (``keep=True`` leaves it); run it even when step 4 fails.

Nothing here runs them: ``--dry-run`` prints ``format_commands(commands)``.

>>> from theseus.dispatch.inventory import Cluster, TpuHost
>>> from theseus.dispatch.solver import Placement
>>> from theseus.dispatch.spec import LaunchSpec
>>> host = TpuHost(name="pod", cluster="gcp", chip="v5p", zone="us-east5-a", project="my-proj",
...                accelerator_type="v5p-16", version="v2-alpha-tpuv5", spot=True, groups=("tpu",))
>>> cluster = Cluster(name="gcp", root="gs://bucket/runs", work_dir="/tmp/theseus")
>>> spec = LaunchSpec("gpt/train/pretrain", "train-gpt", "", "gs://bucket/runs", nonce="949e88", revision="abc123")
>>> commands = tpu_commands(spec, Placement(host, cluster, 2, 2, 4), tarball="/tmp/abc123.tar.gz")
>>> print(shlex.join(commands[0]))
gcloud compute tpus tpu-vm create theseus-train-gpt-949e88-0 --zone=us-east5-a --project=my-proj --accelerator-type=v5p-16 --version=v2-alpha-tpuv5 --spot
>>> [c[4] for c in commands]
['create', 'ssh', 'scp', 'ssh', 'delete']
"""  # noqa: E501 - a doctest's expected output, printed on one line

from __future__ import annotations

import posixpath
import shlex

from theseus.dispatch.inventory import TpuHost
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.stage import COORDINATOR_PORT, job_name, launch_script
from theseus.errors import BadInput

__all__ = ["format_commands", "tpu_commands", "worker_preamble"]

GCLOUD = ["gcloud", "compute", "tpus", "tpu-vm"]
METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes"


def tpu_commands(spec: LaunchSpec, placement: Placement, *, tarball: str, keep: bool = False) -> list[list[str]]:
    """The gcloud commands (argument lists) that run ``spec`` on ``placement``'s TPU slice.

    ``tarball`` is the local path of the ``package_code`` tar.gz; ``keep=True``
    leaves out the final ``delete``.

    >>> from theseus.dispatch.inventory import Cluster, SshHost
    >>> ssh = SshHost(name="box", cluster="lab", chip="cpu", address="a", chips=4)
    >>> spec = LaunchSpec("k/x", "r", "", "/r", nonce="abcdef", revision="abc")
    >>> tpu_commands(spec, Placement(ssh, Cluster(name="lab", root="/r", work_dir="/w"), 1, 1, 4), tarball="t")
    Traceback (most recent call last):
    ...
    TypeError: TPU commands need a tpu host, got ssh host 'box'
    """
    host, cluster = placement.host, placement.cluster
    if not isinstance(host, TpuHost):
        raise TypeError(f"TPU commands need a tpu host, got {host.type} host {host.name!r}")
    if placement.processes != host.workers:
        raise BadInput(f"slice {host.accelerator_type} has {host.workers} workers, the placement asks for "
                         f"{placement.processes} processes (one per worker)")
    if not cluster.work_dir.startswith("/"):
        raise BadInput(f"TPU workers need an absolute work_dir, got {cluster.work_dir!r} "
                         f"in cluster {cluster.name!r}: "
                         "the commands are written before any worker exists, so ~ cannot be resolved "
                         "(try /tmp/theseus)")
    name = job_name(spec)
    where = [f"--zone={host.zone}", f"--project={host.project}"]
    remote = posixpath.join(cluster.work_dir, f"{spec.revision}.tar.gz")
    script = launch_script(spec, cluster.work_dir, remote, worker_preamble(placement.processes), env=host.env)
    commands = [
        [*GCLOUD, "create", name, *where, f"--accelerator-type={host.accelerator_type}", f"--version={host.version}",
         *(["--spot"] if host.spot else [])],
        [*GCLOUD, "ssh", name, *where, "--worker=all", f"--command=mkdir -p {shlex.quote(cluster.work_dir)}"],
        [*GCLOUD, "scp", tarball, f"{name}:{remote}", *where, "--worker=all"],
        [*GCLOUD, "ssh", name, *where, "--worker=all", f"--command=bash -c {shlex.quote(script)}"],
    ]
    if not keep:
        commands.append([*GCLOUD, "delete", name, *where, "--quiet"])
    return commands


def worker_preamble(processes: int) -> list[str]:
    """Shell lines that set ``THESEUS_NUM_PROCESSES`` / ``_PROCESS_ID`` / ``_COORDINATOR`` on a TPU worker.

    >>> worker_preamble(1)
    ['export THESEUS_NUM_PROCESSES=1']
    >>> print("\\n".join(worker_preamble(2)[1:]))
    meta() { curl -sf -H 'Metadata-Flavor: Google' "http://metadata.google.internal/.../attributes/$1"; }
    THESEUS_PROCESS_ID="$(meta agent-worker-number)"
    FIRST="$(meta worker-network-endpoints | cut -d, -f1 | cut -d: -f3)"
    export THESEUS_PROCESS_ID="${THESEUS_PROCESS_ID:?no worker number}"
    export THESEUS_COORDINATOR="${FIRST:?no worker 0 address}:8476"
    """
    lines = [f"export THESEUS_NUM_PROCESSES={processes}"]
    if processes > 1:
        lines += [  # plain assignments, so `set -e` stops the script when the metadata server fails
            f"meta() {{ curl -sf -H 'Metadata-Flavor: Google' \"{METADATA}/$1\"; }}",
            'THESEUS_PROCESS_ID="$(meta agent-worker-number)"',
            'FIRST="$(meta worker-network-endpoints | cut -d, -f1 | cut -d: -f3)"',
            'export THESEUS_PROCESS_ID="${THESEUS_PROCESS_ID:?no worker number}"',
            f'export THESEUS_COORDINATOR="${{FIRST:?no worker 0 address}}:{COORDINATOR_PORT}"',
        ]
    return lines


def format_commands(commands: list[list[str]]) -> str:
    """The commands as shell lines (what ``--dry-run`` prints).

    >>> print(format_commands([["gcloud", "compute", "tpus", "tpu-vm", "delete", "x", "--quiet"]]))
    gcloud compute tpus tpu-vm delete x --quiet
    """
    return "\n".join(shlex.join(c) for c in commands)
