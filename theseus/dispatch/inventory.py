"""The inventory: clusters and hosts theseus may launch on, read from YAML.

The file (``~/.theseus.yaml`` unless ``--inventory`` names another) has two
lists. A *cluster* is a place that shares one root: ``name``, ``root`` (an
absolute path or ``gs://`` URL every host of it can write), ``work_dir`` (where
code is unpacked on its hosts: an absolute path, or ``~/...`` in the remote
home), and optionally
``data_dir`` / ``checkpoint_dir``.
A *host* belongs to a cluster and has a ``type``:

- ``ssh``: one machine reached over SSH (``address``, ``port``, ``user``,
  ``identity_file``), with ``chips`` of kind ``chip``, ``memory_gb``, ``cpus``.
- ``slurm``: a SLURM login host (``login``; ``localhost`` runs ``sbatch``
  here), ``partitions``, ``account``, ``qos``, ``time``, ``chips`` per node
  and at most ``nodes`` nodes.
- ``volcano``: a Kubernetes namespace and Volcano ``queue``, an ``image``, a
  ``volume`` (persistent volume claim and mount path), ``chips`` per node,
  ``nodes``.
- ``tpu``: a Cloud TPU VM slice (``zone``, ``project``, ``accelerator_type``
  such as ``v5p-16``, runtime ``version``, ``spot``).

Every host also has ``chip`` (``cpu``, ``h100``, ``v5p``...), ``groups`` (the
uv dependency groups its environment syncs, e.g. ``[cuda12]``) and ``env``
(extra environment variables). The order of hosts is their priority.
Top-level keys starting with ``x-`` are ignored: a place for YAML anchors
that hosts merge (``<<: *gpu``).

Errors name the file, the line and the field, and suggest close matches::

    inventory.yaml:7: host 'gpu-box' field 'chipz': unknown field; did you mean 'chips'?

>>> inv = parse_inventory('''
... clusters:
...   - {name: lab, root: /shared/runs, work_dir: /tmp/theseus}
... hosts:
...   - {name: box, type: ssh, cluster: lab, chip: cpu, address: 127.0.0.1, chips: 4}
... ''')
>>> box = inv.host("box")
>>> box.type, box.address, box.port, inv.cluster(box.cluster).root
('ssh', '127.0.0.1', 22, '/shared/runs')
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

__all__ = [
    "DEFAULT_INVENTORY",
    "Cluster",
    "Host",
    "Inventory",
    "InventoryError",
    "SlurmHost",
    "SshHost",
    "TpuHost",
    "VolcanoHost",
    "VolcanoVolume",
    "load_inventory",
    "parse_inventory",
]

DEFAULT_INVENTORY = "~/.theseus.yaml"


class InventoryError(ValueError):
    """A malformed inventory; the message starts with ``file:line:`` and names the field.

    >>> try:
    ...     parse_inventory("clusters: []\\nhosts: {}", "inv.yaml")
    ... except InventoryError as e:
    ...     print(e)
    inv.yaml:2: hosts: expected a list, got a mapping
    """


def _positive(f: str, v: Any) -> str | None:
    return f"must be positive, got {v:g}" if v is not None and v <= 0 else None


def _port(f: str, v: int) -> str | None:
    return None if 1 <= v <= 65535 else f"must be a port number (1-65535), got {v}"


_SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$")


def _slurm_time(f: str, v: str | None) -> str | None:
    if v is None or _SLURM_TIME.match(v):
        return None
    return f"must be HH:MM:SS or D-HH:MM:SS (quote it in YAML), got {v!r}"


def _absolute(f: str, v: str | None) -> str | None:
    if v is None or v.startswith("/") or v == "~" or v.startswith("~/"):
        return None
    return f"must be an absolute path or start with ~/ (the remote home), got {v!r}"


def _location(f: str, v: str | None) -> str | None:
    if v is None or "://" in v or v.startswith("/"):
        return None
    return f"must be an absolute path or a URL (gs://...) that means the same on every host, got {v!r}"


def _check(*fns):
    return {"check": fns}


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A set of hosts sharing one root.

    >>> Cluster(name="lab", root="/shared/runs", work_dir="/tmp/theseus").data_dir is None
    True
    """

    name: str
    root: str = field(metadata=_check(_location))
    work_dir: str = field(metadata=_check(_absolute))
    data_dir: str | None = field(default=None, metadata=_check(_location))
    checkpoint_dir: str | None = field(default=None, metadata=_check(_location))


