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

Field types, bounds and path forms are the JSON Schema ``schemas/inventory.json``
(checked with jsonschema); names, cluster references and TPU types are checked
here. Errors name the file, the line and the field, and suggest close matches::

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
import functools
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import yaml

from theseus.errors import BadInput, MissingFile, UnknownName

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


class InventoryError(BadInput):
    """A malformed inventory; the message starts with ``file:line:`` and names the field.

    >>> try:
    ...     parse_inventory("clusters: []\\nhosts: {}", "inv.yaml")
    ... except InventoryError as e:
    ...     print(e)
    inv.yaml:2: hosts: expected a list, got a mapping
    """


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A set of hosts sharing one root.

    >>> Cluster(name="lab", root="/shared/runs", work_dir="/tmp/theseus").data_dir is None
    True
    """

    name: str
    root: str
    work_dir: str
    data_dir: str | None = None
    checkpoint_dir: str | None = None


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
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    chips: int
    memory_gb: float | None = None
    cpus: int | None = None
    python: str = "python3"


@dataclass(frozen=True, kw_only=True)
class SlurmHost(Host):
    """A SLURM cluster behind a login host (``localhost``: run ``sbatch`` here).

    >>> SlurmHost(name="hpc", cluster="lab", chip="h100", login="login.hpc", chips=4, nodes=16).time
    '01:00:00'
    """

    type: ClassVar[str] = "slurm"
    login: str = "localhost"
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    partitions: tuple[str, ...] = ()
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    chips: int
    nodes: int = 1
    cpus_per_task: int | None = None
    memory_gb: float | None = None


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
    chips: int
    nodes: int = 1
    memory_gb: float | None = None
    cpus: int | None = None
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
        raise BadInput(f"unknown TPU accelerator type {accelerator_type!r} (known: {known})")
    per_unit, per_worker, single = _TPU_GENERATIONS[m.group(1)]
    devices = int(int(m.group(2)) * per_unit)
    if devices < 1:
        raise BadInput(f"TPU accelerator type {accelerator_type!r} has no whole device")
    if devices <= single:
        return devices, 1
    if devices % per_worker:
        raise BadInput(f"TPU accelerator type {accelerator_type!r}: {devices} devices do not fill "
                         f"whole {per_worker}-device VMs")
    return devices, devices // per_worker


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
    accelerator_type: str
    version: str
    spot: bool = False
    memory_gb: float | None = None
    cpus: int | None = None

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
    theseus.errors.UnknownName: no cluster 'lba' in the inventory (clusters: lab)
    """

    clusters: tuple[Cluster, ...]
    hosts: tuple[Host, ...]
    path: str = "<string>"

    def cluster(self, name: str) -> Cluster:
        """The cluster called ``name`` (``UnknownName``, a ``KeyError``, listing the names otherwise)."""
        return _named(self.clusters, name, "cluster")

    def host(self, name: str) -> Host:
        """The host called ``name`` (``UnknownName``, a ``KeyError``, listing the names otherwise)."""
        return _named(self.hosts, name, "host")


