"""The GPT pretraining loop: validation, topology, autobatch, state, batches, reports, checkpoints.

The trainer knows nothing of the event store or of jobs: it talks to the outside
through callbacks.

- ``on_report(step, metrics)``: every ``logging.report_interval`` steps (and the last
  step of a ``train()`` call) with ``train/loss``, ``train/lr``, ``train/grad_norm``,
  ``train/tokens``, ``train/mfu``, ``train/tokens_per_second``; with ``val/loss``
  every ``logging.validation_interval`` steps (a validation-only step reports only
  ``val/loss``). ``step`` is the number of updates applied: the node at seq ``step``.
  Metrics are fetched from the device one step late, so the next step is already
  running while the callback works.
- ``on_checkpoint(step, folder)``: after the checkpoint of ``step`` in ``folder``
  (from ``folder_fn(step)``) is committed (MANIFEST.json published), on the
  trainer's thread; before the next save starts, and at the latest when ``train()`` /
  ``wait()`` / ``close()`` returns.

>>> root, config = tiny_example()
>>> config["logging"] = {"report_interval": 1, "validation_interval": 3}
>>> seen = []
>>> trainer = Trainer(config, root, on_report=lambda step, m: seen.append((step, sorted(m))),
...                   peak_flops=1e12, progress=False)
>>> trainer.total_steps, trainer.batch()["x"].shape
(3, (4, 16))
>>> trainer.train()
>>> [s for s, _ in seen], seen[-1][1][-1]
([1, 2, 3], 'val/loss')
"""

from __future__ import annotations

import collections
import json
import os
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import fsspec
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from loguru import logger
from omegaconf import DictConfig

from theseus.data.loader import Loader
from theseus.data.store import open_dataset
from theseus.model.debug import DebugResult, capture, find_modules, normalize_path
from theseus.model.gpt import GPT, count_params
from theseus.model.layers.mlp import MLP
from theseus.store.fs import write_atomic
from theseus.store.layout import CONFIG_FILE, RNG_FILE
from theseus.train import autobatch, mfu
from theseus.train import checkpoint as ckpt
from theseus.train.compile_cache import enable_compilation_cache
from theseus.train.config import gpt_config, load_config, to_yaml
from theseus.train.optimizer import make_optimizer, wsd_schedule
from theseus.train.progress import TrainProgress
from theseus.train.sharding import DATA, ShardConfig, data_sharding, describe, make_mesh, state_shardings
from theseus.train.step import BATCH_KEYS, init_state, make_eval_step, make_train_step

RNG_FORMAT = "theseus.rng/1"
# the parameter-init key is fold_in(base, INIT_SALT); step k uses fold_in(base, k) (k < INIT_SALT)
INIT_SALT = 2**31 - 1

ReportFn = Callable[[int, dict[str, Any]], Any]
CheckpointFn = Callable[[int, str], Any]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def key_to_json(key: Any, seed: int | None = None) -> str:
    """The ``rng.json`` sidecar of a base key: plain ints, no pickles.

    >>> import jax
    >>> key_to_json(jax.random.PRNGKey(3), seed=3)
    '{"format": "theseus.rng/1", "impl": "threefry2x32", "seed": 3, "key": [0, 3]}'
    """
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    ints = [int(v) for v in np.asarray(data).reshape(-1)]
    return json.dumps({"format": RNG_FORMAT, "impl": "threefry2x32", "seed": seed, "key": ints})


def key_from_json(text: str | bytes) -> jax.Array:
    """The base key stored by `key_to_json`.

    >>> import jax
    >>> key_from_json(key_to_json(jax.random.PRNGKey(7))).tolist()
    [0, 7]
    """
    data = json.loads(text)
    if data.get("format") != RNG_FORMAT:
        raise ValueError(f"not a theseus rng file (format {data.get('format')!r})")
    return jnp.asarray(np.asarray(data["key"], dtype=np.uint32))


def _read_text(path: str) -> str:
    with fsspec.open(path, "r") as f:
        return f.read()