@dataclass(frozen=True, kw_only=True)
class Host:
    """Fields every host has; ``type`` names the kind (a class attribute of each subclass).

    >>> sorted(HOST_TYPES)
    ['slurm', 'ssh', 'tpu', 'volcano']
    """

    type: ClassVar[str] = ""
    name: str
    cluster: str
    chip: str
    groups: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SshHost(Host):
    """One machine reached over SSH; ``python`` is the interpreter that bootstraps uv there.

    >>> SshHost(name="box", cluster="lab", chip="cpu", address="10.0.0.2", chips=8).user is None
    True
    """

    type: ClassVar[str] = "ssh"
    address: str
    port: int = field(default=22, metadata=_check(_port))
    user: str | None = None
    identity_file: str | None = None
    chips: int = field(metadata=_check(_positive))
    memory_gb: float | None = field(default=None, metadata=_check(_positive))
    cpus: int | None = field(default=None, metadata=_check(_positive))
    python: str = "python3"


@dataclass(frozen=True, kw_only=True)
class SlurmHost(Host):
    """A SLURM cluster behind a login host (``localhost``: run ``sbatch`` here).

    >>> SlurmHost(name="hpc", cluster="lab", chip="h100", login="login.hpc", chips=4, nodes=16).time
    '01:00:00'
    """

    type: ClassVar[str] = "slurm"
    login: str = "localhost"
    port: int = field(default=22, metadata=_check(_port))
    user: str | None = None
    identity_file: str | None = None
    partitions: tuple[str, ...] = ()
    account: str | None = None
    qos: str | None = None
    time: str = field(default="01:00:00", metadata=_check(_slurm_time))
    chips: int = field(metadata=_check(_positive))
    nodes: int = field(default=1, metadata=_check(_positive))
    cpus_per_task: int | None = field(default=None, metadata=_check(_positive))
    memory_gb: float | None = field(default=None, metadata=_check(_positive))


@dataclass(frozen=True, kw_only=True)
class VolcanoVolume:
    """A persistent volume claim and where pods mount it.

    >>> VolcanoVolume(claim="theseus-data", mount_path="/mnt/theseus").claim
    'theseus-data'
    """

    claim: str
    mount_path: str


@dataclass(frozen=True, kw_only=True)
class VolcanoHost(Host):
    """A Kubernetes namespace with a Volcano queue; ``chip_resource`` is the extended resource of a chip.

    >>> v = VolcanoHost(name="k8s", cluster="lab", chip="h100", namespace="ml", image="ghcr.io/me/theseus:1",
    ...                 volume=VolcanoVolume(claim="runs", mount_path="/mnt/runs"), chips=8, nodes=4)
    >>> v.queue, v.chip_resource
    ('default', 'nvidia.com/gpu')
    """

    type: ClassVar[str] = "volcano"
    namespace: str
    queue: str = "default"
    image: str
    volume: VolcanoVolume
    chips: int = field(metadata=_check(_positive))
    nodes: int = field(default=1, metadata=_check(_positive))
    memory_gb: float | None = field(default=None, metadata=_check(_positive))
    cpus: int | None = field(default=None, metadata=_check(_positive))
    chip_resource: str = "nvidia.com/gpu"


# accelerator-type prefix -> (JAX devices per unit of the suffix, JAX devices per worker VM,
# largest slice that is one VM). v2-v5p suffixes count TensorCores (v4/v5p pair two per
# device); v5e ("v5litepod") and v6e suffixes count chips.
_TPU_GENERATIONS = {
    "v2": (1.0, 8, 8),
    "v3": (1.0, 8, 8),
    "v4": (0.5, 4, 4),
    "v5p": (0.5, 4, 4),
    "v5litepod": (1.0, 4, 8),
    "v6e": (1.0, 4, 8),
}
_TPU_TYPE = re.compile(r"^([a-z0-9]+)-(\d+)$")


