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
loss ``(logits, targets) -> [B, T]``. The trainer (`theseus.train.trainer.Trainer`)
reads a recipe; the registered job `gpt/train/pretrain` is ``Recipe`` with the
store around it (`theseus.train.jobs.Pretrain`).

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
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import flax.linen as nn
import optax
from omegaconf import DictConfig, OmegaConf

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader, Sampling, open_mixture
from theseus.data.store import open_dataset
from theseus.data.tokenizer import TokenizerConfig
from theseus.errors import BadInput
from theseus.train import evaluations, losses, models, optimizers, schedules
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
)
from theseus.train.parts import Part, dataclass_fields, parts, section_fields

__all__ = ["PretrainConfig", "Recipe", "Sampling", "SourceConfig", "as_recipe"]

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
                   else f"{type(self).__name__}.ANALYSIS lists no analysis that reads it")
            raise NotImplementedSetting(f"{key}={value} does nothing here: {why} (read by: "
                                        f"{', '.join(readers) or 'none'}); leave it at {default}")

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


Recipe.Config = Recipe.compose_config()


def as_recipe(recipe: Recipe | type[Recipe] | None) -> Recipe:
    """The recipe instance whose hooks a trainer calls: ``recipe`` itself, or one of the class ``recipe``.

    An instance of a class is made without running its ``__init__`` (a job class's
    needs a store), so hooks read only their arguments and class attributes.

    >>> as_recipe(None).OPTIMIZER.name, isinstance(as_recipe(Recipe), Recipe)
    ('adamw', True)
    """
    if recipe is None:
        return Recipe()
    if isinstance(recipe, type):
        if not issubclass(recipe, Recipe):
            raise TypeError(f"{recipe.__module__}.{recipe.__qualname__} is not a training recipe "
                            "(a theseus.train.recipe.Recipe subclass such as a gpt/train/pretrain job)")
        return recipe.__new__(recipe)
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a theseus.train.recipe.Recipe (class or instance), got {recipe!r}")
    return recipe
#: the config dataclass of `gpt/train/pretrain`: `SECTIONS` filled by the GPT, AdamW, WSD and cross-entropy parts
PretrainConfig = Recipe.Config