def _named(items, name: str, kind: str):
    for item in items:
        if item.name == name:
            return item
    raise UnknownName(f"no {kind} {name!r} in the inventory ({kind}s: {', '.join(i.name for i in items) or 'none'})")


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
    theseus.errors.MissingFile: no inventory at .../missing.yaml: write one (see theseus.dispatch.inventory) or pass --inventory PATH
    """  # noqa: E501 - a doctest's expected output, printed on one line
    p = Path(os.path.expanduser(os.fspath(path if path is not None else DEFAULT_INVENTORY)))
    if not p.is_file():
        raise MissingFile(f"no inventory at {p}: write one (see theseus.dispatch.inventory) "
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
        if root is None:
            raise InventoryError(f"{path}:1: inventory: the file is empty (expected 'clusters:' and 'hosts:')")
        doc = _Document(loader, path)
        data = doc.data(root, ())
        _validate(doc, data)
        return _inventory(doc, data)
    finally:
        loader.dispose()


class _Document:
    """Plain data from the composed YAML nodes, keeping each value's node (by path) for error messages."""

    def __init__(self, loader: yaml.SafeLoader, path: str):
        self.loader, self.path = loader, path
        self.nodes: dict[tuple, yaml.Node] = {}  # path -> the value's node
        self.keys: dict[tuple, yaml.Node] = {}  # path -> the key's node, for mapping entries
        self.open: set[int] = set()  # ids of the nodes being read, to refuse an alias that contains itself

    def error(self, at: tuple, problem: str, node: yaml.Node | None = None, where: str | None = None
              ) -> InventoryError:
        """``file:line: where: problem`` for the value at path ``at`` (the line of ``node`` where given)."""
        node = node or self.nodes.get(at)
        line = node.start_mark.line + 1 if node is not None else 1
        return InventoryError(f"{self.path}:{line}: {where or self.where(at)}: {problem}")

    def where(self, at: tuple, kinds: tuple[str, ...] = ()) -> str:
        """``host 'box' field 'env' key 'TAG'``: the entry, then one word per step (``kinds`` marks keys)."""
        if not at:
            return "inventory"
        words = [str(at[0])]
        if len(at) > 1:
            words = [_label(self.nodes.get(at[:2]), at[0].removesuffix("s"), at[1])]
        for i, step in enumerate(at[2:], 2):
            kind = kinds[i] if i < len(kinds) else "field"
            words.append(f"item #{step + 1}" if isinstance(step, int) else f"{kind} {step!r}")
        return " ".join(words)

    def data(self, node: yaml.Node, at: tuple) -> Any:
        self.nodes[at] = node
        if id(node) in self.open:
            raise self.error(at, "an alias that contains itself")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.data(item, (*at, i)) for i, item in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, at)
            return self.loader.construct_object(node, deep=True)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, at: tuple) -> dict[str, Any]:
        own = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        seen: set[str] = set()
        for key_node in own:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(at, "keys must be plain names", node=key_node)
            if key_node.value in seen:
                raise self.error((*at, key_node.value), "given twice", node=key_node)
            seen.add(key_node.value)
        self.loader.flatten_mapping(node)  # YAML merge keys (`<<: *defaults`), which the node's own keys override
        out = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(at, "keys must be plain names", node=key_node)
            self.keys[(*at, key_node.value)] = key_node
            out[key_node.value] = self.data(value_node, (*at, key_node.value))
        return out


def _validate(doc: _Document, data: dict) -> None:
    """Check ``data`` against schemas/inventory.json; raise the first error in the file, naming its line."""
    validator = jsonschema.Draft202012Validator(_schema())
    while True:
        errors = list(validator.iter_errors(data))
        # a string field holding a number or date (`version: 2.0`, `time: 12:00:00`) means the text as written
        texts = [e for e in errors if _wants_text(doc, e)]
        if not texts:
            break
        for e in texts:
            *parent, last = e.absolute_path
            _at(data, parent)[last] = doc.nodes[tuple(e.absolute_path)].value
    typos = {tuple(e.absolute_path) for e in errors if e.validator == "additionalProperties"}
    # an unknown field probably is the missing one misspelt: report the typo
    errors = [e for e in errors if not (e.validator == "required" and tuple(e.absolute_path) in typos)]
    if errors:
        first = min(errors, key=lambda e: _position(doc, e))
        raise _error(doc, first, [e for e in errors if e.absolute_path == first.absolute_path])


def _wants_text(doc: _Document, e: jsonschema.ValidationError) -> bool:
    types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
    node = doc.nodes.get(tuple(e.absolute_path))
    return (e.validator == "type" and "string" in types and isinstance(node, yaml.ScalarNode)
            and not _is_null(node) and not isinstance(e.instance, (bool, str)))


def _at(data: Any, path) -> Any:
    for step in path:
        data = data[step]
    return data


def _position(doc: _Document, e: jsonschema.ValidationError) -> tuple[int, int]:
    """Where the error ``e`` will point: an unknown field's key, else the value at its path."""
    at = tuple(e.absolute_path)
    node = doc.keys[(*at, _unknown_key(e))] if e.validator == "additionalProperties" else doc.nodes[at]
    return node.start_mark.line, node.start_mark.column


