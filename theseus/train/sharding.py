"""Device mesh and sharding rules for the GPT train state (FSDP, ZeRO-1, tensor parallel).

The mesh has two axes, ``("data", "model")``. ``"model"`` has ``tp`` devices and
carries Megatron-style tensor parallelism; ``"data"`` has the rest and carries the
batch, plus the FSDP / ZeRO-1 shards of parameters and optimizer state.

Rules, by parameter path (the last components of the path; leading axes such as a
stacked-layer axis are left alone because dimensions are counted from the end):

===============================  ===================  ==========================
parameter                        shape                tensor parallel ("model")
===============================  ===================  ==========================
``*/mlp/c_fc/kernel``            [D, F]               output dim (-1)
``*/mlp/c_fc/bias``              [F]                  dim -1
``*/mlp/c_proj/kernel``          [F, D]               input dim (-2)
``*/attn/c_attn/kernel``         [D, 3D]              output dim (-1), see below
``*/attn/c_attn/bias``           [3D]                 dim -1
``*/attn/c_proj/kernel``         [D, D]               input dim (-2)
``*/attn/{q,k,v}_proj/*``        [D, H*hd], [H*hd]    output dim (-1)
``*/attn/o_proj/kernel``         [H*hd, D]            input dim (-2)
``*/mlp/{gate,up}_proj/*``       [D, F], [F]          output dim (-1)
``*/mlp/down_proj/kernel``       [F, D]               input dim (-2)
everything else                                       replicated
===============================  ===================  ==========================

``c_attn``: the output dimension is split into ``tp`` contiguous pieces. The
pieces hold whole heads of q, k and v only when the model lays that dimension out
head-major, ``[n_head, 3, head_dim]`` flattened, and ``tp`` divides ``n_head``.
With nanoGPT's ``[3, n_head, head_dim]`` layout the result is still correct (GSPMD
keeps the math exact; the sharding only decides where bytes live) but XLA must
move data when it splits q, k and v into heads. ``attn/c_proj``'s input dimension
is ``[n_head, head_dim]`` flattened, so a contiguous split is head-consistent.

FSDP (``fsdp=True``): every parameter and optimizer-state leaf additionally puts
its largest dimension not used by tensor parallelism and divisible by the data
axis size on ``"data"`` (leaves with no such dimension stay replicated over data).

ZeRO-1 (``zero=True``, ``fsdp=False``): parameters are replicated over ``"data"``;
optimizer-state leaves that mirror a parameter (Adam ``mu``/``nu``) are sharded
over ``"data"`` with the FSDP rule. Scalars (``step``, Adam ``count``) are
replicated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from theseus.errors import BadInput

DATA = "data"
MODEL = "model"

# (suffix of the parameter path, dimension that goes on the "model" axis)
_TP_RULES: tuple[tuple[tuple[str, ...], int], ...] = (
    (("mlp", "c_fc", "kernel"), -1),
    (("mlp", "c_fc", "bias"), -1),
    (("mlp", "c_proj", "kernel"), -2),
    (("attn", "c_attn", "kernel"), -1),
    (("attn", "c_attn", "bias"), -1),
    (("attn", "c_proj", "kernel"), -2),
    # the open-model decoder (theseus.model.decoder): q/k/v and gate/up split their heads / hidden units,
    # o_proj and down_proj their input; so each device holds whole heads when tp divides the kv heads
    (("attn", "q_proj", "kernel"), -1),
    (("attn", "q_proj", "bias"), -1),
    (("attn", "k_proj", "kernel"), -1),
    (("attn", "k_proj", "bias"), -1),
    (("attn", "v_proj", "kernel"), -1),
    (("attn", "v_proj", "bias"), -1),
    (("attn", "o_proj", "kernel"), -2),
    (("mlp", "gate_proj", "kernel"), -1),
    (("mlp", "gate_proj", "bias"), -1),
    (("mlp", "up_proj", "kernel"), -1),
    (("mlp", "up_proj", "bias"), -1),
    (("mlp", "down_proj", "kernel"), -2),
)


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    """How to lay the train state out over the mesh.

    ``tp``: size of the "model" axis. ``fsdp``: shard parameters (and optimizer
    state) over "data". ``zero``: shard optimizer state over "data" (ZeRO-1).
    ``n_head``: optional; when given, ``tp`` must divide it.

    >>> ShardConfig(tp=2, fsdp=True)
    ShardConfig(tp=2, fsdp=True, zero=True, n_head=None)
    """

    tp: int = 1
    fsdp: bool = False
    zero: bool = True
    n_head: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tp, int) or self.tp < 1:
            raise BadInput(f"ShardConfig.tp must be a positive integer, got {self.tp!r}")
        if self.n_head is not None and self.n_head % self.tp != 0:
            raise BadInput(f"tensor parallelism tp={self.tp} does not divide n_head={self.n_head}")


def make_mesh(tp: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``("data", "model")`` mesh over ``devices`` (default: every device of every process).

    The model axis has ``tp`` devices; the data axis has the rest. Default devices
    are ordered by (process, id), so a model-axis group stays inside one host when
    ``tp`` divides the local device count.

    >>> mesh = make_mesh(tp=1)
    >>> mesh.axis_names, mesh.shape["model"]
    (('data', 'model'), 1)
    """
    if devices is None:
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    devices = list(devices)
    if not devices:
        raise BadInput("make_mesh needs at least one device")
    if not isinstance(tp, int) or tp < 1:
        raise BadInput(f"tp must be a positive integer, got {tp!r}")
    if len(devices) % tp != 0:
        raise BadInput(f"tp={tp} does not divide the device count {len(devices)}")
    grid = np.array(devices, dtype=object).reshape(len(devices) // tp, tp)
    return Mesh(grid, (DATA, MODEL))


def data_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of a batch: leading (batch) dimension over "data", the rest replicated.

    >>> data_sharding(make_mesh()).spec == PartitionSpec("data")
    True
    """
    return NamedSharding(mesh, PartitionSpec(DATA))


def key_path_names(key_path: Sequence[Any]) -> tuple[str, ...]:
    """The names of a JAX key path: dict keys, attribute names, sequence indices.

    >>> import optax, jax.numpy as jnp
    >>> state = {"opt_state": optax.adam(1e-3).init({"w": jnp.zeros(2)})}
    >>> [key_path_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]][1]
    ('opt_state', '0', 'mu', 'w')
    """
    names = []
    for key in key_path:
        if isinstance(key, jax.tree_util.DictKey):
            names.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            names.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            names.append(str(key.idx))
        elif isinstance(key, jax.tree_util.FlattenedIndexKey):
            names.append(str(key.key))
        else:
            names.append(str(key))
    return tuple(names)


def _axis_sizes(cfg: ShardConfig, mesh: Mesh) -> tuple[int, int]:
    if tuple(mesh.axis_names) != (DATA, MODEL):
        raise BadInput(f"mesh axes must be {(DATA, MODEL)}, got {tuple(mesh.axis_names)}")
    data, model = mesh.shape[DATA], mesh.shape[MODEL]
    if model != cfg.tp:
        raise BadInput(f"ShardConfig.tp={cfg.tp} but the mesh's model axis has {model} devices")
    return data, model


def _tp_dim(path: tuple[str, ...]) -> int | None:
    for suffix, dim in _TP_RULES:
        if path[-len(suffix):] == suffix:
            return dim
    return None


def _spec(
    path: tuple[str, ...], shape: Sequence[int], cfg: ShardConfig, mesh: Mesh, over_data: bool, name: str | None = None
) -> PartitionSpec:
    """The PartitionSpec of one leaf: the TP rule, plus the FSDP rule when ``over_data``.

    ``name`` is the leaf's full path for error messages (default: ``path``).
    """
    data, model = _axis_sizes(cfg, mesh)
    name = name or "/".join(path)
    shape = tuple(int(d) for d in shape)
    axes: list[str | None] = [None] * len(shape)

    tp_dim = _tp_dim(path) if model > 1 else None
    if tp_dim is not None:
        if len(shape) < -tp_dim:
            raise BadInput(f"cannot shard {name} with shape {shape}: the tensor-parallel rule needs {-tp_dim} dims")
        tp_dim = len(shape) + tp_dim
        if shape[tp_dim] % model != 0:
            raise BadInput(
                f"cannot shard {name} with shape {shape}: dim {tp_dim} ({shape[tp_dim]}) "
                f"is not divisible by tp={model} (mesh axis '{MODEL}')"
            )
        axes[tp_dim] = MODEL

    if over_data and data > 1:
        free = [d for d in range(len(shape)) if axes[d] is None and shape[d] % data == 0]
        if free:
            largest = max(free, key=lambda d: shape[d])  # first of the largest on ties
            axes[largest] = DATA
    return PartitionSpec(*axes)


def param_partition_spec(path: tuple[str, ...], shape: Sequence[int], cfg: ShardConfig, mesh: Mesh) -> PartitionSpec:
    """PartitionSpec of the parameter at ``path`` (without the leading "params").

    Raises ValueError naming the leaf when a tensor-parallel dimension is not
    divisible by ``tp``.

    >>> mesh = make_mesh(tp=1)
    >>> param_partition_spec(("blocks_0", "mlp", "c_fc", "kernel"), (64, 256), ShardConfig(), mesh)
    ... # doctest: +ELLIPSIS
    P...(None, None)
    """
    return _spec(tuple(path), shape, cfg, mesh, over_data=cfg.fsdp)


def opt_state_partition_spec(
    path: tuple[str, ...], shape: Sequence[int], cfg: ShardConfig, mesh: Mesh
) -> PartitionSpec:
    """PartitionSpec of an optimizer-state leaf that mirrors the parameter at ``path``.

    Like :func:`param_partition_spec`, plus the data axis under ZeRO-1 or FSDP.

    >>> mesh = make_mesh(tp=1)
    >>> opt_state_partition_spec(("wte", "embedding"), (512, 64), ShardConfig(zero=True), mesh)
    ... # doctest: +ELLIPSIS
    P...(None, None)
    """
    return _spec(tuple(path), shape, cfg, mesh, over_data=cfg.fsdp or cfg.zero)


def _param_suffix(names: tuple[str, ...], param_paths: set[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The longest parameter path that ``names`` ends with, if any."""
    for start in range(len(names)):
        if names[start:] in param_paths:
            return names[start:]
    return None