def _tpu_shape(accelerator_type: str) -> tuple[int, int]:
    """(JAX devices, worker VMs) of a Cloud TPU accelerator type.

    >>> _tpu_shape("v5p-16"), _tpu_shape("v5litepod-8"), _tpu_shape("v6e-16")
    ((8, 2), (8, 1), (16, 4))
    """
    m = _TPU_TYPE.match(accelerator_type)
    if not m or m.group(1) not in _TPU_GENERATIONS:
        known = ", ".join(f"{g}-N" for g in _TPU_GENERATIONS)
        raise ValueError(f"unknown TPU accelerator type {accelerator_type!r} (known: {known})")
    per_unit, per_worker, single = _TPU_GENERATIONS[m.group(1)]
    devices = int(int(m.group(2)) * per_unit)
    if devices < 1:
        raise ValueError(f"TPU accelerator type {accelerator_type!r} has no whole device")
    if devices <= single:
        return devices, 1
    if devices % per_worker:
        raise ValueError(f"TPU accelerator type {accelerator_type!r}: {devices} devices do not fill "
                         f"whole {per_worker}-device VMs")
    return devices, devices // per_worker


def _tpu_type(f: str, v: str) -> str | None:
    try:
        _tpu_shape(v)
    except ValueError as e:
        return str(e)
    return None


@dataclass(frozen=True, kw_only=True)
class TpuHost(Host):
    """A Cloud TPU VM slice; ``chips`` and ``workers`` follow from ``accelerator_type``.

    >>> t = TpuHost(name="pod", cluster="gcp", chip="v5p", zone="us-east5-a", project="p",
    ...             accelerator_type="v5p-16", version="v2-alpha-tpuv5")
    >>> t.chips, t.workers, t.spot
    (8, 2, False)
    """

    type: ClassVar[str] = "tpu"
    zone: str
    project: str
    accelerator_type: str = field(metadata=_check(_tpu_type))
    version: str
    spot: bool = False
    memory_gb: float | None = field(default=None, metadata=_check(_positive))
    cpus: int | None = field(default=None, metadata=_check(_positive))

    @property
    def chips(self) -> int:
        """JAX devices of the whole slice."""
        return _tpu_shape(self.accelerator_type)[0]

    @property
    def workers(self) -> int:
        """Worker VMs of the slice (one process each)."""
        return _tpu_shape(self.accelerator_type)[1]


HOST_TYPES: dict[str, type[Host]] = {c.type: c for c in (SshHost, SlurmHost, VolcanoHost, TpuHost)}


@dataclass(frozen=True)
class Inventory:
    """Clusters and hosts (in priority order) read from ``path``.

    >>> inv = Inventory(clusters=(Cluster(name="lab", root="/r", work_dir="/w"),), hosts=())
    >>> inv.cluster("lab").work_dir
    '/w'
    >>> inv.cluster("lba")
    Traceback (most recent call last):
    ...
    KeyError: "no cluster 'lba' in the inventory (clusters: lab)"
    """

    clusters: tuple[Cluster, ...]
    hosts: tuple[Host, ...]
    path: str = "<string>"

    def cluster(self, name: str) -> Cluster:
        """The cluster called ``name`` (``KeyError`` listing the names otherwise)."""
        return _named(self.clusters, name, "cluster")

    def host(self, name: str) -> Host:
        """The host called ``name`` (``KeyError`` listing the names otherwise)."""
        return _named(self.hosts, name, "host")


def _named(items, name: str, kind: str):
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"no {kind} {name!r} in the inventory ({kind}s: {', '.join(i.name for i in items) or 'none'})")


def load_inventory(path: str | os.PathLike | None = None) -> Inventory:
    """Read and check the inventory at ``path`` (default ``~/.theseus.yaml``).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "inv.yaml"
    >>> _ = p.write_text("clusters: [{name: lab, root: /r, work_dir: /w}]\\nhosts: []\\n")
    >>> load_inventory(p).clusters[0].name
    'lab'
    >>> load_inventory(p.with_name("missing.yaml"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: no inventory at .../missing.yaml: write one (see theseus.dispatch.inventory) or pass --inventory PATH
    """  # noqa: E501 - a doctest's expected output, printed on one line
    p = Path(os.path.expanduser(os.fspath(path if path is not None else DEFAULT_INVENTORY)))
    if not p.is_file():
        raise FileNotFoundError(f"no inventory at {p}: write one (see theseus.dispatch.inventory) "
                                "or pass --inventory PATH")
    return parse_inventory(p.read_text(), str(p))


