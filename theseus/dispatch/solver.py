"""The resource solver: which host of the inventory runs a request.

A ``Request`` asks for ``n`` chips of one kind (``chip``), optionally the
memory and CPUs each process needs (one process per node), and clusters to
prefer or forbid. ``solve`` walks the hosts in priority order (hosts of
preferred clusters first, in the order ``prefer`` names them, then the rest in
inventory order) and returns the first ``Placement`` that fits. When nothing
fits, ``NoFit`` says why each host was rejected. theseus never queues or
schedules by itself: a host "fits" by what the inventory says it has.

How a host is split: an SSH host is one node; SLURM and Volcano hosts give
``chips`` per node and up to ``nodes`` nodes, so a request for more chips
than one node has takes whole nodes; a TPU slice runs whole (the request must
ask for all its chips), one process per worker VM.

>>> from theseus.dispatch.inventory import parse_inventory
>>> inv = parse_inventory('''
... clusters:
...   - {name: lab, root: /r, work_dir: /w}
... hosts:
...   - {name: small, type: ssh, cluster: lab, chip: h100, address: a, chips: 2}
...   - {name: hpc, type: slurm, cluster: lab, chip: h100, chips: 4, nodes: 8}
... ''')
>>> p = solve(inv, Request(chip="h100", n=8))
>>> p.host.name, p.nodes, p.processes, p.chips_per_process
('hpc', 2, 2, 4)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from theseus.dispatch.inventory import Cluster, Host, Inventory, SlurmHost, SshHost, TpuHost, VolcanoHost
from theseus.errors import BadInput

__all__ = ["NoFit", "Placement", "Request", "reject_reason", "solve"]


@dataclass(frozen=True)
class Request:
    """``n`` chips of kind ``chip``; ``memory_gb`` / ``cpus`` are what each process (node) needs.

    >>> Request(chip="cpu", n=2, prefer=["lab"]).prefer
    ('lab',)
    >>> Request(chip="cpu", n=0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a request needs at least one chip, got n=0
    """

    chip: str
    n: int
    memory_gb: float | None = None
    cpus: int | None = None
    prefer: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("prefer", "forbid"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise BadInput(f"Request.{name} is a list of cluster names, got the string {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not isinstance(self.chip, str) or not self.chip:
            raise BadInput(f"a request needs a chip kind (cpu, h100, v5p...), got {self.chip!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise BadInput(f"a request needs at least one chip, got n={self.n!r}")
        for name in ("memory_gb", "cpus"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise BadInput(f"Request.{name} must be a positive number or None, got {value!r}")
        both = sorted(set(self.prefer) & set(self.forbid))
        if both:
            raise BadInput(f"cluster(s) {', '.join(both)} both preferred and forbidden")


@dataclass(frozen=True)
class Placement:
    """Where a request runs: ``processes`` processes (one per node) of ``chips_per_process`` chips each.

    >>> from theseus.dispatch.inventory import Cluster, SshHost
    >>> host = SshHost(name="box", cluster="lab", chip="cpu", address="127.0.0.1", chips=4)
    >>> Placement(host, Cluster(name="lab", root="/r", work_dir="/w"), 1, 1, 4).chips
    4
    """

    host: Host
    cluster: Cluster
    nodes: int
    processes: int
    chips_per_process: int

    @property
    def chips(self) -> int:
        """Chips of the whole placement."""
        return self.processes * self.chips_per_process


class NoFit(BadInput):
    """No host satisfies the request; ``reasons`` maps each host name to why it was rejected.

    >>> from theseus.dispatch.inventory import parse_inventory
    >>> inv = parse_inventory('''
    ... clusters: [{name: lab, root: /r, work_dir: /w}]
    ... hosts: [{name: box, type: ssh, cluster: lab, chip: cpu, address: a, chips: 4}]
    ... ''')
    >>> try:
    ...     solve(inv, Request(chip="cpu", n=8))
    ... except NoFit as e:
    ...     print(e)
    no host fits 8 x cpu:
      box (ssh, cluster lab): has 4 cpu chips, 8 asked
    """

    def __init__(self, request: Request, reasons: dict[str, str]):
        self.request, self.reasons = request, dict(reasons)
        lines = [f"  {name}: {why}" for name, why in self.reasons.items()] or ["  the inventory lists no hosts"]
        super().__init__(f"no host fits {request.n} x {request.chip}:\n" + "\n".join(lines))


def solve(inventory: Inventory, request: Request) -> Placement:
    """The first host, by priority, that fits ``request`` (``NoFit`` listing every rejection otherwise).

    >>> from theseus.dispatch.inventory import parse_inventory
    >>> inv = parse_inventory('''
    ... clusters: [{name: a, root: /a, work_dir: /w}, {name: b, root: /b, work_dir: /w}]
    ... hosts:
    ...   - {name: one, type: ssh, cluster: a, chip: cpu, address: x, chips: 4}
    ...   - {name: two, type: ssh, cluster: b, chip: cpu, address: y, chips: 4}
    ... ''')
    >>> solve(inv, Request(chip="cpu", n=2)).host.name
    'one'
    >>> solve(inv, Request(chip="cpu", n=2, prefer=("b",))).host.name
    'two'
    """
    names = [c.name for c in inventory.clusters]
    for name in (*request.prefer, *request.forbid):
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise BadInput(f"unknown cluster {name!r} in the request{hint} "
                             f"(clusters in {inventory.path}: {', '.join(names) or 'none'})")
    rank = {name: i for i, name in enumerate(request.prefer)}
    # stable: inventory order within a rank
    hosts = sorted(inventory.hosts, key=lambda h: rank.get(h.cluster, len(rank)))
    reasons = {}
    for host in hosts:
        fit = _fit(host, request)
        if isinstance(fit, str):
            reasons[f"{host.name} ({host.type}, cluster {host.cluster})"] = fit
        else:
            nodes, per_process = fit
            return Placement(host, inventory.cluster(host.cluster), nodes, nodes, per_process)
    raise NoFit(request, reasons)


def reject_reason(host: Host, request: Request) -> str | None:
    """Why ``host`` cannot run ``request`` (forbidden clusters aside), or None when it can.

    >>> from theseus.dispatch.inventory import SlurmHost
    >>> hpc = SlurmHost(name="hpc", cluster="lab", chip="h100", chips=4, nodes=2)
    >>> reject_reason(hpc, Request(chip="h100", n=6))
    '6 h100 chips do not fill whole 4-chip nodes'
    >>> reject_reason(hpc, Request(chip="h100", n=8)) is None
    True
    """
    fit = _fit(host, request)
    return fit if isinstance(fit, str) else None


def _fit(host: Host, request: Request) -> str | tuple[int, int]:
    """(nodes, chips per process) of ``host`` for ``request``, or the reason it does not fit."""
    if host.cluster in request.forbid:
        return f"cluster {host.cluster} is forbidden"
    if host.chip != request.chip:
        return f"has {host.chip} chips, {request.chip} asked"
    memory, cpus = _per_node(host)
    for asked, has, what in ((request.memory_gb, memory, "memory_gb"), (request.cpus, cpus, "cpus")):
        if asked is not None and has is None:
            return f"{what} {asked:g} asked but the inventory gives none for this host"
        if asked is not None and has < asked:
            return f"{what} {asked:g} asked per process, has {has:g}"
    if isinstance(host, TpuHost):
        if request.n != host.chips:
            return f"slice {host.accelerator_type} has {host.chips} chips and runs whole, {request.n} asked"
        return host.workers, host.chips // host.workers
    if isinstance(host, SshHost):
        per_node, max_nodes = host.chips, 1
    elif isinstance(host, (SlurmHost, VolcanoHost)):
        per_node, max_nodes = host.chips, host.nodes
    else:
        raise TypeError(f"unknown host kind {type(host).__name__}")
    if request.n <= per_node:
        return 1, request.n
    if max_nodes == 1:
        return f"has {per_node} {host.chip} chips, {request.n} asked"
    if request.n % per_node:
        return f"{request.n} {host.chip} chips do not fill whole {per_node}-chip nodes"
    if request.n // per_node > max_nodes:
        return (f"{request.n} {host.chip} chips need {request.n // per_node} nodes of {per_node}, "
                f"has at most {max_nodes}")
    return request.n // per_node, per_node


def _per_node(host: Host) -> tuple[float | None, float | None]:
    """(memory_gb, cpus) one node of ``host`` offers, None where the inventory does not say."""
    cpus = host.cpus_per_task if isinstance(host, SlurmHost) else getattr(host, "cpus", None)
    return getattr(host, "memory_gb", None), cpus