def _load_peak_cache(path: str) -> dict[str, float]:
    try:
        data = json.loads(_read_text(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def _write_json_atomic(path: str, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True).encode())


def cached_cpu_peak(path: str, device_kind: str, dtype: str, log: Any = logger) -> float:
    """The measured matmul peak of this CPU for ``dtype``: read from the folder ``path`` or measured once.

    Each measurement is its own small JSON file (``<device kind>-<dtype>.json``),
    written once and never modified, like everything else in a root.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "meta", "cpu_peak")
    >>> first = cached_cpu_peak(path, "cpu", "float32")
    >>> cached_cpu_peak(path, "cpu", "float32") == first
    True
    """
    key = f"{device_kind}/{dtype}"
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{device_kind}-{dtype}")
    file = f"{path}/{name}.json"
    cached = _load_peak_cache(file).get(key)
    if cached:
        return cached
    peak = mfu.measure_cpu_peak(dtype)
    log.info(f"MFU | measured {key} matmul peak {peak / 1e9:.1f} GFLOP/s, cached in {file}")
    try:
        _write_json_atomic(file, {key: peak})
    except OSError as error:  # a read-only root still trains
        log.warning(f"MFU | could not cache the CPU peak in {file}: {error}")
    return peak


def tiny_example(root: str | None = None, dataset: str = "fineweb", tokens: int = 20_000,
                 vocab: int = 128) -> tuple[str, dict]:
    """A root holding a small synthetic contiguous dataset, and a tiny config that trains on it in seconds.

    The tokens follow a simple learnable pattern (so the loss falls); the config is
    a 1-layer, 32-wide GPT, batch 4 x 16 tokens, 3 steps, validation on.

    >>> root, config = tiny_example()
    >>> config["architecture"]["n_embd"], config["training"]["batch_size"]
    (32, 4)
    """
    import tempfile

    from theseus.data.store import DatasetWriter

    root = root or tempfile.mkdtemp(prefix="theseus-")
    rng = np.random.default_rng(0)
    pattern = (np.arange(tokens) * 7 + rng.integers(0, 3, tokens)) % vocab
    with DatasetWriter(root, dataset, "contiguous", overwrite=True) as writer:
        writer.append("train", pattern[: tokens * 9 // 10])
        writer.append("val", pattern[tokens * 9 // 10:])
    config = {
        "architecture": {"n_embd": 32, "n_layers": 1, "n_head": 2, "block_size": 16, "vocab_size": vocab},
        "data": {"dataset": dataset},
        "training": {"batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 16 * 3, "validation_steps": 1},
        "logging": {"report_interval": 1, "checkpoint_interval": 1, "validation_interval": 3},
    }
    return root, config


class Trainer:
    """Trains a GPT on ``<root>/data/<data.dataset><data.suffix>`` with the `gpt/train/pretrain` config.

    Construction validates everything before any compute (config keys and types,
    ``n_embd % n_head``, tensor parallelism vs heads and devices, the micro-batch
    split, the token budget, the dataset and ``block_size`` against it), builds the
    mesh, logs TOPOLOGY / BATCHING / STEPS / TOKENS, and with
    ``per_device_batch_size=-1`` compiles the real step for each candidate size to
    pick the largest that fits (``self.per_device_batch_size``).

    Arguments beyond ``config`` (dict / DictConfig / PretrainConfig / YAML) and ``root``:

    - ``on_report(step, metrics)``, ``on_checkpoint(step, folder)``: see the module doc;
      also settable as attributes later.
    - ``folder_fn(step) -> folder``: where ``train()`` checkpoints step ``step``
      (None: no periodic checkpoints; ``save(folder)`` still works).
    - ``sidecars``: extra files for each checkpoint folder, a mapping name -> bytes/str
      or a callable ``step -> mapping`` (e.g. ``job.json``); ``rng.json`` and
      ``config.yaml`` are always written.
    - ``peak_cache``: folder caching the measured CPU peak, one JSON file per chip and dtype (default
      ``<root>/meta/cpu_peak``); ``peak_flops`` overrides the peak.
    - ``seed``: seed of the base key of a fresh run (a restore reads ``rng.json``).
    - ``devices``, ``memory_budget_bytes`` (autobatch), ``progress`` (None: a bar
      when stderr is a terminal), ``log`` (a loguru-like logger).

    Methods: ``init()``, ``restore(folder)``, ``batch()``, ``tick()``, ``train(until=None)``,
    ``validate()``, ``save(folder)``, ``wait()``, ``find(ModuleType)``, ``debug(path)``, ``close()``.

    >>> root, config = tiny_example()
    >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
    >>> trainer.per_device_batch_size, trainer.accumulation, trainer.step
    (4, 1, 0)
    >>> sorted(trainer.tick())[:3]
    ['train/grad_norm', 'train/loss', 'train/lr']
    """

    def __init__(
        self,
        config: Any,
        root: str,
        *,
        on_report: ReportFn | None = None,
        on_checkpoint: CheckpointFn | None = None,
        log: Any = logger,
        folder_fn: Callable[[int], str] | None = None,
        sidecars: Mapping[str, bytes | str] | Callable[[int], Mapping[str, bytes | str]] | None = None,
        peak_cache: str | None = None,
        peak_flops: float | None = None,
        seed: int = 0,
        devices: Sequence[jax.Device] | None = None,
        memory_budget_bytes: int | None = None,
        progress: bool | None = None,
    ):
        enable_compilation_cache(log=log)  # before anything compiles: a second start reads what the first compiled
        self.log = log
        self.root = os.fspath(root).rstrip("/")
        self.on_report = on_report
        self.on_checkpoint = on_checkpoint
        self.folder_fn = folder_fn
        self.sidecars = sidecars
        self.peak_cache = peak_cache or f"{self.root}/meta/cpu_peak"
        self._peak = peak_flops
        self.progress = progress
        self.seed = int(seed)

        # ---- validation, before any compute ---------------------------------------
        self.config: DictConfig = load_config(config)
        cfg = self.config
        self.model_config = gpt_config(cfg)  # n_embd % n_head, dtypes, sizes
        T = self.model_config.block_size
        B = _positive_int("training.batch_size", cfg.training.batch_size)
        _positive_int("training.tokens", cfg.training.tokens)
        for name in ("report_interval", "checkpoint_interval", "validation_interval"):
            _positive_int(f"logging.{name}", getattr(cfg.logging, name))
        if cfg.training.validation_steps < 0:
            raise ValueError(f"training.validation_steps must be >= 0, got {cfg.training.validation_steps}")
        self.shard = ShardConfig(tp=cfg.shard.tp, fsdp=cfg.shard.fsdp, zero=cfg.shard.zero,
                                 n_head=self.model_config.n_head)  # tp must divide n_head
        self.mesh = make_mesh(self.shard.tp, devices)  # tp must divide the device count
        dp = int(self.mesh.shape[DATA])
        self.data_parallel = dp

        requested = cfg.training.per_device_batch_size
        if requested == -1:
            candidates = [c for c in autobatch.candidates_from_env() if B % (c * dp) == 0]
            if not candidates:
                raise ValueError(
                    f"training.batch_size {B} does not split into micro-batches of any autobatch candidate "
                    f"{list(autobatch.candidates_from_env())} x {dp} data-parallel devices; set "
                    f"training.per_device_batch_size or {autobatch.ENV_VAR}"
                )
        elif isinstance(requested, bool) or requested <= 0:
            raise ValueError(f"training.per_device_batch_size must be -1 (probe) or positive, got {requested}")
        elif B % (requested * dp) != 0:
            raise ValueError(
                f"training.batch_size {B} does not split into micro-batches of per_device_batch_size {requested} "
                f"x {dp} data-parallel devices = {requested * dp} rows ({B} % {requested * dp} = "
                f"{B % (requested * dp)}); use a batch_size that is a multiple of {requested * dp}"
            )
        self.total_steps = int(cfg.training.tokens) // (B * T)
        if self.total_steps < 1:
            raise ValueError(
                f"training.tokens {cfg.training.tokens} is less than one step of batch_size {B} * block_size {T} "
                f"= {B * T} tokens"
            )

        dataset_name = f"{cfg.data.dataset}{cfg.data.suffix}"
        self.dataset = open_dataset(self.root, dataset_name, hint=f"data/tokenize/{cfg.data.dataset}")
        vocab = (self.dataset.tokenizer or {}).get("vocab_size")
        if isinstance(vocab, int) and vocab > self.model_config.vocab_size:
            raise ValueError(
                f"dataset {dataset_name!r} was tokenized with a vocabulary of {vocab} tokens, more than "
                f"architecture.vocab_size {self.model_config.vocab_size}"
            )
        self.loader = Loader(self.dataset, "train", seed=cfg.data.seed, batch_size=B, block_size=T)
        self.validation = bool(cfg.training.validation) and cfg.training.validation_steps > 0
        # plain ints for the hot loop (OmegaConf attribute access is slow)
        self._batch_size = B
        self._report_every = int(cfg.logging.report_interval)
        self._val_every = int(cfg.logging.validation_interval)
        self._ckpt_every = int(cfg.logging.checkpoint_interval)
        self._val_steps = int(cfg.training.validation_steps)
        if self.validation:
            Loader(self.dataset, "val", seed=cfg.data.seed, batch_size=1, block_size=T)  # block_size fits?

        # ---- model, optimizer, abstract state and its layout -----------------------
        self.model = GPT(self.model_config)
        opt = cfg.optimization
        schedule_args = (float(opt.lr), self.total_steps, float(opt.warmup_pct), float(opt.decay_pct),
                         float(opt.final_lr_frac))
        self.schedule = wsd_schedule(*schedule_args)
        self.optimizer = make_optimizer(float(opt.lr), float(opt.weight_decay), float(opt.beta1),
                                        float(opt.beta2), *schedule_args[1:])
        self.base_key = jax.random.PRNGKey(self.seed)
        abstract = jax.eval_shape(lambda k: init_state(self.model, self.optimizer, k, T), self.base_key)
        self.state_shardings = state_shardings(abstract, self.shard, self.mesh)  # TP-indivisible dims raise here
        self.abstract_state = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, self.state_shardings
        )
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.batch_sharding = data_sharding(self.mesh)
        self.n_params = count_params(abstract["params"])
        self.flops_per_token = mfu.flops_per_token(self.model_config,
                                                   count_params(abstract["params"], non_embedding=True))

        # ---- topology and batching logs --------------------------------------------
        self.topology = describe(self.mesh, self.shard)
        device = self.mesh.devices.flat[0]
        self.topology["chip"] = {
            "name": str(getattr(device, "device_kind", device.platform)),
            "platform": device.platform,
            "flops": {d: mfu.chip_peak(device, d) for d in ("bfloat16", "float32")},
        }
        log.info(f"TOPOLOGY | \n{json.dumps(self.topology, indent=2)}")

        self._compiled: dict[int, Any] = {}
        self.autobatch_trials: list[tuple[int, int | None, bool]] = []
        if requested == -1:
            result = autobatch.probe_batch_size(candidates, self._compile_step, memory_budget_bytes)
            self.autobatch_trials = result.trials
            tried = ", ".join(f"{s}: {'OOM' if b is None else f'{b / 2**20:.1f} MiB'}{'' if f else ' (too big)'}"
                              for s, b, f in result.trials)
            log.info(f"AUTOBATCH | per_device_batch_size={result.batch_size} | tried {tried}")
            self.per_device_batch_size = result.batch_size
        else:
            self.per_device_batch_size = int(requested)
        m = self.per_device_batch_size
        self.micro_rows = m * dp
        self.accumulation = B // self.micro_rows
        local = int(self.topology["local_replicas"]) or 1
        log.info(f"BATCHING | {m} batchsize/node * ({local} local * {dp // local} prox = {dp} dp) * "
                 f"{self.accumulation} accumulation = {B} batchsize")
        log.info(f"STEPS | {self.total_steps * self.accumulation} micro batches // {self.accumulation} "
                 f"accumulation = {self.total_steps} steps")
        log.info(f"TOKENS | {self.total_steps} steps * {B} batchsize * {T} blocksize = "
                 f"{self.total_steps * B * T} tokens")
        log.info(f"MODEL | Total Parameters: {self.n_params / 1e6:.2f}m")
        self.val_loader = (Loader(self.dataset, "val", seed=cfg.data.seed, batch_size=self.micro_rows,
                                  block_size=T) if self.validation else None)

        # ---- runtime state ----------------------------------------------------------
        self.state: dict | None = None
        self.step = 0
        self._key_device: jax.Array | None = None
        self._eval_step = None
        self._host_batch: tuple[int, dict] | None = None
        self._checkpointer = ckpt.Checkpointer()
        self._commits: queue.SimpleQueue = queue.SimpleQueue()
        self._last_find: list[tuple[str, ...]] = []
        self._last_saved: int | None = None

    # ------------------------------------------------------------------ properties

    @property
    def batch_size(self) -> int:
        """The global batch size (rows per step)."""
        return self._batch_size

    @property
    def block_size(self) -> int:
        """Tokens per row."""
        return self.model_config.block_size

    @property
    def tokens_per_step(self) -> int:
        """batch_size * block_size."""
        return self.batch_size * self.block_size

    @property
    def params(self) -> Any:
        """The current parameters (initialising a fresh state if none yet)."""
        return self._ensure_state()["params"]

    # ------------------------------------------------------------------ compile

    def _abstract_batch(self, rows: int) -> dict[str, jax.ShapeDtypeStruct]:
        return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=self.batch_sharding)
                for k, v in autobatch.abstract_batch(rows, self.block_size).items()}

    def _compile_step(self, micro: int) -> Any:
        """The AOT-compiled train step for a per-device micro-batch of ``micro`` rows."""
        if micro not in self._compiled:
            accum = self.batch_size // (micro * self.data_parallel)
            step = make_train_step(self.model, self.optimizer, accum, schedule=self.schedule)
            batch_sh = {k: self.batch_sharding for k in BATCH_KEYS}
            jitted = jax.jit(step, in_shardings=(self.state_shardings, batch_sh, self.replicated),
                             out_shardings=(self.state_shardings, self.replicated), donate_argnums=0)
            key = jax.ShapeDtypeStruct(self.base_key.shape, self.base_key.dtype, sharding=self.replicated)
            self._compiled[micro] = jitted.lower(self.abstract_state, self._abstract_batch(self.batch_size),
                                                 key).compile()
        return self._compiled[micro]

    @property
    def train_step(self) -> Any:
        """The compiled ``(state, batch, base_key) -> (state, metrics)`` of this trainer (state donated)."""
        step = self._compile_step(self.per_device_batch_size)
        # keep only the chosen size
        self._compiled = {self.per_device_batch_size: step}
        return step

    # ------------------------------------------------------------------ state

    def init(self) -> dict:
        """A fresh state (params from ``fold_in(base_key, INIT_SALT)``), laid out on the mesh; step 0.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> int(trainer.init()["step"])
        0
        """
        T = self.block_size
        init_fn = jax.jit(lambda k: init_state(self.model, self.optimizer, k, T), out_shardings=self.state_shardings)
        self.state = init_fn(jax.random.fold_in(self.base_key, INIT_SALT))
        self._set_step(0)
        self.log.debug(f"TRAINER | fresh state, seed {self.seed}")
        return self.state

    def _set_step(self, step: int) -> None:
        self.step = int(step)
        self._host_batch = None
        self._last_saved = None
        self._key_device = jax.device_put(self.base_key, self.replicated)

    def _ensure_state(self) -> dict:
        if self.state is None:
            self.init()
        return self.state

    def restore(self, folder: str, partial: bool = True, verify: bool = False) -> dict:
        """Load the checkpoint in ``folder`` onto this trainer's mesh; its ``rng.json`` becomes the base key.

        Each device reads only its slices, so a checkpoint from another topology
        restores here. ``partial=True``: leaves missing from the checkpoint or of
        another shape keep a fresh initialisation (reported in the log);
        ``partial=False`` makes any difference an error. Returns the state; the
        step counter continues from the checkpoint's ``step``.

        >>> import tempfile
        >>> root, config = tiny_example()
        >>> folder = tempfile.mkdtemp() + "/ckpt"
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = trainer.tick(); trainer.save(folder); trainer.wait()
        >>> other = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = other.restore(folder); other.step
        1
        """
        folder = folder.rstrip("/")
        try:
            rng_text = _read_text(f"{folder}/{RNG_FILE}")
            self.base_key = key_from_json(rng_text)
            self.seed = json.loads(rng_text).get("seed", self.seed)
        except FileNotFoundError:
            if not partial:
                raise FileNotFoundError(f"{folder} has no {RNG_FILE}") from None
            self.log.warning(f"RESTORE | {folder} has no {RNG_FILE}; keeping base key of seed {self.seed}")
        index = {e["path"]: (tuple(e["shape"]), e["dtype"]) for e in ckpt.read_index(folder)["leaves"]}
        wanted = {name: (tuple(leaf.shape), np.dtype(leaf.dtype).name)
                  for name, leaf in zip(ckpt.leaf_paths(self.abstract_state),
                                        jax.tree.leaves(self.abstract_state), strict=True)}
        if index == wanted or not partial:
            state, report = ckpt.restore(folder, self.abstract_state, partial=False, verify=verify)
        else:
            self.state = None
            target = self.init()
            state, report = ckpt.restore(folder, target, partial=True, verify=verify)
        self.state = state
        self._set_step(int(jax.device_get(state["step"])))
        level = self.log.info if report.exact else self.log.warning
        level(f"RESTORE | step {self.step} from {folder} | {report}")
        return state

    # ------------------------------------------------------------------ batches

    def batch(self) -> dict[str, np.ndarray]:
        """The global batch the next step consumes (NumPy ``x``, ``y``, ``padding_mask``, ``[batch_size, block_size]``).

        A pure function of (dataset, data seed, batch size, block size, step): the same
        until ``tick()`` advances a step.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.batch() is trainer.batch()
        True
        """
        if self._host_batch is None or self._host_batch[0] != self.step:
            self._host_batch = (self.step, self.loader.batch(self.step))
        return self._host_batch[1]

    def _place(self, loader: Loader, k: int) -> dict[str, jax.Array]:
        """Batch ``k`` of ``loader`` on the mesh; each device's rows are read only for it."""
        rows = loader.batch_size
        shape = (rows, self.block_size)
        pieces: dict[tuple[int, int], dict[str, np.ndarray]] = {}

        def piece(index: tuple, name: str) -> np.ndarray:
            start, stop, _ = index[0].indices(rows)
            if (start, stop) not in pieces:
                pieces[(start, stop)] = loader.batch(k, rows=slice(start, stop))
            return pieces[(start, stop)][name]

        return {name: jax.make_array_from_callback(shape, self.batch_sharding,
                                                   lambda index, n=name: piece(index, n))
                for name in BATCH_KEYS}

    # ------------------------------------------------------------------ stepping

    def _prepare(self) -> None:
        """State, compiled step and MFU peak: everything a step needs (outside any timing)."""
        self._ensure_state()
        _ = self.train_step
        if self._key_device is None:
            self._key_device = jax.device_put(self.base_key, self.replicated)
        self.peak_flops  # noqa: B018  (measure the CPU peak before the clock starts)

    def _dispatch(self) -> dict[str, jax.Array]:
        """Enqueue step ``self.step`` -> ``self.step + 1``; returns the metrics as device arrays."""
        batch = self._place(self.loader, self.step)
        self.state, metrics = self.train_step(self.state, batch, self._key_device)
        self.step += 1
        return metrics

    @property
    def peak_flops(self) -> float | None:
        """Peak FLOP/s of the devices of the mesh for the activation dtype (None: unknown chip).

        Chips: the table of `theseus.train.mfu` times the device count. CPU: the
        measured matmul peak of this machine (all its virtual devices share it),
        cached in ``peak_cache``.
        """
        if self._peak is None:
            device = self.mesh.devices.flat[0]
            dtype = self.model_config.activation_dtype
            if device.platform == "cpu" and jax.process_index() != 0:
                self._peak = float("nan")  # only process 0 writes metrics: the others neither measure nor cache
            elif device.platform == "cpu":
                self._peak = cached_cpu_peak(self.peak_cache, str(device.device_kind), dtype, self.log)
            else:
                chip = mfu.chip_peak(device, dtype)
                if chip is None:
                    self.log.warning(f"MFU | unknown chip {device.device_kind!r}: train/mfu is NaN")
                    self._peak = float("nan")
                else:
                    self._peak = chip * self.mesh.devices.size
        return None if self._peak != self._peak else self._peak

    def _metrics(self, step: int, device_metrics: dict | None, val: tuple | None, seconds: float,
                 steps: int) -> dict[str, Any]:
        """Host metrics of ``step`` (blocks on the device values)."""
        out: dict[str, Any] = {}
        if device_metrics is not None:
            host = jax.device_get(device_metrics)
            tps = steps * self.tokens_per_step / seconds if seconds > 0 else float("nan")
            peak = self.peak_flops
            out = {
                "train/loss": float(host["loss"]),
                "train/lr": float(host["lr"]),
                "train/grad_norm": float(host["grad_norm"]),
                "train/tokens": int(step * self.tokens_per_step),
                "train/mfu": float(mfu.mfu(tps, self.flops_per_token, peak)) if peak and tps == tps else float("nan"),
                "train/tokens_per_second": float(tps),
            }
        if val is not None:
            total, count = jax.device_get(val)
            out["val/loss"] = float(total) / max(float(count), 1.0)
        return out

    def _emit(self, step: int, metrics: dict[str, Any], bar: TrainProgress | None = None) -> None:
        if "train/loss" in metrics:
            self.log.info(f"TRAIN | {step}/{self.total_steps} | loss {metrics['train/loss']}")
            self.log.debug(f"STEP | {step} | {metrics}")
        if "val/loss" in metrics:
            self.log.info(f"VAL | {step}/{self.total_steps} | loss {metrics['val/loss']}")
        if bar is not None:
            bar.update(step, metrics.get("train/loss"), metrics.get("train/tokens_per_second"))
        if self.on_report is not None:
            self.on_report(step, metrics)

    def _validate_async(self) -> tuple[jax.Array, jax.Array]:
        """Enqueue the validation pass on the current params: (sum of token losses, token count) on device."""
        if self.val_loader is None:
            raise ValueError("validation is off (training.validation is false or validation_steps is 0)")
        if self._eval_step is None:
            param_sh = self.state_shardings["params"]
            batch_sh = {k: self.batch_sharding for k in BATCH_KEYS}
            self._eval_step = jax.jit(make_eval_step(self.model), in_shardings=(param_sh, batch_sh),
                                      out_shardings=self.replicated)
        total = jnp.zeros((), jnp.float32)
        count = jnp.zeros((), jnp.float32)
        params = self.state["params"]
        for k in range(self._val_steps):
            out = self._eval_step(params, self._place(self.val_loader, k))
            tokens = out["tokens"].astype(jnp.float32)
            total = total + out["loss"] * tokens
            count = count + tokens
        return total, count

    def validate(self) -> float:
        """Mean token loss of the current params over ``validation_steps`` batches of the val split.

        The val batches are the same every time (batches 0.. of the val loader).

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.validate() > 0
        True
        """
        self._ensure_state()
        total, count = jax.device_get(self._validate_async())
        return float(total) / max(float(count), 1.0)

    def _val_due(self, step: int) -> bool:
        return self.validation and (step % self._val_every == 0 or step == self.total_steps)

    def _ckpt_due(self, step: int) -> bool:
        return self.folder_fn is not None and (
            step % self._ckpt_every == 0 or step == self.total_steps)

    def tick(self) -> dict[str, Any]:
        """Advance exactly one step (consuming ``batch()``) and return its metrics.

        Like a step of ``train()``: ``on_report`` is called (always, with the train
        metrics), validation and the checkpoint run when their interval says so.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> m = trainer.tick(); trainer.step, m["train/tokens"]
        (1, 64)
        """
        if self.step >= self.total_steps:
            raise ValueError(f"the run is finished: step {self.step} of {self.total_steps}")
        self._prepare()
        start = time.perf_counter()
        device_metrics = self._dispatch()
        jax.block_until_ready(device_metrics)
        seconds = time.perf_counter() - start
        k = self.step
        val = self._validate_async() if self._val_due(k) else None
        metrics = self._metrics(k, device_metrics, val, seconds, 1)
        self._emit(k, metrics)
        if self._ckpt_due(k):
            self._save_step(k)
        self._drain()
        return metrics

    def train(self, until: int | None = None) -> None:
        """Run steps until ``until`` (default and at most ``total_steps``), reporting and checkpointing.

        Reports every ``report_interval`` steps and at the last step, validation every
        ``validation_interval`` steps and at the end of the run, checkpoints (with
        ``folder_fn``) every ``checkpoint_interval`` steps and when it returns. Metrics
        reach ``on_report`` one step late: the next step is already enqueued when the
        host fetches them. Returns after the last checkpoint is committed.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.train(until=2); trainer.step
        2
        """
        end = self.total_steps if until is None else min(int(until), self.total_steps)
        if self.step >= end:
            self.log.info(f"TRAIN | nothing to do: step {self.step}, asked to run until {end}")
            return
        self._prepare()
        report_every = self._report_every
        pending: tuple[int, dict | None, tuple | None] | None = None
        inflight: collections.deque = collections.deque()
        last = (self.step, time.perf_counter())
        self.log.info(f"BEGIN TRAINING | step {self.step} -> {end}")

        def finish(p: tuple[int, dict | None, tuple | None], bar: TrainProgress) -> None:
            nonlocal last
            k, device_metrics, val = p
            jax.block_until_ready(device_metrics)
            now = time.perf_counter()
            metrics = self._metrics(k, device_metrics, val, now - last[1], k - last[0])
            if device_metrics is not None:
                last = (k, now)
            self._emit(k, metrics, bar)

        show = self.progress if jax.process_index() == 0 else False
        with TrainProgress(self.total_steps, self.step, show) as bar:
            while self.step < end:
                device_metrics = self._dispatch()
                k = self.step
                inflight.append(device_metrics["loss"])
                if len(inflight) > 2:  # at most two steps in flight: bounded host run-ahead
                    inflight.popleft().block_until_ready()
                if pending is not None:
                    finish(pending, bar)
                    pending = None
                report = k % report_every == 0 or k == end
                val = self._validate_async() if self._val_due(k) else None
                if report or val is not None:
                    pending = (k, device_metrics if report else None, val)
                if self._ckpt_due(k) or (k == end and self.folder_fn is not None):
                    self._save_step(k)
                self._drain()
            if pending is not None:
                finish(pending, bar)
        self.wait()

    # ------------------------------------------------------------------ checkpoints

    def _sidecars(self, step: int) -> dict[str, bytes | str]:
        out: dict[str, bytes | str] = {RNG_FILE: key_to_json(self.base_key, self.seed),
                                       CONFIG_FILE: to_yaml(self.config)}
        extra = self.sidecars(step) if callable(self.sidecars) else (self.sidecars or {})
        for name, data in extra.items():
            out[name] = data
        return out

    def save(self, folder: str, on_commit: Callable[[str], Any] | None = None) -> None:
        """Start checkpointing the current state into ``folder`` (``rng.json``, ``config.yaml``, sidecars).

        Returns once the device state is copied to host; the files are written in
        the background. ``on_commit(folder)`` (and ``on_checkpoint(step, folder)``)
        run on this thread after the commit, at the latest in ``wait()``.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> import tempfile
        >>> folder = tempfile.mkdtemp() + "/step-0"
        >>> trainer.save(folder); trainer.wait(); os.path.exists(folder + "/MANIFEST.json")
        True
        """
        # the previous checkpoint's record first: were it delivered after this save starts,
        # a disk this save fills would refuse it and leave that complete checkpoint unreferenced
        self.wait()
        state = self._ensure_state()
        step = self.step
        commits = self._commits
        self._checkpointer.save(folder, state, self._sidecars(step),
                                on_commit=lambda f: commits.put((step, f, on_commit)))
        self._last_saved = step

    def _save_step(self, step: int) -> None:
        if self._last_saved == step:
            return
        folder = self.folder_fn(step)
        self.log.debug(f"CHECKPOINT | saving step {step} to {folder}")
        self.save(folder)

    def _drain(self) -> None:
        """Deliver the commit notifications of finished checkpoints (on this thread)."""
        while True:
            try:
                step, folder, extra = self._commits.get_nowait()
            except queue.Empty:
                return
            self.log.info(f"CHECKPOINT | saved checkpoint at step {step} in {folder}")
            if extra is not None:
                extra(folder)
            if self.on_checkpoint is not None:
                self.on_checkpoint(step, folder)

    def wait(self) -> None:
        """Block until the pending checkpoint is committed, deliver its callbacks; re-raise its error.

        >>> root, config = tiny_example()
        >>> Trainer(config, root, peak_flops=1e12, progress=False).wait()  # nothing pending: returns
        """
        self._checkpointer.wait()
        self._drain()

    def close(self) -> None:
        """Finish pending checkpoints and drop the device state (also on leaving a ``with`` block).

        >>> root, config = tiny_example()
        >>> with Trainer(config, root, peak_flops=1e12, progress=False) as trainer:
        ...     _ = trainer.init()
        >>> trainer.state is None
        True
        """
        try:
            self.wait()
        finally:
            self.state = None
            self._compiled = {}
            self._eval_step = None

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ replay

    def find(self, module_type: type | tuple[type, ...]) -> list[tuple[str, ...]]:
        """Paths of the modules of ``module_type`` in forward order, e.g. ``[('blocks_0', 'mlp'), ...]``.

        Abstract (no compute). ``debug()`` without a path uses the first one.

        >>> from theseus.model.layers.mlp import MLP
        >>> root, config = tiny_example()
        >>> Trainer(config, root, peak_flops=1e12, progress=False).find(MLP)
        [('blocks_0', 'mlp')]
        """
        params = self.abstract_state["params"]
        idx = jax.ShapeDtypeStruct((1, self.block_size), jnp.int32)
        self._last_find = find_modules(self.model, {"params": params}, module_type, idx)
        return list(self._last_find)

    def debug(self, path: str | Sequence[str] | None = None, *, micro: int = 0) -> DebugResult:
        """``(layer, inputs)`` of the module at ``path`` in the forward pass on ``batch()`` with the current params.

        The forward pass is deterministic and runs on the rows that made up
        micro-batch ``micro`` of the next step (rows ``micro::accumulation`` of
        ``batch()``; all of them without accumulation). ``inputs`` holds the module's
        arguments by name (``inputs.x``); ``layer`` is the module bound to its
        parameters, callable eagerly (``layer.c_fc(inputs.x)``, ``layer(**inputs)``,
        bitwise equal to the captured ``result.output``). ``layer.close()`` frees it;
        ``with trainer.debug(...) as (layer, inputs):`` too. Without ``path``: the
        first path of the last ``find``, or the first MLP when nothing was found yet
        (as the seed's walkthrough calls it on a fresh trainer).

        >>> from theseus.model.layers.mlp import MLP
        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = trainer.find(MLP)
        >>> with trainer.debug() as (layer, inputs):
        ...     layer.c_fc(inputs.x).shape
        (4, 16, 128)
        """
        if path is None:
            path = (self._last_find or self.find(MLP))[0]
            self.log.info(f"debug: no path given, using {'/'.join(path)}")
        path = normalize_path(path)
        if not 0 <= micro < self.accumulation:
            raise ValueError(f"micro must be in [0, {self.accumulation}), got {micro}")
        x = jnp.asarray(self.batch()["x"][micro::self.accumulation])
        params = self._ensure_state()["params"]
        return capture(self.model, {"params": params}, path, x, deterministic=True, log=self.log)

    def __repr__(self) -> str:
        return (f"Trainer(step={self.step}/{self.total_steps}, dataset={self.dataset.name!r}, "
                f"batch={self.batch_size}x{self.block_size}, per_device={self.per_device_batch_size}, "
                f"mesh={dict(self.mesh.shape)})")
