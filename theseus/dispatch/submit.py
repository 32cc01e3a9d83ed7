"""Submit a run to a host of the inventory: solve, package, ship, bootstrap (or print the plan).

``submit(spec, inventory, request)``:

1. picks the host with the solver (``NoFit`` says why each host was rejected);
2. points the spec at the host's cluster: its root (every process writes there; a
   run resumed from a node must come from that same root) and, unless the spec
   names some, the host's uv groups;
3. checks the spec (unknown job key, invalid config): bad input raises before
   anything starts;
4. packages the code at the current commit (``package_code``; a dirty tree is
   refused unless ``allow_dirty``) and records its revision in the spec;
5. with ``dry_run=True`` returns the plan only (for an SSH host the bootstrap
   script, for SLURM the sbatch script, for Volcano the Job manifest, for a TPU
   slice the gcloud commands); otherwise starts the run with the host's launcher
   (``launch_ssh`` / ``launch_slurm``) and waits for it. Volcano and TPU launches
   are generated and checked here, never run: submit them with ``--dry-run`` and
   apply the printed manifest / commands.

``theseus submit JOB_KEY RUN_NAME [key=value ...] --chip cpu --n 2 [--cluster C] [--dry-run]``
and ``q.submit(chip=..., n=...)`` after ``q.build(...)`` both come here.

>>> from theseus.dispatch.inventory import parse_inventory
>>> from theseus.dispatch.solver import Request
>>> from theseus.dispatch.spec import LaunchSpec
>>> inv = parse_inventory('''
... clusters: [{name: lab, root: /shared/runs, work_dir: /scratch/theseus}]
... hosts: [{name: hpc, type: slurm, cluster: lab, chip: cpu, chips: 4, nodes: 2, partitions: [debug]}]
... ''')
>>> spec = LaunchSpec("data/tokenize/pydoc", "tok", "data:\\n  max_samples: 10\\n", "/shared/runs")
>>> plan = submit(spec, inv, Request(chip="cpu", n=4), dry_run=True, allow_dirty=True)
>>> plan.placement.host.name, plan.spec.root, "#SBATCH --partition=debug" in plan.plan
('hpc', '/shared/runs', True)
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from theseus.dispatch.bootstrap import BadInput, check_spec
from theseus.dispatch.inventory import Inventory
from theseus.dispatch.package import package_code
from theseus.dispatch.remote import absolute
from theseus.dispatch.slurm import launch_slurm, sbatch_script
from theseus.dispatch.solver import Placement, Request, solve
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.ssh import launch_ssh
from theseus.dispatch.stage import stage_files
from theseus.dispatch.tpu import format_commands, tpu_commands
from theseus.store import Store

__all__ = ["NotRunHere", "Submission", "default_repo", "plan_text", "request_for", "submit"]


class NotRunHere(BadInput):
    """A Volcano or TPU host without ``dry_run``: those launches are generated and checked, not run."""


@dataclasses.dataclass(frozen=True)
class Submission:
    """What ``submit`` did: the final spec, the placement, the plan text and the launcher's result (None: dry run).

    >>> done = Submission(LaunchSpec("k/x", "r", "", "/r", nonce="abcdef"), None, "plan")
    >>> done.nonce, done.launched
    ('abcdef', None)
    """

    spec: LaunchSpec
    placement: Placement
    plan: str
    launched: Any = None

    @property
    def nonce(self) -> str:
        """The nonce of the submitted run (``theseus logs ROOT NONCE``)."""
        return self.spec.nonce


def default_repo() -> str:
    """The checkout the running theseus comes from: the code that gets shipped by default.

    >>> os.path.isdir(default_repo())
    True
    """
    return str(Path(__file__).resolve().parents[2])


def request_for(inventory: Inventory, chip: str, n: int, clusters: str | tuple[str, ...] | list[str] = (),
                memory_gb: float | None = None, cpus: int | None = None) -> Request:
    """A solver request for ``n`` x ``chip``, restricted to ``clusters`` (in that priority) when named.

    >>> from theseus.dispatch.inventory import parse_inventory
    >>> inv = parse_inventory("clusters: [{name: a, root: /a, work_dir: /w}, {name: b, root: /b, work_dir: /w}]"
    ...                       "\\nhosts: []")
    >>> r = request_for(inv, "cpu", 2, ["b"])
    >>> r.prefer, r.forbid
    (('b',), ('a',))
    >>> request_for(inv, "cpu", 2, "c")
    Traceback (most recent call last):
    ...
    theseus.errors.UnknownName: no cluster 'c' in the inventory (clusters: a, b)
    """
    clusters = (clusters,) if isinstance(clusters, str) else tuple(clusters or ())
    for name in clusters:
        inventory.cluster(name)
    forbid = tuple(c.name for c in inventory.clusters if clusters and c.name not in clusters)
    return Request(chip=chip, n=n, memory_gb=memory_gb, cpus=cpus, prefer=clusters, forbid=forbid)


def _same_root(a: str, b: str) -> bool:
    return Store(a).root == Store(b).root


def _placed(spec: LaunchSpec, placement: Placement) -> LaunchSpec:
    """The spec pointed at the placement's cluster root, with the host's groups when it names none."""
    root = placement.cluster.root
    if spec.base_node is not None and not _same_root(spec.root, root):
        raise BadInput(f"the run restores node {spec.base_node} of root {spec.root}, but host "
                       f"{placement.host.name!r} (cluster {placement.cluster.name!r}) writes to root {root}: "
                       "resume from a node of that root (quick(root).find()...)")
    return spec.replace(root=root, groups=spec.groups or tuple(placement.host.groups))


def plan_text(spec: LaunchSpec, placement: Placement, tarball: bytes, home: str | None = None) -> str:
    """The human-readable plan of a submission: where, what, and the host type's script/manifest/commands.

    ``home`` is the home folder a ``~`` in the cluster's ``work_dir`` stands for on the host, as the
    launch resolves it (`theseus.dispatch.remote.absolute`): the printed script then holds the paths
    the real submit uses (``submit`` passes this machine's home for a SLURM host whose login is
    ``localhost``).

    >>> from theseus.dispatch.inventory import Cluster, SshHost
    >>> host = SshHost(name="box", cluster="lab", chip="cpu", address="10.0.0.2", chips=4)
    >>> spec = LaunchSpec("k/x", "r", "", "/r", nonce="abcdef", revision="abc")
    >>> print(plan_text(spec, Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 2, 2),
    ...                 b"").splitlines()[0])
    submit | k/x general.default.r nonce abcdef -> ssh host box (cluster lab): 1 node(s), 2 process(es) x 2 cpu
    >>> from theseus.dispatch.inventory import SlurmHost
    >>> hpc = SlurmHost(name="hpc", cluster="lab", chip="cpu", chips=4)
    >>> lab = Cluster(name="lab", root="/r", work_dir="~/tw")
    >>> plan = plan_text(spec, Placement(hpc, lab, 1, 1, 4), b"", "/home/me")
    >>> "#SBATCH --chdir=/home/me/tw/launches/abcdef" in plan and "~" not in plan
    True
    """
    if home is not None:
        work_dir = absolute(placement.cluster.work_dir, home)
        placement = dataclasses.replace(placement, cluster=dataclasses.replace(placement.cluster, work_dir=work_dir))
    host, cluster = placement.host, placement.cluster
    head = [
        f"submit | {spec.job_key} {spec.first_node().name} nonce {spec.nonce} -> {host.type} host {host.name} "
        f"(cluster {cluster.name}): {placement.nodes} node(s), {placement.processes} process(es) x "
        f"{placement.chips_per_process} {host.chip}",
        f"root: {spec.root}",
        f"code: {spec.revision} ({len(tarball) / 1024:.0f} KiB); uv groups: {', '.join(spec.groups) or 'default'}",
    ]
    if spec.experiments:  # shipped in the spec, imported by every process before the job is built
        head.append(f"experiments: {', '.join(e.origin for e in spec.experiments)}")
    if host.type == "ssh":
        stage = f"{cluster.work_dir}/launches/{spec.nonce}-<token>"
        script = stage_files(spec, b"", cluster.work_dir, stage, host.python)["bootstrap.sh"].decode()
        user = f"{host.user}@" if host.user else ""
        body = [f"ship code.tar.gz, spec.json and bootstrap.sh to {user}{host.address}:{stage} (port {host.port}), "
                f"then start `bash bootstrap.sh` {placement.processes} time(s):", script]
    elif host.type == "slurm":
        body = [f"sbatch on {host.login}:", sbatch_script(spec, placement)]
    elif host.type == "volcano":
        # lazily: the manifest's schema check loads jsonschema, which only a Volcano plan needs
        from theseus.dispatch.volcano import manifest_yaml, volcano_manifest

        tar = f"{cluster.work_dir}/{spec.revision}.tar.gz"
        body = [f"copy the code tarball to {tar} on volume {host.volume.claim}, then `kubectl create -f` this Job:",
                manifest_yaml(volcano_manifest(spec, placement, tarball=tar))]
    else:
        tar = f"theseus-{spec.revision}.tar.gz"
        body = [f"write the code tarball to {tar} (theseus.dispatch.package.package_code), then run:",
                format_commands(tpu_commands(spec, placement, tarball=tar))]
    return "\n".join(head + body).rstrip() + "\n"


def submit(spec: LaunchSpec, inventory: Inventory, request: Request, dry_run: bool = False, *,
           repo: str | os.PathLike | None = None, allow_dirty: bool = False, **launcher: Any) -> Submission:
    """Place ``spec`` by ``request`` on a host of ``inventory`` and run it there (see the module docstring).

    ``repo`` is the git checkout to ship (default: the one theseus runs from);
    ``launcher`` passes options to the host's launcher (``timeout``, ``stream``, ``uv``, ``known_hosts``...);
    the plan's first line goes to its ``stream`` too (standard error unless given).

    >>> from theseus.dispatch.inventory import parse_inventory
    >>> inv = parse_inventory('''
    ... clusters: [{name: lab, root: /r, work_dir: /w}]
    ... hosts: [{name: hpc, type: slurm, cluster: lab, chip: cpu, chips: 1, nodes: 2}]
    ... ''')
    >>> spec = LaunchSpec("gpt/train/pretrain", "r", "training:\\n  tokenz: 5\\n", "/r")
    >>> try:
    ...     submit(spec, inv, Request(chip="cpu", n=2), dry_run=True)
    ... except BadInput as e:
    ...     print(str(e).split(";")[0])
    unknown config key 'training.tokenz'
    >>> plan = submit(spec.replace(config_yaml=""), inv, Request(chip="cpu", n=2), dry_run=True, allow_dirty=True)
    >>> plan.placement.processes  # autobatch on 2 processes: each probes, all use the smallest size
    2
    """
    placement = solve(inventory, request)
    spec = _placed(spec, placement)
    check_spec(spec, placement.processes)
    host = placement.host
    if not dry_run and host.type in ("volcano", "tpu"):
        raise NotRunHere(f"{host.type} host {host.name!r}: theseus generates and checks {host.type} launches but does "
                         "not run them; use --dry-run (dry_run=True) and apply the printed "
                         f"{'manifest' if host.type == 'volcano' else 'commands'}")
    revision, tarball = package_code(repo or default_repo(), allow_dirty=allow_dirty)
    spec = spec.replace(revision=revision)
    # the login's home, where it is this machine's: what the launch resolves a `~` in work_dir to
    home = os.path.expanduser("~") if host.type == "slurm" and host.login == "localhost" else None
    plan = plan_text(spec, placement, tarball, home)
    if dry_run:
        return Submission(spec, placement, plan)
    stream = launcher.setdefault("stream", sys.stderr)
    if stream is not None:
        stream.write(plan.split("\n", 3)[0] + "\n")
    launch = launch_ssh if host.type == "ssh" else launch_slurm
    launched = launch(spec, placement, tarball, **launcher)
    return Submission(spec, placement, plan, launched)
