"""A recipe with every part built: what `theseus.train.recipe.Recipe.build` returns and the trainer runs.

`Built` is frozen: the config, the step's parts (`StepParts`: model, per-token loss, forward,
objective, optimizer, schedule), where the state lives (`Layout`: mesh, abstract state and its
shardings), the `TrainingPlan` (built once, the micro-batch probed with these parts when
``training.per_device_batch_size`` is -1), the train loader, the validation loaders
(`ValidationData`: the whole data's and one per dataset), the evaluations and analyses, and the
figures the logs and MFU read. The trainer reads only this; it never goes back to the recipe.

A transform changes a built recipe with ``dataclasses.replace``: a LoRA recipe returns
``dataclasses.replace(built, parts=dataclasses.replace(built.parts, forward=...))`` from its
``build``; a frozen tree (a frozen base, a reference copy) is held by the trainer
(`theseus.train.trainer.Trainer.freeze`), not built.

>>> from theseus.train.example import tiny_example
>>> from theseus.train.recipe import Recipe
>>> from theseus.train.config import load_config
>>> from theseus.train.sharding import make_mesh
>>> root, config = tiny_example()
>>> built = Recipe().build(load_config(config, Recipe.Config), make_mesh(1), root)
>>> built.plan.total_steps, built.sources, type(built.model).__name__, sorted(built.validation.by_dataset)
(3, ('fineweb',), 'GPT', ['fineweb'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from theseus.errors import BadInput
from theseus.train import mfu
from theseus.train.objective import Forward, Objective
from theseus.train.plan import TrainingPlan
from theseus.train.sharding import ShardConfig, data_sharding, describe, state_shardings
from theseus.train.step import init_state

__all__ = ["Built", "Layout", "StepParts", "ValidationData", "check_vocabulary", "shard_config", "topology_of"]


@dataclasses.dataclass(frozen=True)
class StepParts:
    """What one train step is made of: the flax ``model``, its per-token ``loss`` ``(logits, y) -> [B, T]``,
    the ``forward`` and ``objective`` of `theseus.train.objective`, the ``optimizer`` (clipping included) and
    the learning-rate ``schedule``.

    >>> StepParts(model=None, loss=None, forward=None, objective=None, optimizer=None, schedule=None).model is None
    True
    """

    model: Any
    loss: Callable[[Any, Any], Any]
    forward: Forward
    objective: Objective
    optimizer: Any
    schedule: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a run's state lives: the ``mesh`` and its ``shard`` settings, the ``abstract_state`` (shapes,
    dtypes and shardings of params, optimizer state and step), ``state_shardings``, and the shardings of a
    batch (rows over the data axis) and of a replicated value.

    >>> import jax.numpy as jnp, optax
    >>> from theseus.model import GPT, GPTConfig
    >>> from theseus.train.sharding import make_mesh
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> layout = Layout.of(model, optax.sgd(0.1), make_mesh(1), ShardConfig(), 8)
    >>> layout.abstract_state["step"].dtype
    dtype('int32')
    """

    mesh: Mesh
    shard: ShardConfig
    abstract_state: Any
    state_shardings: Any
    batch_sharding: NamedSharding
    replicated: NamedSharding

    @classmethod
    def of(cls, model: Any, optimizer: Any, mesh: Mesh, shard: ShardConfig, block_size: int) -> Layout:
        """The layout of ``model``'s training state under ``optimizer`` on ``mesh`` (no memory is allocated;
        a dimension tensor parallelism cannot split raises here)."""
        abstract = jax.eval_shape(lambda k: init_state(model, optimizer, k, block_size), jax.random.PRNGKey(0))
        shardings = state_shardings(abstract, shard, mesh)
        placed = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
        return cls(mesh=mesh, shard=shard, abstract_state=placed, state_shardings=shardings,
                   batch_sharding=data_sharding(mesh), replicated=NamedSharding(mesh, PartitionSpec()))

    def shardings_like_params(self, tree: Any) -> Any:
        """Shardings for a tree shaped like (a part of) the params, by the rules the params follow: what a
        frozen tree (a frozen base, a reference copy) is placed with.

        >>> import jax.numpy as jnp, optax
        >>> from theseus.model import GPT, GPTConfig
        >>> from theseus.train.sharding import make_mesh
        >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
        >>> layout = Layout.of(model, optax.sgd(0.1), make_mesh(1), ShardConfig(), 8)
        >>> type(layout.shardings_like_params({"w": jnp.ones(4)})["w"]).__name__
        'NamedSharding'
        """
        return state_shardings({"params": tree}, self.shard, self.mesh)["params"]