def parse_inventory(text: str, path: str = "<string>") -> Inventory:
    """Check the inventory YAML ``text``; ``path`` names it in error messages.

    >>> try:
    ...     parse_inventory("clusters: []\\nhosts:\\n  - {name: a, type: sssh}\\n", "inv.yaml")
    ... except InventoryError as e:
    ...     print(e)
    inv.yaml:3: host 'a' field 'type': unknown host type 'sssh'; did you mean 'ssh'? (types: ssh, slurm, volcano, tpu)
    """
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as e:
        mark, context_mark = getattr(e, "problem_mark", None), getattr(e, "context_mark", None)
        if mark is None or (context_mark is not None and mark.line >= len(text.splitlines())):
            mark = context_mark  # the problem is the end of the file: point at what was left open
        line = f"{mark.line + 1}:" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        if getattr(e, "context", None) and context_mark:
            problem = f"{problem} ({e.context} at line {context_mark.line + 1})"
        raise InventoryError(f"{path}:{line} invalid YAML: {problem}") from None
    try:
        return _Reader(loader, path).inventory(root)
    finally:
        loader.dispose()


class _Reader:
    """Turns the composed YAML nodes into dataclasses, keeping marks for error messages."""

    def __init__(self, loader: yaml.SafeLoader, path: str):
        self.loader, self.path = loader, path

    def error(self, node: yaml.Node | None, where: str, problem: str) -> InventoryError:
        line = node.start_mark.line + 1 if node is not None else 1
        return InventoryError(f"{self.path}:{line}: {where}: {problem}")

    def inventory(self, root: yaml.Node | None) -> Inventory:
        if root is None:
            raise self.error(None, "inventory", "the file is empty (expected 'clusters:' and 'hosts:')")
        if isinstance(root, yaml.MappingNode):  # `x-...` keys hold YAML anchors for the rest of the file
            root.value = [(k, v) for k, v in root.value
                          if not (isinstance(k, yaml.ScalarNode) and str(k.value).startswith("x-"))]
        top = self.mapping(root, "inventory", {"clusters", "hosts"})
        for key in ("clusters", "hosts"):
            if key not in top:
                raise self.error(root, "inventory", f"missing '{key}:' (a list, may be empty)")
        cluster_nodes = self.items(top["clusters"][1], "clusters")
        clusters = tuple(self.record(Cluster, n, _label(n, "cluster", i)) for i, n in enumerate(cluster_nodes))
        self.unique(clusters, top["clusters"][1], "cluster")
        names = [c.name for c in clusters]
        hosts = []
        for i, node in enumerate(self.items(top["hosts"][1], "hosts")):
            host = self.host(node, i)
            if host.cluster not in names:
                value = self.mapping(node, "", None)["cluster"][1]
                raise self.error(value, f"host '{host.name}' field 'cluster'", _unknown("cluster", host.cluster, names))
            hosts.append(host)
        self.unique(hosts, top["hosts"][1], "host")
        return Inventory(clusters=clusters, hosts=tuple(hosts), path=self.path)

    def host(self, node: yaml.Node, i: int) -> Host:
        label = _label(node, "host", i)
        entries = self.mapping(node, label, None)
        if "type" not in entries:
            raise self.error(node, label, f"missing field 'type' (one of {', '.join(HOST_TYPES)})")
        kind_node = entries["type"][1]
        kind = kind_node.value if isinstance(kind_node, yaml.ScalarNode) else None
        if kind not in HOST_TYPES:
            raise self.error(kind_node, f"{label} field 'type'", _unknown("host type", kind, list(HOST_TYPES), "types"))
        return self.record(HOST_TYPES[kind], node, label, skip={"type"})

    def unique(self, items, node: yaml.Node, kind: str) -> None:
        seen = set()
        for item, child in zip(items, node.value):
            if item.name in seen:
                raise self.error(child, f"{kind} {item.name!r}", f"duplicate {kind} name")
            seen.add(item.name)

    def items(self, node: yaml.Node, where: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, where, f"expected a list, got {_kind(node)}")
        return node.value

    def mapping(self, node: yaml.Node, where: str, known: set[str] | None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, where, f"expected a mapping, got {_kind(node)}")
        self.loader.flatten_mapping(node)  # YAML merge keys (`<<: *defaults`)
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.error(key_node, where, "keys must be plain names")
            if known is not None and key not in known:
                raise self.error(key_node, f"{where} field {key!r}",
                                 _unknown("field", key, sorted(known), "", quote=False))
            if key in out:
                raise self.error(key_node, f"{where} field {key!r}", "given twice")
            out[key] = (key_node, value_node)
        return out

    def record(self, cls: type, node: yaml.Node, label: str, skip: frozenset[str] | set[str] = frozenset()):
        """An instance of the dataclass ``cls`` from a mapping node, every field checked."""
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hints = typing.get_type_hints(cls)
        entries = self.mapping(node, label, set(fields) | set(skip))
        required = [n for n, f in fields.items() if f.default is f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in entries]
        if missing:
            s = "s" if len(missing) > 1 else ""
            raise self.error(node, label, f"missing field{s} {', '.join(repr(m) for m in missing)}")
        values = {}
        for key, (_, value_node) in entries.items():
            if key in skip:
                continue
            where = f"{label} field {key!r}"
            value = self.value(hints[key], value_node, where)
            for check in fields[key].metadata.get("check", ()):
                problem = check(key, value)
                if problem:
                    raise self.error(value_node, where, problem)
            values[key] = value
        return cls(**values)

    def value(self, hint: Any, node: yaml.Node, where: str) -> Any:
        """``node`` as ``hint``: str, int, float, bool, Optional, tuple[str, ...], dict[str, str] or a dataclass."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            if _is_null(node):
                return None
            (hint,) = [a for a in args if a is not type(None)]
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            return self.record(hint, node, where)
        if origin is tuple:
            return tuple(self.value(str, item, f"{where} item #{i + 1}")
                         for i, item in enumerate(self.items(node, where)))
        if origin is dict:
            entries = self.mapping(node, where, None)
            out = {}
            for key, (_, item) in entries.items():
                if not isinstance(item, yaml.ScalarNode) or _is_null(item) or isinstance(self.scalar(item), bool):
                    raise self.error(item, f"{where} key {key!r}",
                                     f"expected a string value, got {_kind(item)} (quote it)")
                out[key] = item.value
            return out
        if not isinstance(node, yaml.ScalarNode) or _is_null(node):
            raise self.error(node, where, f"expected {_NAMES[hint]}, got {_kind(node)}")
        if hint is str:
            return node.value  # the text as written: `version: 2.0` or `time: 12:00:00` stay strings
        value = self.scalar(node)
        ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              bool: lambda v: isinstance(v, bool)}[hint]
        if not ok(value):
            raise self.error(node, where, f"expected {_NAMES[hint]}, got {node.value!r}")
        return float(value) if hint is float else value

    def scalar(self, node: yaml.ScalarNode) -> Any:
        return self.loader.construct_object(node, deep=True)


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return "nothing" if _is_null(node) else repr(node.value)


def _label(node: yaml.Node, kind: str, i: int) -> str:
    """``host 'gpu-box'`` when the entry has a name, else ``host #2``."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if (isinstance(k, yaml.ScalarNode) and k.value == "name" and isinstance(v, yaml.ScalarNode)
                    and not _is_null(v)):
                return f"{kind} {v.value!r}"
    return f"{kind} #{i + 1}"


def _unknown(what: str, word: str | None, choices: list[str], plural: str = "", quote: bool = True) -> str:
    """``unknown cluster 'lba'; did you mean 'lab'? (clusters: lab, gcp)``."""
    named = f" {word!r}" if quote else ""
    return f"unknown {what}{named}{_hint(str(word), choices)} ({plural or what + 's'}: {', '.join(choices) or 'none'})"


def _hint(word: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""