def state_shardings(state: Any, cfg: ShardConfig, mesh: Mesh) -> Any:
    """A NamedSharding for every leaf of ``{"params": ..., "opt_state": ..., "step": ...}``.

    ``state`` may hold arrays or ``jax.ShapeDtypeStruct`` (e.g. from
    ``jax.eval_shape``). Parameters follow :func:`param_partition_spec`;
    optimizer-state leaves whose path ends with a parameter path and that have the
    parameter's shape follow :func:`opt_state_partition_spec`; everything else
    (scalars, counters) is replicated. Raises ValueError naming the first leaf
    that cannot be laid out, before any compute.

    >>> import jax.numpy as jnp, optax
    >>> params = {"wte": {"embedding": jnp.zeros((16, 8))}}
    >>> state = {"params": params, "opt_state": optax.adamw(1e-3).init(params), "step": jnp.int32(0)}
    >>> shardings = state_shardings(state, ShardConfig(), make_mesh())
    >>> shardings["params"]["wte"]["embedding"].spec == PartitionSpec(None, None)
    True
    """
    if not isinstance(state, dict) or "params" not in state:
        raise BadInput("state_shardings expects a dict with a 'params' entry")
    _axis_sizes(cfg, mesh)
    param_shapes = {
        key_path_names(path): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_flatten_with_path(state["params"])[0]
    }
    param_paths = set(param_shapes)
    # lay the parameters out first, so that an error names the parameter, not its Adam moment
    for names, shape in param_shapes.items():
        _spec(names, shape, cfg, mesh, over_data=cfg.fsdp, name="/".join(("params", *names)))

    def one(path: Any, leaf: Any) -> NamedSharding:
        names = key_path_names(path)
        shape = tuple(np.shape(leaf))
        name = "/".join(names)
        if names[0] == "params":
            return NamedSharding(mesh, _spec(names[1:], shape, cfg, mesh, over_data=cfg.fsdp, name=name))
        suffix = _param_suffix(names, param_paths) if names[0] == "opt_state" else None
        if suffix is not None and param_shapes[suffix] == shape:
            return NamedSharding(mesh, _spec(suffix, shape, cfg, mesh, over_data=cfg.fsdp or cfg.zero, name=name))
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree_util.tree_map_with_path(one, state)


def describe(mesh: Mesh, cfg: ShardConfig) -> dict[str, Any]:
    """The topology as plain data, for the TOPOLOGY log line.

    ``replicas`` is the size of the data axis (model replicas, counting an FSDP
    group as one per device along "data"); ``local_replicas`` the number of data
    positions that hold a device of this process.

    >>> describe(make_mesh(), ShardConfig())["shard"]
    {'tp': 1, 'fsdp': False, 'zero': True}
    """
    _axis_sizes(cfg, mesh)
    me = jax.process_index()
    local_rows = {row for (row, _), d in np.ndenumerate(mesh.devices) if d.process_index == me}
    return {
        "shard": {"tp": cfg.tp, "fsdp": cfg.fsdp, "zero": cfg.zero},
        "device_count": int(mesh.devices.size),
        "local_device_count": sum(1 for d in mesh.devices.flat if d.process_index == me),
        "process_count": jax.process_count(),
        "is_main": me == 0,
        "replicas": int(mesh.shape[DATA]),
        "local_replicas": len(local_rows),
    }