@dataclasses.dataclass(frozen=True)
class ValidationData:
    """The validation loaders of a run, ``micro_rows`` rows per batch: ``whole`` (the job's data: what
    ``val/loss`` reads) and ``by_dataset`` (one per dataset of the job; a single-dataset job's one is
    ``whole``). Empty when the run validates nothing (validation, evaluations and analyses off).

    >>> ValidationData().loader(None)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no validation data is open: training.validation, training.evaluate and training.analyze are off
    """  # noqa: E501 - the doctest shows the message whole

    whole: Any = None
    by_dataset: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def loader(self, dataset: str | None) -> Any:
        """The loader of ``dataset`` (None: the whole data); a name that is not one of the job's is refused."""
        if self.whole is None:
            raise BadInput("no validation data is open: training.validation, training.evaluate and "
                           "training.analyze are off")
        if dataset is None:
            return self.whole
        if dataset not in self.by_dataset:
            raise BadInput(f"dataset {dataset!r} is not one of this job's datasets: {sorted(self.by_dataset)}")
        return self.by_dataset[dataset]


@dataclasses.dataclass(frozen=True)
class Built:
    """Every part of a run, built (module doc). Shortcuts: ``model``, ``optimizer``, ``schedule``, ``forward``,
    ``objective``, ``mesh``, ``block_size``.

    ``compiled_step``: the train step autobatch compiled for the chosen micro-batch (None when the size was
    set): the trainer reuses it instead of compiling it again.

    >>> from theseus.train.example import tiny_example
    >>> from theseus.train.trainer import Trainer
    >>> built = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).built
    >>> built.block_size, built.plan.accumulation, built.validating, [e.name for e in built.evaluations]
    (16, 1, True, ['val-loss'])
    """

    config: Any
    parts: StepParts
    layout: Layout
    plan: TrainingPlan
    loader: Any
    validation: ValidationData
    sources: tuple[str, ...]
    evaluations: tuple[Any, ...]
    analyses: tuple[Any, ...]
    validating: bool
    n_params: int
    flops_per_token: float
    topology: Mapping[str, Any]
    autobatch_trials: tuple[tuple[int, int | None, bool], ...] = ()
    compiled_step: Any = None

    @property
    def model(self) -> Any:
        """The flax module."""
        return self.parts.model

    @property
    def optimizer(self) -> Any:
        """The optax transformation (clipping, then the optimizer part)."""
        return self.parts.optimizer

    @property
    def schedule(self) -> Callable[[Any], Any]:
        """The learning rate at each step."""
        return self.parts.schedule

    @property
    def forward(self) -> Forward:
        """The model on a batch (`theseus.train.objective`)."""
        return self.parts.forward

    @property
    def objective(self) -> Objective:
        """What a step minimises (`theseus.train.objective`)."""
        return self.parts.objective

    @property
    def mesh(self) -> Mesh:
        """The device mesh."""
        return self.layout.mesh

    @property
    def block_size(self) -> int:
        """Tokens per row."""
        return int(self.config.architecture.block_size)


def shard_config(config: Any) -> ShardConfig:
    """The ``shard`` section as a `ShardConfig` (tensor parallelism must divide the model's heads).

    >>> from theseus.train.config import load_config
    >>> from theseus.train.recipe import Recipe
    >>> shard_config(load_config(None, Recipe.Config)).tp
    1
    """
    arch = config.architecture
    return ShardConfig(tp=config.shard.tp, fsdp=config.shard.fsdp, zero=config.shard.zero,
                       n_head=int(arch.n_head) if "n_head" in arch else None)


def topology_of(mesh: Mesh, shard: ShardConfig) -> dict[str, Any]:
    """The TOPOLOGY the trainer logs: the mesh (`theseus.train.sharding.describe`) and its chip's peaks.

    >>> from theseus.train.sharding import make_mesh
    >>> topology_of(make_mesh(1), ShardConfig())["chip"]["platform"]
    'cpu'
    """
    topology = describe(mesh, shard)
    device = mesh.devices.flat[0]
    topology["chip"] = {
        "name": str(getattr(device, "device_kind", device.platform)),
        "platform": device.platform,
        "flops": {d: mfu.chip_peak(device, d) for d in ("bfloat16", "float32")},
    }
    return topology


def check_vocabulary(loader: Any, vocab_size: int) -> None:
    """Refuse a dataset whose tokenizer has more tokens than the model's vocabulary.

    >>> from types import SimpleNamespace
    >>> check_vocabulary(SimpleNamespace(dataset=SimpleNamespace(name="d", tokenizer={"vocab_size": 300})), 256)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: dataset 'd' was tokenized with a vocabulary of 300 tokens, more than architecture.vocab_size 256
    """  # noqa: E501 - the doctest shows the message whole
    datasets = [loader.dataset] if hasattr(loader, "dataset") else list(loader.datasets)
    for dataset in datasets:
        vocab = (dataset.tokenizer or {}).get("vocab_size")
        if isinstance(vocab, int) and vocab > vocab_size:
            raise BadInput(f"dataset {dataset.name!r} was tokenized with a vocabulary of {vocab} tokens, more "
                           f"than architecture.vocab_size {vocab_size}")
