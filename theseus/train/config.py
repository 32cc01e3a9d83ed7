"""The config sections of a training job that are not a part's, the checks run before any device work, loading.

A training job's config (`theseus.train.recipe.Recipe.Config`) is these sections
(`eval`, `tokenizer`, `data`, `training`, `logging`, `shard`) with the parts'
sections (`architecture`, `optimization`, `loss`, ...), in `theseus.train.recipe.SECTIONS` order.
`load_config(config, schema)` merges user values on top of the defaults and
returns a struct-mode DictConfig, so a typo is an error that names the key;
`check_config` refuses values no run can use, and settings that are not
implemented, before a device is touched.

>>> from theseus.train.recipe import Recipe
>>> cfg = load_config({"architecture": {"n_embd": 128}}, Recipe.Config)
>>> list(cfg)
['architecture', 'eval', 'tokenizer', 'data', 'optimization', 'training', 'logging', 'shard', 'loss']
>>> cfg.architecture.n_embd, cfg.training.batch_size, cfg.data.dataset
(128, 512, 'fineweb')
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from theseus.errors import BadInput
from theseus.mirror.sinks import backend, require
from theseus.train.retention import Policy


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
    """`architecture.instrumentation`: what the norms analysis adds (`theseus.train.analyses.norms`): each
    token's residual-stream norms (`residual`), the attention and MLP outputs' norms (`components`).

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
    """`eval`: evaluation settings; `length` caps the examples each evaluation reads (-1: all of them).

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
class TrainingConfig:
    """`training`: global batch, micro-batch (-1 probes), length of the run, validation.

    The run's length is ``steps``, or ``tokens`` (total steps = tokens // (batch_size *
    architecture.block_size)); setting both is an error, and with neither the run reads
    `DEFAULT_TOKENS`. Both count from step 0 of the run, so a resumed run that should go on
    N steps past its step s sets ``training.steps=s+N`` (and ``training.tokens=null`` when its
    recorded config has a token budget). `evaluate` and
    `analyze` turn the job's evaluations and analyses on at validation steps. A validation
    reads one pass of each val split, at most `validation_steps` batches.
    `warmup_pct`/`decay_pct` are read by nothing here: the learning-rate schedule reads
    `optimization.warmup_pct`/`decay_pct`: setting these is an error (`check_config`).
    `init_from` (a node id or a nonce) starts the run from that checkpoint's parameters, architecture and
    tokenizer, on a new lineage under that node (`theseus.train.init_from`).

    >>> TrainingConfig().per_device_batch_size, TrainingConfig().steps
    (-1, None)
    """

    batch_size: int = 512
    per_device_batch_size: int = -1
    tokens: int | None = None
    steps: int | None = None
    warmup_pct: float = 0.01
    decay_pct: float = 0.1
    validation: bool = True
    evaluate: bool = True
    analyze: bool = True
    validation_steps: int = 2048
    init_from: str = ""


@dataclasses.dataclass
class LoggingConfig:
    """`logging`: intervals (in steps) of reports, checkpoints and validation, and the live mirror.

    ``remote = True`` mirrors every report the run writes to the store, live, to
    ``remote_backend``: ``comet`` (the default), ``wandb`` or ``tensorboard`` (see
    `theseus.mirror`; the packages are the optional ``remote`` group). ``remote_dir`` is
    the local folder the backend writes into ("": its own default; TensorBoard's is
    ``runs``), ``remote_offline`` keeps wandb and Comet off the network (wandb's offline
    mode, Comet's offline archive; TensorBoard is always local). The store stays the
    source of truth: a mirror that fails is warned about once and never stops the run.

    ``keep_checkpoints = N`` keeps the newest N checkpoints of the run's lineage (null: all), plus
    with ``keep_best = KEY`` the best ``keep_best_count`` by KEY (``keep_best_mode`` min or max);
    the others are retired and their folders deleted (`theseus.train.retention`).

    >>> LoggingConfig().report_interval, LoggingConfig().remote_backend
    (32, 'comet')
    """

    report_interval: int = 32
    checkpoint_interval: int = 1024
    validation_interval: int = 512
    remote: bool = False
    remote_backend: str = "comet"
    remote_dir: str = ""
    remote_offline: bool = False
    keep_checkpoints: int | None = None
    keep_best: str | None = None
    keep_best_mode: str = "min"
    keep_best_count: int = 1


@dataclasses.dataclass
class ShardSection:
    """`shard`: tensor-parallel degree, FSDP and ZeRO-1 (see `theseus.train.sharding.ShardConfig`).

    >>> ShardSection().zero
    True
    """

    tp: int = 1
    fsdp: bool = False
    zero: bool = True


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


def load_config(config: Any, schema: type, job: str = "gpt/train/pretrain") -> DictConfig:
    """The defaults of ``schema`` (a job's config dataclass) with ``config`` merged on top, in struct mode.

    ``config`` may be None, a dataclass instance, a dict / DictConfig (partial trees
    are fine) or a YAML string. An unknown key or a value of the wrong type is a
    ValueError naming the key (and close matches).

    >>> from theseus.train.recipe import Recipe
    >>> load_config("training: {batch_size: 8}", Recipe.Config).training.batch_size
    8
    >>> load_config({"training": {"batch_sise": 8}}, Recipe.Config)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: config key 'training.batch_sise' is not a gpt/train/pretrain setting; did you mean ...
    """
    base = OmegaConf.structured(schema)
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
            raise TypeError(f"config must be a mapping, DictConfig, dataclass or YAML string, got {type(config)}")
        try:
            merged = OmegaConf.merge(base, config)
        except OmegaConfBaseException as error:
            key = getattr(error, "full_key", None) or ""
            known = _keys(base)
            if key and key not in known:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise BadInput(f"config key {key!r} is not a {job} setting{hint}") from None
            msg = str(error).splitlines()[0]
            raise BadInput(f"config value for {key!r} is invalid: {msg}") from None
    OmegaConf.set_struct(merged, True)
    return merged


class NotImplementedSetting(BadInput):
    """A config key set to a value whose behaviour is not implemented yet (the default is accepted).

    >>> issubclass(NotImplementedSetting, ValueError)
    True
    """


#: keys whose only implemented value is their default, and what to do instead
NOT_IMPLEMENTED: dict[str, str] = {}
#: keys only analyses read (an analysis names them in its ``reads``): `Recipe.check` refuses one set
#: in a job that runs no analysis reading it
READ_BY_ANALYSES = ("architecture.instrumentation.residual", "architecture.instrumentation.components")
#: keys that the schedule reads elsewhere: setting them is an error rather than silently ignored
SCHEDULE_KEYS = {"training.warmup_pct": "optimization.warmup_pct", "training.decay_pct": "optimization.decay_pct"}


DEFAULT_TOKENS = 1_000_000_000  # the token budget of a run that sets neither training.steps nor training.tokens


def total_steps(training: Any, block_size: int) -> int:
    """The steps a run of the ``training`` section takes: ``steps``, else ``tokens`` over the tokens of a step
    (``batch_size * block_size``), else `DEFAULT_TOKENS` over them.

    >>> total_steps(TrainingConfig(batch_size=8, steps=40), 32), total_steps(TrainingConfig(tokens=2560), 32)
    (40, 0)
    """
    if training.steps is not None:
        return int(training.steps)
    tokens = DEFAULT_TOKENS if training.tokens is None else int(training.tokens)
    return tokens // (int(training.batch_size) * int(block_size))


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInput(f"{name} must be a positive integer, got {value!r}")
    return value


def check_config(cfg: DictConfig, schema: type) -> None:
    """Refuse what no run of this config can use, before any device work.

    Checks positive sizes and intervals, ``validation_steps >= 0``, ``eval.length`` (-1 or positive),
    ``per_device_batch_size`` (-1 probes, else positive), a token budget of at least
    one step, and that no key whose behaviour is not implemented
    (`NOT_IMPLEMENTED`, `SCHEDULE_KEYS`) differs from its default: ``training.warmup_pct``
    and ``training.decay_pct`` are read by nothing: the schedule reads
    ``optimization.warmup_pct`` / ``decay_pct``, so setting the ``training`` pair
    raises instead of doing nothing.

    The mirror's backend must be one of `theseus.mirror.BACKENDS`, and installed when
    ``logging.remote`` is on (the error names the command that installs it).

    >>> from theseus.train.recipe import Recipe
    >>> cfg = load_config({"training": {"warmup_pct": 0.5}}, Recipe.Config)
    >>> try:
    ...     check_config(cfg, Recipe.Config)
    ... except ValueError as e:
    ...     print(str(e).split(": ")[0])
    training.warmup_pct=0.5 is not read by the schedule
    >>> check_config(load_config({"logging": {"remote_backend": "mlflow"}}, Recipe.Config), Recipe.Config)
    Traceback (most recent call last):
    ...
    theseus.mirror.sinks.MirrorUnavailable: unknown mirror backend 'mlflow'; choose one of comet, tensorboard, wandb
    """
    _refuse_unread_keys(cfg, schema)
    batch_size = _check_run_length(cfg.training)
    _check_logging(cfg.logging)
    _check_sizes(cfg, batch_size)


def _refuse_unread_keys(cfg: DictConfig, schema: type) -> None:
    """Raise for a `NOT_IMPLEMENTED` or `SCHEDULE_KEYS` key moved off its default, since nothing reads it."""
    defaults = OmegaConf.structured(schema)
    for key, instead in NOT_IMPLEMENTED.items():
        value, default = OmegaConf.select(cfg, key), OmegaConf.select(defaults, key)
        if value != default:
            raise NotImplementedSetting(f"{key}={value} is not implemented yet ({instead}); leave it at {default}")
    for key, used in SCHEDULE_KEYS.items():
        value, default = OmegaConf.select(cfg, key), OmegaConf.select(defaults, key)
        if value != default and OmegaConf.select(cfg, used) is not None:
            raise BadInput(f"{key}={value} is not read by the schedule: the learning-rate schedule reads {used} "
                             f"(now {OmegaConf.select(cfg, used)}); set that instead and leave {key} at {default}")
        if value != default:
            raise NotImplementedSetting(f"{key}={value} is not implemented for this job's schedule "
                                        f"(it has no {used}); leave it at {default}")


def _check_run_length(training: DictConfig) -> int:
    """The positive ``training.batch_size``, after checking that at most one of steps/tokens is set, positive."""
    batch_size = _positive_int("training.batch_size", training.batch_size)
    if training.steps is not None and training.tokens is not None:
        raise BadInput(f"training.steps={training.steps} and training.tokens={training.tokens} both set the run's "
                         "length: set one, and the other to null (e.g. training.tokens=null)")
    for name in ("steps", "tokens"):
        if training[name] is not None:
            _positive_int(f"training.{name}", training[name])
    return batch_size


def _check_logging(logging: DictConfig) -> None:
    """Refuse non-positive intervals, an unusable retention policy and an unknown or uninstalled mirror."""
    for name in ("report_interval", "checkpoint_interval", "validation_interval"):
        _positive_int(f"logging.{name}", getattr(logging, name))
    Policy.from_config(logging)  # checkpoint retention: a value no run can use is refused here
    if logging.remote:
        require(logging.remote_backend)
        if logging.remote_backend == "comet" and logging.remote_dir and not logging.remote_offline:
            raise NotImplementedSetting(
                f"logging.remote_dir={logging.remote_dir!r} is where Comet writes offline archives, and an online "
                "Comet experiment writes none: set logging.remote_offline=True or leave remote_dir empty")
    else:
        backend(logging.remote_backend)


def _check_sizes(cfg: DictConfig, batch_size: int) -> None:
    """Refuse batch, block, vocabulary and eval sizes no run can use, and a token budget under one step."""
    training = cfg.training
    if training.validation_steps < 0:
        raise BadInput(f"training.validation_steps must be >= 0, got {training.validation_steps}")
    requested = training.per_device_batch_size
    if isinstance(requested, bool) or (requested != -1 and requested <= 0):
        raise BadInput(f"training.per_device_batch_size must be -1 (probe) or positive, got {requested}")
    B = batch_size
    T = _positive_int("architecture.block_size", cfg.architecture.block_size)
    if training.tokens is not None and int(training.tokens) // (B * T) < 1:
        raise BadInput(f"training.tokens {training.tokens} is less than one step of batch_size {B} * block_size "
                         f"{T} = {B * T} tokens")
    _positive_int("architecture.vocab_size", cfg.architecture.vocab_size)
    length = OmegaConf.select(cfg, "eval.length")
    if length is not None and length != -1:
        try:
            _positive_int("eval.length", length)
        except ValueError:
            raise BadInput(f"eval.length must be -1 (all examples) or a positive integer, got {length!r}") from None


def to_yaml(config: DictConfig) -> str:
    """The config as YAML (what a checkpoint's `config.yaml` holds).

    >>> from theseus.train.recipe import Recipe
    >>> to_yaml(load_config(None, Recipe.Config)).splitlines()[0]
    'architecture:'
    """
    return OmegaConf.to_yaml(config)
