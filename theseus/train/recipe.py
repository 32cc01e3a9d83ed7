"""A training job as a declaration: which model, data, optimizer, schedule, loss, evaluations and analyses.

``Recipe`` names one part of each kind as a class attribute; a subclass replaces
them one at a time, and its ``Config`` (the job's typed config) is composed from
the parts it names, its sections in `SECTIONS` order::

    class Mix(Pretrain):
        DATA = [Sampling("pydoc", 0.7), Sampling("addition", 0.3)]
        OPTIMIZER = optimizers.Lion
        SCHEDULE = schedules.Cosine

Behaviour changes in code override a method instead of copying the loop:
``model(config)`` builds the flax module, ``loss(config)`` returns the per-token
loss ``(logits, targets) -> [B, T]``, ``forward(config, model)`` and
``objective(config, loss)`` are what a step runs and minimises (`theseus.train.objective`:
a fine-tuning transform replaces them), ``build(config, mesh, root)`` builds every part
once (`theseus.train.built.Built`), which the trainer (`theseus.train.trainer.Trainer`)
runs. The registered job `gpt/train/pretrain` (`theseus.train.jobs.Pretrain`) holds a
recipe of its class's ``RECIPE`` and puts the store around the trainer.

>>> from omegaconf import OmegaConf
>>> class Small(Recipe):
...     SCHEDULE = schedules.WSD
>>> cfg = OmegaConf.structured(Small.Config)
>>> list(cfg.optimization)
['weight_decay', 'beta1', 'beta2', 'lr', 'warmup_pct', 'decay_pct', 'final_lr_frac']
>>> list(cfg)
['architecture', 'eval', 'tokenizer', 'data', 'optimization', 'training', 'logging', 'shard', 'loss']
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import optax
from jax.sharding import Mesh
from loguru import logger
from omegaconf import DictConfig, OmegaConf

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader, Sampling, open_mixture
from theseus.data.store import open_dataset
from theseus.data.tokenizer import TokenizerConfig
from theseus.errors import BadInput
from theseus.model.gpt import count_params
from theseus.train import autobatch, evaluations, losses, models, optimizers, schedules
from theseus.train.built import Built, Layout, StepParts, ValidationData, check_vocabulary, shard_config, topology_of
from theseus.train.compiled import batch_keys, compile_train_step
from theseus.train.config import (
    READ_BY_ANALYSES,
    DataConfig,
    EvalConfig,
    FinewebConfig,
    LoggingConfig,
    NotImplementedSetting,
    ShardSection,
    TrainingConfig,
    check_config,
    total_steps,
)
from theseus.train.objective import Forward, Objective, TokenObjective, model_forward
from theseus.train.parts import Part, dataclass_fields, parts, section_fields
from theseus.train.plan import TrainingPlan, micro_batch_candidates
from theseus.train.sharding import DATA

__all__ = ["PretrainConfig", "Recipe", "Sampling", "SourceConfig", "as_recipe", "is_training"]

#: the sections every training job has, in the order config.yaml lists them; part sections fill the empty ones
SECTIONS: tuple[tuple[str, type | None], ...] = (
    ("architecture", None),
    ("eval", EvalConfig),
    ("tokenizer", TokenizerConfig),
    ("data", DataConfig),
    ("optimization", None),
    ("training", TrainingConfig),
    ("logging", LoggingConfig),
    ("shard", ShardSection),
    ("loss", None),
)
#: gradients are clipped to this global norm before every optimizer
CLIP_NORM = 1.0


@dataclasses.dataclass
class SourceConfig:
    """One dataset of a mixture in the config: ``data.mixture`` is a list of these.

    >>> SourceConfig("pydoc", 0.3).rate
    0.3
    """

    dataset: str = ""
    rate: float = 1.0


@dataclasses.dataclass
class MixtureDataConfig:
    """``data`` of a job with a ``DATA`` mixture: its datasets and rates, the suffix, the data-order seed.

    >>> MixtureDataConfig().seed
    0
    """

    suffix: str = ""
    fineweb: FinewebConfig = dataclasses.field(default_factory=FinewebConfig)
    mixture: list[SourceConfig] = dataclasses.field(default_factory=list)
    seed: int = 0


def _dataclass(name: str, fields: list[tuple[str, Any, dataclasses.Field]]) -> type:
    return dataclasses.make_dataclass(name, fields)


def _section(base: type | None, members: list[type[Part]], name: str, owner: str) -> type | None:
    """The dataclass of section ``name``: ``base``'s fields then the parts' (one part alone: its own Config)."""
    contributing = [m for m in members if m.Config is not None and m.section == name]
    if base is None and len(contributing) == 1:
        return contributing[0].Config
    fields = dataclass_fields(base) if base is not None else []
    taken = {f[0] for f in fields}
    for field in section_fields(contributing, name):
        if field[0] in taken:
            raise TypeError(f"{owner}: config key {name}.{field[0]} is declared by a part and by the job")
        fields.append(field)
    if not fields:
        return None
    return base if not contributing else _dataclass(f"{owner}_{name}", fields)


def _check_part(owner: str, attribute: str, value: Any, base: type) -> None:
    if not (isinstance(value, type) and issubclass(value, base)):
        raise TypeError(f"{owner}.{attribute} must be a {base.__module__}.{base.__name__} subclass, got {value!r}")


class Recipe:
    """The parts of a training job (class attributes) and the hooks that build them (methods).

    - ``MODEL``: a model part (`theseus.train.models`); ``model(config)`` builds it.
    - ``DATA``: ``None`` (train on the one dataset ``data.dataset``) or a list of
      ``Sampling(dataset, rate)``, recorded as ``data.mixture`` in the config.
    - ``OPTIMIZER``, ``SCHEDULE``: their fields share ``optimization``.
    - ``LOSS``: ``loss(config)`` builds the per-token loss.
    - ``EVALUATION``, ``ANALYSIS``: lists of parts run at validation steps when
      ``training.evaluate`` / ``training.analyze`` are true. ``gpt/train/pretrain`` lists no
      analysis (each costs a recorded forward pass and a picture at every validation step); a
      subclass lists them: ``ANALYSIS = [Attention, Norms, LogitLens]`` (`theseus.train.analyses`).

    >>> Recipe.OPTIMIZER.name, Recipe.SCHEDULE.name, [e.name for e in Recipe.EVALUATION]
    ('adamw', 'wsd', ['val-loss'])
    """

    MODEL: ClassVar[type[models.Model]] = models.GPT
    DATA: ClassVar[Sequence[Sampling] | None] = None
    OPTIMIZER: ClassVar[type[optimizers.Optimizer]] = optimizers.AdamW
    SCHEDULE: ClassVar[type[schedules.Schedule]] = schedules.WSD
    LOSS: ClassVar[type[losses.Loss]] = losses.CrossEntropy
    EVALUATION: ClassVar[Sequence[type[evaluations.Evaluation]]] = (evaluations.ValidationLoss,)
    ANALYSIS: ClassVar[Sequence[type[evaluations.Analysis]]] = ()
    Config: ClassVar[type] = None  # composed from the parts: see compose_config

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" not in cls.__dict__:
            cls.Config = cls.compose_config()

    @classmethod
    def members(cls) -> list[type[Part]]:
        """Every part of this recipe, checked, in section order (model, optimizer, schedule, loss, evaluations...).

        >>> [p.name for p in Recipe.members()]
        ['gpt', 'adamw', 'wsd', 'cross-entropy', 'val-loss']
        """
        owner = cls.__name__
        _check_part(owner, "MODEL", cls.MODEL, models.Model)
        _check_part(owner, "OPTIMIZER", cls.OPTIMIZER, optimizers.Optimizer)
        _check_part(owner, "SCHEDULE", cls.SCHEDULE, schedules.Schedule)
        _check_part(owner, "LOSS", cls.LOSS, losses.Loss)
        for attribute, base in (("EVALUATION", evaluations.Evaluation), ("ANALYSIS", evaluations.Analysis)):
            if isinstance(getattr(cls, attribute), (str, bytes)) or not isinstance(getattr(cls, attribute), Sequence):
                raise TypeError(f"{owner}.{attribute} must be a list of parts, got {getattr(cls, attribute)!r}")
            for value in getattr(cls, attribute):
                _check_part(owner, attribute, value, base)
        return [cls.MODEL, cls.OPTIMIZER, cls.SCHEDULE, cls.LOSS, *cls.EVALUATION, *cls.ANALYSIS]

    @classmethod
    def data_sources(cls) -> list[Sampling] | None:
        """``DATA`` checked: None, or a non-empty list of ``Sampling`` with each dataset once.

        >>> Recipe.data_sources() is None
        True
        """
        if cls.DATA is None:
            return None
        data = list(cls.DATA) if isinstance(cls.DATA, Sequence) and not isinstance(cls.DATA, str) else None
        if not data or not all(isinstance(s, Sampling) for s in data):
            raise TypeError(f"{cls.__name__}.DATA must be None or a non-empty list of Sampling(dataset, rate), "
                            f"got {cls.DATA!r}")
        names = [s.dataset for s in data]
        if len(set(names)) != len(names):
            raise BadInput(f"{cls.__name__}.DATA names a dataset twice: {names}")
        return data

    @classmethod
    def compose_config(cls) -> type:
        """The job's config dataclass: the fixed sections with the parts' fields, in `SECTIONS` order.

        >>> from omegaconf import OmegaConf
        >>> OmegaConf.structured(Recipe.compose_config()).loss.z_loss
        0.0
        """
        members = cls.members()
        owner = cls.__name__
        sources = cls.data_sources()
        fields: list[tuple[str, Any, dataclasses.Field]] = []
        names = [name for name, _ in SECTIONS]
        extra = [m.section for m in members if m.Config is not None and m.section not in names]
        for name, base in [*SECTIONS, *((section, None) for section in dict.fromkeys(extra))]:
            if name == "data" and sources is not None:
                mixture = [SourceConfig(s.dataset, float(s.rate)) for s in sources]
                recorded = dataclasses.field(default_factory=lambda m=mixture: [dataclasses.replace(s) for s in m])
                section = _dataclass(f"{owner}_data", [(n, t, recorded if n == "mixture" else spec)
                                                       for n, t, spec in dataclass_fields(MixtureDataConfig)])
            else:
                section = _section(base, members, name, owner)
            if section is not None:
                fields.append((name, section, dataclasses.field(default_factory=section)))
        return _dataclass(f"{owner}Config", fields)

    # -- hooks: override one to change behaviour in code ---------------------------------

    def check(self, config: DictConfig) -> None:
        """Refuse a config no run can use (before any device work): `check_config`, the model's own check and
        each evaluation's and analysis's.

        >>> from theseus.train.config import load_config
        >>> Recipe().check(load_config({"architecture": {"n_embd": 30, "n_head": 4}}, Recipe.Config))
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: n_embd (30) must be divisible by n_head (4)
        """
        check_config(config, type(self).Config)
        self.MODEL.check(config.architecture)
        shard_config(config)  # tp must divide the heads: a config error, named before the mesh is made
        for part in [*self.EVALUATION, *self.ANALYSIS]:
            part.check(config)
        self._check_analysis_keys(config)

    def _check_analysis_keys(self, config: DictConfig) -> None:
        """Refuse a key only analyses read (`READ_BY_ANALYSES`) set where no running analysis reads it."""
        running = list(self.ANALYSIS) if config.training.analyze else []
        defaults = OmegaConf.structured(type(self).Config)
        for key in READ_BY_ANALYSES:
            value, default = OmegaConf.select(config, key), OmegaConf.select(defaults, key)
            if value == default or any(key in part.reads for part in running):
                continue
            readers = [p.name for p in parts("analysis").values() if key in p.reads]
            why = ("training.analyze is false" if not config.training.analyze and self.ANALYSIS
                   else f"{self._named()}.ANALYSIS lists no analysis that reads it")
            raise NotImplementedSetting(f"{key}={value} does nothing here: {why} (read by: "
                                        f"{', '.join(readers) or 'none'}); leave it at {default}")

    def _named(self) -> str:
        """The class a message names for this recipe's parts: the job class holding it (a job's recipe class is
        ``<Job>.RECIPE``: the user wrote the job), else the recipe class.

        >>> Recipe()._named()
        'Recipe'
        """
        return type(self).__qualname__.removesuffix(".RECIPE")

    def model(self, config: DictConfig) -> nn.Module:
        """The flax module to train (``MODEL.build(config.architecture)``).

        >>> from theseus.train.config import load_config
        >>> type(Recipe().model(load_config(None, Recipe.Config))).__name__
        'GPT'
        """
        return self.MODEL.build(config.architecture)

    def loss(self, config: DictConfig) -> Callable[[Any, Any], Any]:
        """The per-token loss ``(logits [B, T, V], targets [B, T]) -> [B, T]`` (``LOSS.build(config.loss)``).

        >>> import jax.numpy as jnp
        >>> from theseus.train.config import load_config
        >>> token_loss = Recipe().loss(load_config(None, Recipe.Config))
        >>> token_loss(jnp.zeros((1, 2, 4)), jnp.zeros((1, 2), jnp.int32)).shape
        (1, 2)
        """
        section = config.loss if "loss" in config else None
        return self.LOSS.build(section)

    def forward(self, config: DictConfig, model: nn.Module) -> Forward:
        """The model on a batch, ``forward(params, frozen, batch, *, deterministic, rng) -> logits``
        (`theseus.train.objective.model_forward`); a transform that trains adapters over a frozen base replaces it.

        >>> import jax, jax.numpy as jnp
        >>> from theseus.train.config import load_config
        >>> config = load_config({"architecture": {"n_embd": 32, "n_head": 2, "n_layers": 1, "vocab_size": 64}},
        ...                      Recipe.Config)
        >>> model = Recipe().model(config)
        >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
        >>> Recipe().forward(config, model)(params, None, {"x": jnp.zeros((1, 4), jnp.int32)}).shape
        (1, 4, 64)
        """
        return model_forward(model)

    def objective(self, config: DictConfig, loss: Callable[[Any, Any], Any]) -> Objective:
        """What a step minimises (`theseus.train.objective`): by default the mean of the per-token ``loss``
        over the tokens ``padding_mask`` counts; a sequence-level objective (DPO) replaces it.

        >>> from theseus.train.config import load_config
        >>> config = load_config(None, Recipe.Config)
        >>> Recipe().objective(config, Recipe().loss(config)).metrics
        ()
        """
        return TokenObjective(loss)

    def schedule(self, config: DictConfig, total_steps: int) -> Callable[[Any], Any]:
        """The learning rate at each step: ``SCHEDULE`` over ``total_steps`` with peak ``optimization.lr``.

        >>> from theseus.train.config import load_config
        >>> float(Recipe().schedule(load_config(None, Recipe.Config), 1000)(500))
        0.0003000000142492354
        """
        return self.SCHEDULE.build(config.optimization, float(config.optimization.lr), int(total_steps))

    def optimizer(self, config: DictConfig, total_steps: int) -> optax.GradientTransformation:
        """Gradient clipping to `CLIP_NORM`, then ``OPTIMIZER`` on `schedule`.

        >>> import jax.numpy as jnp
        >>> from theseus.train.config import load_config
        >>> opt = Recipe().optimizer(load_config(None, Recipe.Config), 10)
        >>> len(opt.init({"w": jnp.ones((2, 2))}))
        2
        """
        return optax.chain(optax.clip_by_global_norm(CLIP_NORM),
                           self.OPTIMIZER.build(config.optimization, self.schedule(config, total_steps)))

    def sources(self, config: DictConfig) -> list[Sampling]:
        """The datasets of the job and their rates: ``data.mixture``, or ``data.dataset`` alone at rate 1.

        >>> from theseus.train.config import load_config
        >>> Recipe().sources(load_config(None, Recipe.Config))
        [Sampling(dataset='fineweb', rate=1.0)]
        """
        if "mixture" in config.data:
            if not config.data.mixture:
                raise BadInput("data.mixture is empty: a mixture needs at least one dataset and rate")
            return [Sampling(s.dataset, float(s.rate)) for s in config.data.mixture]
        return [Sampling(config.data.dataset, 1.0)]

    def loader(self, config: DictConfig, root: str, split: str, batch_size: int) -> Loader | MixtureLoader:
        """Batches of ``split``: a `Loader` of ``data.dataset``, or a `MixtureLoader` of ``data.mixture``.

        A missing dataset is an error naming the tokenize job that makes it.
        """
        block_size = int(config.architecture.block_size)
        if "mixture" not in config.data:
            name = config.data.dataset
            dataset = open_dataset(root, f"{name}{config.data.suffix}", hint=f"data/tokenize/{name}")
            return Loader(dataset, split, seed=config.data.seed, batch_size=batch_size, block_size=block_size)
        return open_mixture(root, self.sources(config), split, seed=config.data.seed, batch_size=batch_size,
                            block_size=block_size, suffix=config.data.suffix)

    # -- build: every part, once ----------------------------------------------------------

    def build(self, config: DictConfig, mesh: Mesh, root: str, *, log: Any = logger,
              memory_budget_bytes: int | None = None) -> Built:
        """Every part of a run on ``mesh`` with the data of ``root``, built once (`theseus.train.built.Built`).

        ``config`` is the job's loaded config (`theseus.train.config.load_config`); it is checked first
        (`check`), before any device work. Then the plan's batch split (`TrainingPlan`), the data (a missing
        dataset names its tokenize job; ``block_size`` must fit; its tokenizer must fit the vocabulary), the
        model, loss, forward, objective, schedule and optimizer, the state's layout, and with
        ``per_device_batch_size=-1`` the real step compiled for each candidate size to pick the largest that
        fits ``memory_budget_bytes``. Logs TOPOLOGY, AUTOBATCH, BATCHING / STEPS / TOKENS and MODEL.
        Override it to transform what is built (``dataclasses.replace`` of the parts).
        """
        self.check(config)
        shard = shard_config(config)
        topology = topology_of(mesh, shard)
        log.info(f"TOPOLOGY | \n{json.dumps(topology, indent=2)}")
        data_parallel, local = int(mesh.shape[DATA]), int(topology["local_replicas"]) or 1
        fixed = int(config.training.per_device_batch_size) != -1
        plan = TrainingPlan.build(config, data_parallel, local) if fixed else None  # the split, before any data
        if not fixed:
            micro_batch_candidates(int(config.training.batch_size), data_parallel)  # some candidate splits it
        loader = self.loader(config, root, "train", int(config.training.batch_size))
        check_vocabulary(loader, int(config.architecture.vocab_size))
        validating = bool(config.training.validation) and config.training.validation_steps > 0
        evaluations = tuple(self.EVALUATION) if config.training.evaluate else ()
        analyses = tuple(self.ANALYSIS) if config.training.analyze else ()
        if validating or evaluations or analyses:
            self.loader(config, root, "val", 1)  # the val split exists and block_size fits it
        parts = self.step_parts(config)
        layout = Layout.of(parts.model, parts.optimizer, mesh, shard, int(config.architecture.block_size))
        trials, compiled = (), None
        if plan is None:
            plan, trials, compiled = self._probed_plan(config, parts, layout, (local, batch_keys(loader)), log,
                                                       memory_budget_bytes)
        for line in plan.lines():
            log.info(line)
        n_params = count_params(layout.abstract_state["params"])
        log.info(f"MODEL | Total Parameters: {n_params / 1e6:.2f}m")
        opened = validating or evaluations or analyses
        return Built(config=config, parts=parts, layout=layout, plan=plan, loader=loader,
                     validation=self.validation_data(config, root, plan.micro_rows) if opened else ValidationData(),
                     sources=tuple(s.dataset for s in self.sources(config)), evaluations=evaluations,
                     analyses=analyses, validating=validating, n_params=n_params,
                     flops_per_token=self.MODEL.flops_per_token(config.architecture, layout.abstract_state["params"]),
                     topology=topology, autobatch_trials=tuple(trials), compiled_step=compiled)

    def step_parts(self, config: DictConfig) -> StepParts:
        """The model, loss, forward, objective, optimizer and schedule of a run of ``config`` (its hooks).

        >>> from theseus.train.config import load_config
        >>> parts = Recipe().step_parts(load_config(None, Recipe.Config))
        >>> type(parts.model).__name__, type(parts.objective).__name__
        ('GPT', 'TokenObjective')
        """
        total = total_steps(config.training, int(config.architecture.block_size))
        model, loss = self.model(config), self.loss(config)
        return StepParts(model=model, loss=loss, forward=self.forward(config, model),
                         objective=self.objective(config, loss), optimizer=self.optimizer(config, total),
                         schedule=self.schedule(config, total))

    def _probed_plan(self, config: DictConfig, parts: StepParts, layout: Layout, batching: tuple[int, tuple],
                     log: Any, memory_budget_bytes: int | None) -> tuple[TrainingPlan, list, Any]:
        """The plan whose micro-batch is the largest candidate whose compiled step fits the budget; the trials
        and the compiled step of the chosen size."""
        local, keys = batching
        compiled: dict[int, Any] = {}
        trials: list = []
        B, T = int(config.training.batch_size), int(config.architecture.block_size)

        def compile_step(micro: int) -> Any:
            compiled[micro] = compile_train_step(parts, layout, B, micro, T, jax.random.PRNGKey(0), keys=keys)
            return compiled[micro]

        def probe(candidates: list[int]) -> int:
            result = autobatch.probe_batch_size(candidates, compile_step, memory_budget_bytes)
            trials.extend(result.trials)
            tried = ", ".join(f"{s}: {'OOM' if b is None else f'{b / 2**20:.1f} MiB'}"
                              f"{'' if f else ' (too big)'}" for s, b, f in result.trials)
            log.info(f"AUTOBATCH | per_device_batch_size={result.batch_size} | tried {tried}")
            return autobatch.agreed_batch_size(result.batch_size)  # one size for every process

        plan = TrainingPlan.build(config, int(layout.mesh.shape[DATA]), local, probe)
        return plan, trials, compiled.get(plan.per_device_batch_size)

    def validation_data(self, config: DictConfig, root: str, rows: int) -> ValidationData:
        """The val loaders of ``config``'s data, ``rows`` rows per batch: the whole data's and one per dataset
        (a mixture's each padded to ``block_size`` like the mixture).

        >>> from theseus.train.example import tiny_example
        >>> from theseus.train.config import load_config
        >>> root, config = tiny_example()
        >>> data = Recipe().validation_data(load_config(config, Recipe.Config), root, 2)
        >>> data.loader("fineweb") is data.loader(None), data.whole.batch_size
        (True, 2)
        """
        whole = self.loader(config, root, "val", rows)
        names = [s.dataset for s in self.sources(config)]
        if len(names) == 1:  # one dataset shares the val/loss loader, so its loss is computed once
            return ValidationData(whole, {names[0]: whole})
        return ValidationData(whole, {name: open_mixture(
            root, [Sampling(name, 1.0)], "val", seed=config.data.seed, batch_size=rows,
            block_size=int(config.architecture.block_size), suffix=config.data.suffix) for name in names})


Recipe.Config = Recipe.compose_config()


def as_recipe(recipe: Any) -> Recipe:
    """The recipe a trainer builds from: ``recipe`` itself (an instance), one of the class ``recipe``, the
    recipe a job holds (``job.recipe``) or one of the recipe class a job class carries (``JobClass.RECIPE``,
    as `theseus.train.jobs.Pretrain` and its subclasses do); None: the default `Recipe`.

    >>> as_recipe(None).OPTIMIZER.name, isinstance(as_recipe(Recipe), Recipe)
    ('adamw', True)
    >>> as_recipe(int)
    Traceback (most recent call last):
    ...
    TypeError: builtins.int is not a training recipe (a theseus.train.recipe.Recipe subclass, or a training job such as gpt/train/pretrain)
    """  # noqa: E501 - the doctest shows the message whole
    if recipe is None:
        return Recipe()
    if isinstance(recipe, Recipe):
        return recipe
    held = getattr(recipe, "recipe", None) if not isinstance(recipe, type) else None
    if isinstance(held, Recipe):  # a training job holds its recipe
        return held
    cls = getattr(recipe, "RECIPE", recipe)  # a training job class carries its recipe class
    if isinstance(cls, type) and issubclass(cls, Recipe):
        return cls()
    name = f"{recipe.__module__}.{recipe.__qualname__}" if isinstance(recipe, type) else repr(recipe)
    raise TypeError(f"{name} is not a training recipe (a theseus.train.recipe.Recipe subclass, or a training job "
                    "such as gpt/train/pretrain)")


def is_training(cls: Any) -> bool:
    """Whether ``cls`` is a recipe class or a training job class carrying one (``RECIPE``): what a trainer
    builds from.

    >>> from theseus.train.jobs import Pretrain
    >>> is_training(Recipe), is_training(Pretrain), is_training(int)
    (True, True, False)
    """
    owner = getattr(cls, "RECIPE", cls)
    return isinstance(owner, type) and issubclass(owner, Recipe)


#: the config dataclass of `gpt/train/pretrain`: `SECTIONS` filled by the GPT, AdamW, WSD and cross-entropy parts
PretrainConfig = Recipe.Config