def _error(doc: _Document, e: jsonschema.ValidationError, same: list) -> InventoryError:
    """The schema error ``e`` as ``file:line: where: problem``; ``same`` are the errors at its path."""
    at, value = tuple(e.absolute_path), e.instance
    where = doc.where(at, _step_kinds(e.schema_path, len(at)))
    if e.validator == "additionalProperties":
        unknown = _unknown_key(e)
        problem = _unknown("field", unknown, list(e.schema["properties"]), quote=False)
        return doc.error((*at, unknown), problem, node=doc.keys[(*at, unknown)], where=f"{where} field {unknown!r}")
    if e.validator == "required":
        missing = [m for r in same if r.validator == "required" for m in r.validator_value if m not in r.instance]
        missing = list(dict.fromkeys(missing))
        problem = f"missing field{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}"
    elif e.validator == "type":
        types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        node = doc.nodes[at]
        quote = " (quote it)" if "string" in types and isinstance(node, yaml.ScalarNode) and not _is_null(node) else ""
        problem = f"expected {_TYPE_NAMES[next(t for t in types if t != 'null')]}, got {_kind(node)}{quote}"
    elif e.validator == "enum":
        problem = _unknown(e.schema["description"], value, e.validator_value, plural="types")
    elif "description" in e.schema:  # a bound or pattern: the subschema's description says what is wanted
        shown = f"{value:g}" if isinstance(value, (int, float)) else repr(value)
        problem = f"must be {e.schema['description']}, got {shown}"
    else:
        problem = e.message
    return doc.error(at, problem, where=where)


def _unknown_key(e: jsonschema.ValidationError) -> str:
    """The first key (in file order) that an ``additionalProperties: false`` error refuses."""
    return next(k for k in e.instance if k not in e.schema["properties"]
                and not any(re.search(p, k) for p in e.schema.get("patternProperties", {})))


def _step_kinds(schema_path, depth: int) -> tuple[str, ...]:
    """For each step of an error's value path, ``key`` where the schema reached it as a free mapping's key."""
    kinds, tokens = [], list(schema_path)
    while tokens and len(kinds) < depth:
        token = tokens.pop(0)
        if token in ("properties", "patternProperties"):
            tokens.pop(0)
            kinds.append("field" if token == "properties" else "key")
        elif token in ("items", "additionalProperties"):
            kinds.append("item" if token == "items" else "key")
    return tuple(kinds)


def _inventory(doc: _Document, data: dict) -> Inventory:
    """The checked ``data`` as dataclasses, after the checks a schema cannot say: unique names, known clusters."""
    clusters = tuple(_record(Cluster, c) for c in data["clusters"])
    _unique(doc, clusters, "clusters")
    names = [c.name for c in clusters]
    hosts = []
    for i, entry in enumerate(data["hosts"]):
        if entry["cluster"] not in names:
            raise doc.error(("hosts", i, "cluster"), _unknown("cluster", entry["cluster"], names))
        if entry["type"] == "tpu":
            try:
                _tpu_shape(entry["accelerator_type"])
            except ValueError as e:
                raise doc.error(("hosts", i, "accelerator_type"), str(e)) from None
        hosts.append(_record(HOST_TYPES[entry["type"]], {k: v for k, v in entry.items() if k != "type"}))
    _unique(doc, hosts, "hosts")
    return Inventory(clusters=clusters, hosts=tuple(hosts), path=doc.path)


def _unique(doc: _Document, items, key: str) -> None:
    seen = set()
    for i, item in enumerate(items):
        if item.name in seen:
            kind = key.removesuffix("s")
            raise doc.error((key, i), f"duplicate {kind} name")
        seen.add(item.name)


def _record(cls: type, data: dict) -> Any:
    """An instance of the dataclass ``cls`` from checked ``data``: lists become tuples, numbers the field's type."""
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if dataclasses.is_dataclass(hint):
            value = _record(hint, value)
        elif typing.get_origin(hint) is tuple:
            value = tuple(value)
        elif hint in (int, float) and value is not None:
            value = hint(value)
        values[key] = value
    return cls(**values)


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(resources.files("theseus.dispatch").joinpath("schemas/inventory.json").read_text())


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "a list", "object": "a mapping"}


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return "nothing" if _is_null(node) else repr(node.value)


def _label(node: yaml.Node | None, kind: str, i: int) -> str:
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
