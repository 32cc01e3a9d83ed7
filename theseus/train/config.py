"""Typed config tree of the `gpt/train/pretrain` job, with the seed's defaults.

`OmegaConf.structured(PretrainConfig)` is the job's default config; its sections
print in the seed's order (architecture, eval, tokenizer, data, optimization,
training, logging), then `shard`. `load_config` merges user values on top and
returns a struct-mode DictConfig, so a typo is an error that names the key.

>>> from omegaconf import OmegaConf
>>> cfg = OmegaConf.structured(PretrainConfig)
>>> list(cfg)
['architecture', 'eval', 'tokenizer', 'data', 'optimization', 'training', 'logging', 'shard']
>>> cfg.training.batch_size, cfg.architecture.dtype.activation, cfg.data.dataset
(512, 'bfloat16', 'fineweb')
>>> load_config({"architecture": {"n_embd": 128}}).architecture.n_embd
128
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from theseus.data.tokenizer import TokenizerConfig
from theseus.model.config import GPTConfig


@dataclasses.dataclass
class DtypeConfig:
    """`architecture.dtype`: parameter and activation (compute) dtypes.

    >>> DtypeConfig().activation
    'bfloat16'
    """

    param: str = "float32"
    activation: str = "bfloat16"


@dataclasses.dataclass
class InstrumentationConfig:
    """`architecture.instrumentation`: flags carried for the debugging tools.

    >>> InstrumentationConfig().residual
    False
    """

    residual: bool = False
    components: bool = False


@dataclasses.dataclass
class ArchitectureConfig:
    """`architecture`: the GPT's shape, as GPTConfig's nested mapping (see `gpt_config`).

    >>> ArchitectureConfig().n_embd, ArchitectureConfig().vocab_size
    (2048, 100288)
    """

    dtype: DtypeConfig = dataclasses.field(default_factory=DtypeConfig)
    n_embd: int = 2048
    n_layers: int = 32
    bias: bool = True
    dropout: float = 0.0
    n_head: int = 16
    block_size: int = 512
    rope: bool = True
    vocab_size: int = 100288
    instrumentation: InstrumentationConfig = dataclasses.field(default_factory=InstrumentationConfig)
    layer_norm_eps: float = 1e-05
    intermediate_size: int = -1


@dataclasses.dataclass
class EvalConfig:
    """`eval`: evaluation settings (`length` -1: the model's block size).

    >>> EvalConfig().length
    -1
    """

    length: int = -1


@dataclasses.dataclass
class FinewebConfig:
    """`data.fineweb`: which FineWeb snapshot the dataset was tokenized from.

    >>> FinewebConfig().snapshot
    'CC-MAIN-2022-21'
    """

    snapshot: str = "CC-MAIN-2022-21"


@dataclasses.dataclass
class DataConfig:
    """`data`: the tokenized dataset `<root>/data/<dataset><suffix>` and the data-order seed.

    >>> DataConfig().dataset, DataConfig().seed
    ('fineweb', 0)
    """

    suffix: str = ""
    fineweb: FinewebConfig = dataclasses.field(default_factory=FinewebConfig)
    dataset: str = "fineweb"
    seed: int = 0


@dataclasses.dataclass
class OptimizationConfig:
    """`optimization`: AdamW and its warmup-stable-decay learning-rate schedule.

    `warmup_pct`, `decay_pct` and `final_lr_frac` shape the schedule
    (`theseus.train.optimizer.wsd_schedule`) over the run's total steps.

    >>> OptimizationConfig().lr
    0.0003
    """

    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    lr: float = 0.0003
    warmup_pct: float = 0.005
    decay_pct: float = 0.01
    final_lr_frac: float = 0.01


@dataclasses.dataclass
class TrainingConfig:
    """`training`: global batch, micro-batch (-1 probes), token budget, validation.

    Total steps = tokens // (batch_size * architecture.block_size).
    `warmup_pct`/`decay_pct` here are carried for compatibility; the learning-rate
    schedule uses `optimization.warmup_pct`/`decay_pct` (the seed's logged rates).

    >>> TrainingConfig().per_device_batch_size
    -1
    """

    batch_size: int = 512
    per_device_batch_size: int = -1
    tokens: int = 1_000_000_000
    warmup_pct: float = 0.01
    decay_pct: float = 0.1
    validation: bool = True
    evaluate: bool = True
    analyze: bool = True
    validation_steps: int = 2048


@dataclasses.dataclass
class LoggingConfig:
    """`logging`: intervals (in steps) of reports, checkpoints and validation.

    >>> LoggingConfig().report_interval
    32
    """

    report_interval: int = 32
    checkpoint_interval: int = 1024
    validation_interval: int = 512
    remote: bool = False


@dataclasses.dataclass
class ShardSection:
    """`shard`: tensor-parallel degree, FSDP and ZeRO-1 (see `theseus.train.sharding.ShardConfig`).

    >>> ShardSection().zero
    True
    """

    tp: int = 1
    fsdp: bool = False
    zero: bool = True


@dataclasses.dataclass
class PretrainConfig:
    """The whole `gpt/train/pretrain` config tree.

    >>> from omegaconf import OmegaConf
    >>> OmegaConf.structured(PretrainConfig).logging.checkpoint_interval
    1024
    """

    architecture: ArchitectureConfig = dataclasses.field(default_factory=ArchitectureConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimization: OptimizationConfig = dataclasses.field(default_factory=OptimizationConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    shard: ShardSection = dataclasses.field(default_factory=ShardSection)


def _keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a DictConfig."""
    out = []
    for key in node:
        value = node[key]
        full = f"{prefix}{key}"
        out.append(full)
        if isinstance(value, DictConfig):
            out.extend(_keys(value, full + "."))
    return out


def load_config(config: Any = None) -> DictConfig:
    """The defaults with ``config`` merged on top, as a struct-mode DictConfig.

    ``config`` may be None, a ``PretrainConfig``, a dict / DictConfig (partial trees
    are fine) or a YAML string. An unknown key or a value of the wrong type is a
    ValueError naming the key (and close matches).

    >>> load_config("training: {batch_size: 8}").training.batch_size
    8
    >>> load_config({"training": {"batch_sise": 8}})
    Traceback (most recent call last):
    ...
    ValueError: config key 'training.batch_sise' is not a gpt/train/pretrain setting; did you mean training.batch_size?
    """
    base = OmegaConf.structured(PretrainConfig)
    if config is None:
        merged = base
    else:
        if isinstance(config, str):
            config = OmegaConf.create(config)
        elif dataclasses.is_dataclass(config) and not isinstance(config, type):
            config = OmegaConf.structured(config)
        elif isinstance(config, Mapping) and not isinstance(config, DictConfig):
            config = OmegaConf.create(dict(config))
        if not isinstance(config, DictConfig):
            raise TypeError(f"config must be a mapping, DictConfig, PretrainConfig or YAML string, got {type(config)}")
        try:
            merged = OmegaConf.merge(base, config)
        except OmegaConfBaseException as error:
            key = getattr(error, "full_key", None) or ""
            known = _keys(base)
            if key and key not in known:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ValueError(f"config key {key!r} is not a gpt/train/pretrain setting{hint}") from None
            msg = str(error).splitlines()[0]
            raise ValueError(f"config value for {key!r} is invalid: {msg}") from None
    OmegaConf.set_struct(merged, True)
    return merged


def gpt_config(config: Any) -> GPTConfig:
    """The GPTConfig of a (loaded or raw) config's `architecture` section.

    >>> gpt_config(load_config({"architecture": {"n_embd": 64, "n_head": 4}})).head_dim
    16
    """
    config = load_config(config) if not isinstance(config, DictConfig) else config
    return GPTConfig.from_mapping(OmegaConf.to_container(config.architecture, resolve=True))


def to_yaml(config: Any) -> str:
    """The config as YAML (what a checkpoint's `config.yaml` holds).

    >>> to_yaml(load_config()).splitlines()[0]
    'architecture:'
    """
    config = load_config(config) if not isinstance(config, DictConfig) else config
    return OmegaConf.to_yaml(config)
