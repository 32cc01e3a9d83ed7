"""The training loop of any recipe: state, batches, steps, reports, evaluations, checkpoints.

The trainer knows nothing of the event store or of jobs: it reads a recipe
(`theseus.train.recipe.Recipe`: model, data, optimizer, schedule, loss,
evaluations) and talks to the outside through callbacks.

- ``on_report(step, metrics)``: every ``logging.report_interval`` steps (and the last
  step of a ``train()`` call) with ``train/loss``, ``train/lr``, ``train/grad_norm``,
  ``train/tokens``, ``train/step``, ``train/mfu``, ``train/tokens_per_second``; every
  ``logging.validation_interval`` steps and at the last step also ``val/loss`` and the
  metrics of the recipe's evaluations and analyses (a validation-only step reports
  those and its position, ``train/step`` and ``train/tokens``). ``step`` is the number of
  updates applied: the node at seq ``step``.
  Train metrics are fetched from the device one step late, so the next step is
  already running while the callback works.
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
>>> [s for s, _ in seen], seen[-1][1][-2:]
([1, 2, 3], ['val/fineweb/loss', 'val/loss'])
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from loguru import logger
from omegaconf import DictConfig

from theseus.data.mixture import Sampling, open_mixture
from theseus.data.passes import one_pass
from theseus.errors import BadInput
from theseus.model.debug import DebugResult, capture, find_modules, normalize_path
from theseus.model.gpt import count_params
from theseus.model.layers.mlp import MLP
from theseus.store.layout import CONFIG_FILE, RNG_FILE
from theseus.store.node import describe as describe_node
from theseus.train import autobatch, mfu
from theseus.train import checkpoint as ckpt
from theseus.train import manifest as mf
from theseus.train.checkpointing import Checkpoints
from theseus.train.compile_cache import enable_compilation_cache
from theseus.train.config import load_config, to_yaml
from theseus.train.evaluations import EvalContext
from theseus.train.example import tiny_example
from theseus.train.generate import Sample, generate, tokenizer_of
from theseus.train.plan import TrainingPlan
from theseus.train.progress import TrainProgress
from theseus.train.recipe import Recipe, as_recipe
from theseus.train.rng import init_key, key_from_json, key_to_json
from theseus.train.sharding import DATA, ShardConfig, data_sharding, describe, make_mesh, state_shardings
from theseus.train.step import BATCH_KEYS, init_state, make_eval_step, make_train_step

__all__ = ["Trainer", "tiny_example"]

_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
ReportFn = Callable[[int, dict[str, Any]], Any]
CheckpointFn = Callable[[int, str], Any]


class Trainer:
    """Trains a recipe's model on its data with the config of its job (`gpt/train/pretrain` by default).

    Construction checks the config before any device work (`Recipe.check`: keys,
    types, sizes, the model's shape, settings not implemented), builds the mesh and
    the training plan (`TrainingPlan`: batching, steps, tokens; tensor parallelism vs
    heads and devices, the micro-batch split), opens the data (a missing dataset
    names its tokenize job; ``block_size`` must fit), lays the state out on the mesh,
    logs TOPOLOGY / BATCHING / STEPS / TOKENS, and with ``per_device_batch_size=-1``
    compiles the real step for each candidate size to pick the largest that fits.

    Arguments beyond ``config`` (dict / DictConfig / dataclass / YAML) and ``root``:

    - ``recipe``: the parts to train with (a `Recipe` subclass or instance; default `Recipe`).
    - ``on_report(step, metrics)``, ``on_checkpoint(step, folder)``: see the module doc;
      also settable as attributes later.
    - ``folder_fn(step) -> folder``: where ``train()`` checkpoints step ``step``
      (None: no periodic checkpoints; ``save(folder)`` still works).
    - ``write_artifact(step, name, data) -> path``: publishes a file an analysis of step ``step``
      writes (the job puts it under ``objects/<node-id>/analysis/``); None: analyses cannot write files.
    - ``sidecars``: extra files for each checkpoint folder, a mapping name -> bytes/str
      or a callable ``step -> mapping`` (e.g. ``job.json``); ``rng.json`` and
      ``config.yaml`` are always written.
    - ``peak_cache``: folder caching the measured CPU peak, one JSON file per chip and dtype (default
      ``<root>/meta/cpu_peak``); ``peak_flops`` overrides the peak.
    - ``seed``: seed of the base key of a fresh run (a restore reads ``rng.json``).
    - ``devices``, ``memory_budget_bytes`` (autobatch), ``progress`` (None: a bar
      when stderr is a terminal), ``log`` (a loguru-like logger).

    Methods: ``init()``, ``restore(folder)``, ``batch()``, ``tick()``, ``train(until=None)``,
    ``validate()``, ``evaluate()``, ``generate(prompts)``, ``save(folder)``, ``wait()``, ``find(ModuleType)``,
    ``debug(path)``, ``close()``.

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
        recipe: Recipe | type[Recipe] | None = None,
        on_report: ReportFn | None = None,
        on_checkpoint: CheckpointFn | None = None,
        log: Any = logger,
        folder_fn: Callable[[int], str] | None = None,
        write_artifact: Callable[[int, str, bytes], str] | None = None,
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
        self.recipe = as_recipe(recipe)
        self.on_report = on_report
        self.write_artifact = write_artifact
        self.sidecars = sidecars
        self.peak_cache = peak_cache or f"{self.root}/meta/cpu_peak"
        self._peak = peak_flops
        self.progress = progress
        self.seed = int(seed)

        # ---- the config, checked before any device work ------------------------------
        self.config: DictConfig = load_config(config, type(self.recipe).Config)
        cfg = self.config
        self.recipe.check(cfg)

        # ---- mesh and the plan's batch split (the micro-batch is probed below) -----------
        arch = cfg.architecture
        self.shard = ShardConfig(tp=cfg.shard.tp, fsdp=cfg.shard.fsdp, zero=cfg.shard.zero,
                                 n_head=int(arch.n_head) if "n_head" in arch else None)  # tp must divide n_head
        self.mesh = make_mesh(self.shard.tp, devices)  # tp must divide the device count
        self.data_parallel = int(self.mesh.shape[DATA])
        self.plan = TrainingPlan.build(cfg, self.data_parallel)  # the split checks, before compiling anything
        self.total_steps = self.plan.total_steps

        # ---- data ---------------------------------------------------------------------------
        self.sources = [s.dataset for s in self.recipe.sources(cfg)]
        self.loader = self.recipe.loader(cfg, self.root, "train", self.plan.batch_size)
        self._check_vocabulary(self.loader)
        self.validation = bool(cfg.training.validation) and cfg.training.validation_steps > 0
        self.evaluations = list(self.recipe.EVALUATION) if cfg.training.evaluate else []
        self.analyses = list(self.recipe.ANALYSIS) if cfg.training.analyze else []
        self._val_steps = int(cfg.training.validation_steps)
        self._tokenizer: Any = None
        if self.validation or self.evaluations or self.analyses:
            self.recipe.loader(cfg, self.root, "val", 1)  # the val split exists and block_size fits it

        # ---- model, optimizer, abstract state and its layout --------------------------------
        self.model = self.recipe.model(cfg)
        self.token_loss = self.recipe.loss(cfg)
        self.schedule = self.recipe.schedule(cfg, self.total_steps)
        self.optimizer = self.recipe.optimizer(cfg, self.total_steps)
        self.base_key = jax.random.PRNGKey(self.seed)
        T = self.block_size
        abstract = jax.eval_shape(lambda k: init_state(self.model, self.optimizer, k, T), self.base_key)
        self.state_shardings = state_shardings(abstract, self.shard, self.mesh)  # TP-indivisible dims raise here
        self.abstract_state = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, self.state_shardings
        )
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.batch_sharding = data_sharding(self.mesh)
        self.n_params = count_params(abstract["params"])
        self.flops_per_token = self.recipe.MODEL.flops_per_token(arch, abstract["params"])

        # ---- topology, the probed micro-batch, the plan's log lines --------------------------
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
        local = int(self.topology["local_replicas"]) or 1
        probe = None
        if cfg.training.per_device_batch_size == -1:
            def probe(candidates: list[int]) -> int:
                result = autobatch.probe_batch_size(candidates, self._compile_step, memory_budget_bytes)
                self.autobatch_trials = result.trials
                tried = ", ".join(f"{s}: {'OOM' if b is None else f'{b / 2**20:.1f} MiB'}"
                                  f"{'' if f else ' (too big)'}" for s, b, f in result.trials)
                log.info(f"AUTOBATCH | per_device_batch_size={result.batch_size} | tried {tried}")
                return autobatch.agreed_batch_size(result.batch_size)  # one size for every process
        self.plan = TrainingPlan.build(cfg, self.data_parallel, local, probe)
        for line in self.plan.lines():
            log.info(line)
        log.info(f"MODEL | Total Parameters: {self.n_params / 1e6:.2f}m")
        self.val_loader = (self.recipe.loader(cfg, self.root, "val", self.plan.micro_rows)
                           if self.validation else None)
        self._val_loaders: dict[str, Any] = {}
        if self.evaluations or self.analyses:  # open each source's val split now: a bad one fails before any step
            for name in self.sources:
                self._val_loader(name)

        # ---- runtime state ------------------------------------------------------------------
        self.state: dict | None = None
        self.step = 0
        self._key_device: jax.Array | None = None
        self._eval_step = None
        self._losses: dict[int, tuple[int, tuple]] = {}  # id(loader) -> (step, the loss pass of that step)
        self._val_batches: dict[int, int] = {}  # id(loader) -> batches one validation pass reads
        self._host_batch: tuple[int, dict] | None = None
        self._last_find: list[tuple[str, ...]] = []
        self._report_every = int(cfg.logging.report_interval)
        self._val_every = int(cfg.logging.validation_interval)
        self.checkpoints = Checkpoints(folder_fn, int(cfg.logging.checkpoint_interval), self.total_steps,
                                       on_checkpoint, log)

    def _check_vocabulary(self, loader: Any) -> None:
        """Every dataset's tokenizer fits the model's vocabulary."""
        datasets = [loader.dataset] if hasattr(loader, "dataset") else list(loader.datasets)
        limit = int(self.config.architecture.vocab_size)
        for dataset in datasets:
            vocab = (dataset.tokenizer or {}).get("vocab_size")
            if isinstance(vocab, int) and vocab > limit:
                raise BadInput(f"dataset {dataset.name!r} was tokenized with a vocabulary of {vocab} tokens, more "
                                 f"than architecture.vocab_size {limit}")

    # ------------------------------------------------------------------ properties

    @property
    def per_device_batch_size(self) -> int:
        """Rows of one micro-batch on one device."""
        return self.plan.per_device_batch_size

    @property
    def accumulation(self) -> int:
        """Micro-batches per step."""
        return self.plan.accumulation

    @property
    def micro_rows(self) -> int:
        """Rows of one micro-batch over all data-parallel devices."""
        return self.plan.micro_rows

    @property
    def batch_size(self) -> int:
        """The global batch size (rows per step)."""
        return self.plan.batch_size

    @property
    def block_size(self) -> int:
        """Tokens per row."""
        return int(self.config.architecture.block_size)

    @property
    def tokens_per_step(self) -> int:
        """batch_size * block_size."""
        return self.plan.tokens_per_step

    @property
    def dataset(self) -> Any:
        """The dataset of a single-dataset job (a mixture has ``loader.datasets``)."""
        return getattr(self.loader, "dataset", None)

    @property
    def on_checkpoint(self) -> CheckpointFn | None:
        """Called with ``(step, folder)`` after each commit."""
        return self.checkpoints.on_checkpoint

    @on_checkpoint.setter
    def on_checkpoint(self, fn: CheckpointFn | None) -> None:
        self.checkpoints.on_checkpoint = fn

    @property
    def folder_fn(self) -> Callable[[int], str] | None:
        """Where ``train()`` checkpoints each step (None: no periodic checkpoints)."""
        return self.checkpoints.folder_fn

    @folder_fn.setter
    def folder_fn(self, fn: Callable[[int], str] | None) -> None:
        self.checkpoints.folder_fn = fn

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the job's ``tokenizer`` section (the one its datasets recorded), built once.

        >>> root, config = tiny_example()
        >>> Trainer(config, root, peak_flops=1e12, progress=False).tokenizer.name
        'cl100k_base'
        """
        if self._tokenizer is None:
            datasets = [self.loader.dataset] if hasattr(self.loader, "dataset") else list(self.loader.datasets)
            self._tokenizer = tokenizer_of(self.config, [d.tokenizer for d in datasets], root=self.root)
        return self._tokenizer

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
            accum = self.plan.batch_size // (micro * self.data_parallel)
            step = make_train_step(self.model, self.optimizer, accum, schedule=self.schedule,
                                   token_loss=self.token_loss)
            batch_sh = {k: self.batch_sharding for k in BATCH_KEYS}
            jitted = jax.jit(step, in_shardings=(self.state_shardings, batch_sh, self.replicated),
                             out_shardings=(self.state_shardings, self.replicated), donate_argnums=0)
            key = jax.ShapeDtypeStruct(self.base_key.shape, self.base_key.dtype, sharding=self.replicated)
            self._compiled[micro] = jitted.lower(self.abstract_state, self._abstract_batch(self.plan.batch_size),
                                                 key).compile()
        return self._compiled[micro]

    @property
    def train_step(self) -> Any:
        """The compiled ``(state, batch, base_key) -> (state, metrics)`` of this trainer (state donated)."""
        step = self._compile_step(self.per_device_batch_size)
        self._compiled = {self.per_device_batch_size: step}  # keep only the chosen size
        return step

    # ------------------------------------------------------------------ state

    def init(self) -> dict:
        """A fresh state (params from `theseus.train.rng.init_key` of the base key), laid out on the mesh; step 0.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> int(trainer.init()["step"])
        0
        """
        T = self.block_size
        init_fn = jax.jit(lambda k: init_state(self.model, self.optimizer, k, T), out_shardings=self.state_shardings)
        self.state = init_fn(init_key(self.base_key))
        self._set_step(0)
        self.log.debug(f"TRAINER | fresh state, seed {self.seed}")
        return self.state

    def _set_step(self, step: int) -> None:
        self.step = int(step)
        self._host_batch = None
        self._losses.clear()
        self.checkpoints.forget()
        self._key_device = jax.device_put(self.base_key, self.replicated)

    def _ensure_state(self) -> dict:
        if self.state is None:
            self.init()
        return self.state

    def restore(self, folder: str, partial: bool = True, verify: bool = True, node: Any = None,
                step: int | None = None) -> dict:
        """Load the checkpoint in ``folder`` onto this trainer's mesh; its ``rng.json`` becomes the base key.

        Each device reads only its slices, so a checkpoint from another topology
        restores here. ``partial=True``: leaves missing from the checkpoint or of
        another shape keep a fresh initialisation (reported in the log);
        ``partial=False`` makes any difference an error. Returns the state; the
        step counter continues from the checkpoint's ``step``.

        Every file read is checked against the folder's MANIFEST.json as it is read
        (`theseus.train.checkpoint.restore`; ``verify=False`` skips the sha256 only).
        ``node`` (a `theseus.store.Node`): the node whose checkpoint this is; the folder's
        ``job.json`` must name it, the errors name it. ``step``: the step that node
        recorded; the restored state must hold it (a folder of another node otherwise).

        >>> import tempfile
        >>> root, config = tiny_example()
        >>> folder = tempfile.mkdtemp() + "/ckpt"
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = trainer.tick(); trainer.save(folder); trainer.wait()
        >>> other = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = other.restore(folder); other.step
        1
        >>> other.restore(folder, step=2)
        Traceback (most recent call last):
        ...
        theseus.train.manifest.DamagedFolder: checkpoint .../ckpt holds step 1, not step 2: it is another node's
        """
        folder = folder.rstrip("/")
        label = f"node {node.id} ({node.name}:{node.nonce}:{node.seq})" if node is not None else None
        try:
            state, report = self._restore_checked(folder, partial, verify, node, step)
        except (FileNotFoundError, ValueError) as e:  # DamagedFolder is a ValueError
            if label is None or str(e).startswith("checkpoint of node "):
                raise
            raise type(e)(f"checkpoint of {label}: {e}") from None
        self.state = state
        self._set_step(int(jax.device_get(state["step"])))
        level = self.log.info if report.exact else self.log.warning
        level(f"RESTORE | step {self.step} from {folder} | {report}")
        return state

    @staticmethod
    def _sealed_of(folder: str, node: Any, verify: bool) -> mf.Sealed:
        """``folder`` opened for checked reads, refused when its ``job.json`` names another node than ``node``."""
        sealed = mf.Sealed(folder)
        owner = ckpt.saved_for(sealed, verify)
        if node is not None and owner is not None and owner != node.id:
            raise mf.DamagedFolder(f"{folder} holds the checkpoint of {describe_node(owner)}, not of "
                                   f"node {node.id}: not restored")
        return sealed

    def start_from(self, folder: str, node: Any = None, verify: bool = True) -> dict:
        """A fresh state (step 0, a fresh optimizer, this trainer's base key) holding the parameters of the
        checkpoint in ``folder``, cast to this trainer's parameter dtype; what ``training.init_from`` and a
        params-only checkpoint (an imported model) start from. A parameter missing from the checkpoint or of
        another shape is a ValueError naming it; ``node``: the node the folder must belong to.

        >>> import tempfile
        >>> root, config = tiny_example()
        >>> source = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = source.tick(); folder = tempfile.mkdtemp() + "/source"; source.save(folder); source.wait()
        >>> state = Trainer(config, root, peak_flops=1e12, progress=False).start_from(folder)
        >>> int(state["step"]), bool((state["params"]["wte"]["embedding"] == source.params["wte"]["embedding"]).all())
        (0, True)
        """
        folder = folder.rstrip("/")
        sealed = self._sealed_of(folder, node, verify)
        stored = {e["path"]: e for e in ckpt.read_index(folder)["leaves"]}
        abstract = {"params": self.abstract_state["params"]}
        names = ckpt.leaf_paths(abstract)
        wrong = [f"{n} ({'missing' if n not in stored else tuple(stored[n]['shape'])} != {tuple(a.shape)})"
                 for n, a in zip(names, jax.tree.leaves(abstract), strict=True)
                 if n not in stored or tuple(stored[n]["shape"]) != tuple(a.shape)]
        if wrong:
            raise BadInput(f"the parameters of {folder} do not fit this model: {', '.join(wrong[:8])}")
        target = jax.tree.unflatten(jax.tree.structure(abstract), [
            jax.ShapeDtypeStruct(a.shape, np.dtype(stored[n]["dtype"]), sharding=a.sharding)
            for n, a in zip(names, jax.tree.leaves(abstract), strict=True)])
        restored, _ = ckpt.restore(folder, target, partial=True, verify=verify, sealed=sealed)
        shardings = self.state_shardings
        params = jax.jit(lambda p: jax.tree.map(lambda x, a: x.astype(a.dtype), p, abstract["params"]),
                         out_shardings=shardings["params"])(restored["params"])
        opt_state = jax.jit(self.optimizer.init, out_shardings=shardings["opt_state"])(params)
        self.state = {"params": params, "opt_state": opt_state,
                      "step": jax.device_put(jnp.zeros((), jnp.int32), shardings["step"])}
        self._set_step(0)
        self.log.info(f"INIT FROM | parameters of {folder}, step 0, a fresh optimizer")
        return self.state

    def _restore_checked(self, folder: str, partial: bool, verify: bool, node: Any,
                         step: int | None) -> tuple[dict, ckpt.RestoreReport]:
        """`restore`'s reads: the folder's files checked, its owner and step compared; the state is not set."""
        sealed = self._sealed_of(folder, node, verify)
        if RNG_FILE in sealed.listed:
            rng_text = sealed.read(RNG_FILE, check=verify).decode()
            self.base_key = key_from_json(rng_text)
            self.seed = json.loads(rng_text).get("seed", self.seed)
        elif not partial:
            raise FileNotFoundError(f"{folder} has no {RNG_FILE}")
        else:
            self.log.warning(f"RESTORE | {folder} has no {RNG_FILE}; keeping base key of seed {self.seed}")
        index = {e["path"]: (tuple(e["shape"]), e["dtype"]) for e in ckpt.read_index(folder)["leaves"]}
        if not any(name.startswith("opt_state/") for name in index):  # params only (an import): fresh optimizer
            state = self.start_from(folder, node, verify)
            self.state = None  # restore() sets it, as for any checkpoint
            return state, ckpt.RestoreReport(restored=ckpt.leaf_paths({"params": state["params"]}))
        wanted = {name: (tuple(leaf.shape), np.dtype(leaf.dtype).name)
                  for name, leaf in zip(ckpt.leaf_paths(self.abstract_state),
                                        jax.tree.leaves(self.abstract_state), strict=True)}
        if index == wanted or not partial:
            state, report = ckpt.restore(folder, self.abstract_state, partial=False, verify=verify, sealed=sealed)
        else:
            self.state = None
            target = self.init()
            state, report = ckpt.restore(folder, target, partial=True, verify=verify, sealed=sealed)
        saved = int(jax.device_get(state["step"]))
        if step is not None and saved != step:
            raise mf.DamagedFolder(f"checkpoint {folder} holds step {saved}, not step {step}: it is another node's")
        return state, report

    # ------------------------------------------------------------------ batches

    def batch(self) -> dict[str, np.ndarray]:
        """The global batch the next step consumes (NumPy ``x``, ``y``, ``padding_mask``, ``[batch_size, block_size]``).

        A pure function of (datasets, rates, data seed, batch size, block size, step):
        the same until ``tick()`` advances a step.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.batch() is trainer.batch()
        True
        """
        if self._host_batch is None or self._host_batch[0] != self.step:
            self._host_batch = (self.step, self.loader.batch(self.step))
        return self._host_batch[1]

    def _place(self, loader: Any, k: int) -> dict[str, jax.Array]:
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
            dtype = str(self.config.architecture.dtype.activation) if "dtype" in self.config.architecture \
                else "float32"
            if device.platform == "cpu" and jax.process_index() != 0:
                self._peak = float("nan")  # only process 0 writes metrics: the others neither measure nor cache
            elif device.platform == "cpu":
                self._peak = mfu.cached_cpu_peak(self.peak_cache, str(device.device_kind), dtype, self.log)
            else:
                chip = mfu.chip_peak(device, dtype)
                if chip is None:
                    self.log.warning(f"MFU | unknown chip {device.device_kind!r}: train/mfu is NaN")
                    self._peak = float("nan")
                else:
                    self._peak = chip * self.mesh.devices.size
        return None if self._peak != self._peak else self._peak

    def position(self, step: int | None = None) -> dict[str, int]:
        """Where the run is after ``step`` updates (default: the current step): ``train/step`` and
        ``train/tokens``, the keys every report carries, so that each node of a run can be placed
        against steps or tokens.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.position(3)
        {'train/step': 3, 'train/tokens': 192}
        """
        step = self.step if step is None else int(step)
        return {"train/step": step, "train/tokens": int(step * self.tokens_per_step)}

    def _train_metrics(self, step: int, device_metrics: dict, seconds: float, steps: int) -> dict[str, Any]:
        """Host train metrics of ``step`` (blocks on the device values)."""
        host = jax.device_get(device_metrics)
        tps = steps * self.tokens_per_step / seconds if seconds > 0 else float("nan")
        peak = self.peak_flops
        return {
            "train/loss": float(host["loss"]),
            "train/lr": float(host["lr"]),
            "train/grad_norm": float(host["grad_norm"]),
            **self.position(step),
            "train/mfu": float(mfu.mfu(tps, self.flops_per_token, peak)) if peak and tps == tps else float("nan"),
            "train/tokens_per_second": float(tps),
        }

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

    # ------------------------------------------------------------------ validation and evaluations

    def _val_loader(self, dataset: str | None) -> Any:
        """The val loader of one dataset of the job (None: its whole data), ``micro_rows`` rows per batch.

        A single-dataset job's one dataset shares the ``val/loss`` loader, so its loss is computed once.
        """
        if dataset is not None and dataset not in self.sources:
            raise BadInput(f"dataset {dataset!r} is not one of this job's datasets: {self.sources}")
        if dataset is None or len(self.sources) == 1:
            if self.val_loader is None:
                self.val_loader = self.recipe.loader(self.config, self.root, "val", self.micro_rows)
            return self.val_loader
        if dataset not in self._val_loaders:  # one source of a mixture, padded to block_size like the mixture
            self._val_loaders[dataset] = open_mixture(
                self.root, [Sampling(dataset, 1.0)], "val", seed=self.config.data.seed, batch_size=self.micro_rows,
                block_size=self.block_size, suffix=self.config.data.suffix)
        return self._val_loaders[dataset]

    def _loss_async(self, loader: Any) -> tuple[jax.Array, jax.Array]:
        """Enqueue the loss pass of the current params over batches 0.. of ``loader`` (`_val_pass`):
        (sum of token losses, token count) on device; one pass per loader and step."""
        cached = self._losses.get(id(loader))
        if cached is not None and cached[0] == self.step:
            return cached[1]
        if self._eval_step is None:
            param_sh = self.state_shardings["params"]
            batch_sh = {k: self.batch_sharding for k in BATCH_KEYS}
            self._eval_step = jax.jit(make_eval_step(self.model, token_loss=self.token_loss),
                                      in_shardings=(param_sh, batch_sh),
                                      out_shardings=self.replicated)
        total = jnp.zeros((), jnp.float32)
        count = jnp.zeros((), jnp.float32)
        params = self.state["params"]
        for k in range(self._val_pass(loader)):
            out = self._eval_step(params, self._place(loader, k))
            tokens = out["tokens"].astype(jnp.float32)
            total = total + out["loss"] * tokens
            count = count + tokens
        self._losses[id(loader)] = (self.step, (total, count))
        return total, count

    def _val_pass(self, loader: Any) -> int:
        """Batches a validation pass reads of ``loader``: one pass of its split (`theseus.data.passes`),
        at most ``validation_steps``; logged at the first pass of each loader."""
        if id(loader) not in self._val_batches:
            cap = max(self._val_steps, 1)
            whole = one_pass(loader)
            n = self._val_batches[id(loader)] = min(cap, whole)
            name = "+".join(loader.names) if hasattr(loader, "names") else loader.dataset.name
            why = (f"one pass of the split, under training.validation_steps={self._val_steps}" if whole <= cap
                   else f"training.validation_steps; one pass of the split is {whole}")
            self.log.info(f"VALIDATION | {name} val: {n} batches of {loader.batch_size} x {loader.block_size} "
                          f"tokens ({why})")
        return self._val_batches[id(loader)]

    def _mean_loss(self, dataset: str | None) -> float:
        total, count = jax.device_get(self._loss_async(self._val_loader(dataset)))
        return float(total) / max(float(count), 1.0)

    def validate(self) -> float:
        """Mean token loss of the current params over one pass of the val split (at most ``validation_steps``
        batches).

        The val batches are the same every time (batches 0.. of the val loader).

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> trainer.validate() > 0
        True
        """
        if self.val_loader is None:
            raise BadInput("validation is off (training.validation is false or validation_steps is 0)")
        self._ensure_state()
        return self._mean_loss(None)

    def _context(self, step: int) -> EvalContext:
        def write(name: str, data: bytes) -> str:
            parts = name.split("/") if isinstance(name, str) else [None]
            if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) and _FILE_NAME.match(p) for p in parts):
                raise BadInput(f"artifact name {name!r} must be a file name or <folder>/<file> (letters, digits, "
                                 "'._-')")
            if self.write_artifact is None:
                raise BadInput(f"cannot write {name!r}: this trainer has no artifact folder (it runs without a "
                                 "store; train through a job to keep analyses)")
            return self.write_artifact(step, name, bytes(data))

        data = self.loader.dataset if hasattr(self.loader, "dataset") else self.loader.datasets[0]
        return EvalContext(step=step, params=self.state["params"], config=self.config, sources=tuple(self.sources),
                           mean_loss=self._mean_loss, model=self.model, write=write, log=self.log,
                           batch=lambda dataset: self._val_loader(dataset).batch(0), tokenizer=data.tokenizer,
                           root=self.root)

    def evaluate(self, parts: Sequence[Any] | None = None, config: Any = None) -> dict[str, Any]:
        """The metrics of the recipe's evaluations (and analyses) on the current params, as ``train()`` reports them;
        or of the evaluation ``parts`` given, reading ``config`` (default: the job's) as their settings.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> sorted(trainer.evaluate())
        ['val/fineweb/loss']
        """
        self._ensure_state()
        context = self._context(self.step)
        if config is not None:
            context = dataclasses.replace(context, config=config)
        out: dict[str, Any] = {}
        for part in [*self.evaluations, *self.analyses] if parts is None else list(parts):
            values = part.run(context)
            if not isinstance(values, Mapping):
                raise TypeError(f"{part.__name__}.run() must return a mapping of scalar metrics, got {values!r}")
            out.update(values)
        return out

    def generate(self, prompts: str | Sequence[str], *, max_new_tokens: int = 64, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: str | Sequence[str] | None = None,
                 cache: bool | None = None) -> list[Sample]:
        """A `theseus.train.generate.Sample` (``text``, ``tokens``, ``stop``) per prompt, continued by the current
        parameters through the job's tokenizer (`theseus.train.generate.generate`); the same seed, the same text.

        >>> root, config = tiny_example()
        >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> [sample] = trainer.generate("1+2=", max_new_tokens=4, temperature=0.0)
        >>> len(sample.tokens), sample == trainer.generate("1+2=", max_new_tokens=4, temperature=0.0)[0]
        (4, True)
        """
        return generate(self.model, self.params, self.tokenizer, prompts, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, stop=stop, cache=cache)

    def _val_due(self, step: int) -> bool:
        if not (self.validation or self.evaluations or self.analyses):
            return False
        return step % self._val_every == 0 or step == self.total_steps

    def _validate_step(self) -> tuple[tuple | None, dict[str, Any]]:
        """At a validation step: the enqueued ``val/loss`` pass and the evaluations' host metrics."""
        val = self._loss_async(self.val_loader) if self.validation else None
        return val, self.evaluate() if (self.evaluations or self.analyses) else {}

    def _report(self, step: int, device_metrics: dict | None, val: tuple | None, extra: dict[str, Any],
                seconds: float, steps: int) -> dict[str, Any]:
        # a validation-only report carries the position too
        out = self._train_metrics(step, device_metrics, seconds, steps) if device_metrics is not None else \
            self.position(step)
        if val is not None:
            total, count = jax.device_get(val)
            out["val/loss"] = float(total) / max(float(count), 1.0)
        out.update(extra)
        return out

    # ------------------------------------------------------------------ the loop

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
            raise BadInput(f"the run is finished: step {self.step} of {self.total_steps}")
        self._prepare()
        start = time.perf_counter()
        device_metrics = self._dispatch()
        jax.block_until_ready(device_metrics)
        seconds = time.perf_counter() - start
        k = self.step
        val, extra = self._validate_step() if self._val_due(k) else (None, {})
        metrics = self._report(k, device_metrics, val, extra, seconds, 1)
        self._emit(k, metrics)
        if self.checkpoints.due(k):
            self._save(k)
        self.checkpoints.deliver()
        return metrics

    def train(self, until: int | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Run steps until ``until`` (default and at most ``total_steps``), reporting and checkpointing.

        Reports every ``report_interval`` steps and at the last step; validation and
        evaluations every ``validation_interval`` steps and at the end of the run;
        checkpoints (with ``folder_fn``) every ``checkpoint_interval`` steps and when it
        returns. Train metrics reach ``on_report`` one step late: the next step is
        already enqueued when the host fetches them. Returns after the last
        checkpoint is committed.
        ``stop()`` (asked after each step is dispatched; e.g. a SIGTERM seen) makes that step the last:
        it is reported and checkpointed, then ``train()`` returns.

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
        pending: tuple[int, dict | None, tuple | None, dict] | None = None  # reported one step late
        inflight: collections.deque = collections.deque()
        last = (self.step, time.perf_counter())  # (step, time) of the last train report, for tokens/s
        self.log.info(f"BEGIN TRAINING | step {self.step} -> {end}")

        def finish(report: tuple[int, dict | None, tuple | None, dict], bar: TrainProgress) -> None:
            nonlocal last
            k, device_metrics, val, extra = report
            jax.block_until_ready(device_metrics)
            now = time.perf_counter()
            metrics = self._report(k, device_metrics, val, extra, now - last[1], k - last[0])
            if device_metrics is not None:
                last = (k, now)
            self._emit(k, metrics, bar)

        show = self.progress if jax.process_index() == 0 else False
        with TrainProgress(self.total_steps, self.step, show) as bar:
            while self.step < end:
                device_metrics = self._dispatch()
                k = self.step
                if stop is not None and stop() and k < end:
                    end = k  # asked to stop: this step is the last, reported and checkpointed
                inflight.append(device_metrics["loss"])
                if len(inflight) > 2:  # at most two steps in flight: bounded host run-ahead
                    inflight.popleft().block_until_ready()
                if pending is not None:
                    finish(pending, bar)
                    pending = None
                report = k % self._report_every == 0 or k == end
                val, extra = self._validate_step() if self._val_due(k) else (None, {})
                if report or val is not None or extra:
                    pending = (k, device_metrics if report else None, val, extra)
                if self.checkpoints.due(k, end):
                    self._save(k)
                self.checkpoints.deliver()
            if pending is not None:
                finish(pending, bar)
        self.wait()

    # ------------------------------------------------------------------ checkpoints

    def _sidecars(self, step: int) -> dict[str, bytes | str]:
        out: dict[str, bytes | str] = {RNG_FILE: key_to_json(self.base_key, self.seed),
                                       CONFIG_FILE: to_yaml(self.config)}
        extra = self.sidecars(step) if callable(self.sidecars) else (self.sidecars or {})
        out.update(extra)
        return out

    def _save(self, step: int, folder: str | None = None, on_commit: Callable[[str], Any] | None = None) -> None:
        self.checkpoints.wait()  # the previous checkpoint is delivered before this one's sidecars exist
        self.checkpoints.save(step, self._ensure_state(), self._sidecars(step), folder, on_commit)

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
        self._save(self.step, folder, on_commit)

    def wait(self) -> None:
        """Block until the pending checkpoint is committed, deliver its callbacks; re-raise its error.

        >>> root, config = tiny_example()
        >>> Trainer(config, root, peak_flops=1e12, progress=False).wait()  # nothing pending: returns
        """
        self.checkpoints.wait()

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
        (so ``trainer.debug()`` on a fresh trainer opens an MLP).

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
            raise BadInput(f"micro must be in [0, {self.accumulation}), got {micro}")
        x = jnp.asarray(self.batch()["x"][micro::self.accumulation])
        params = self._ensure_state()["params"]
        return capture(self.model, {"params": params}, path, x, deterministic=True, log=self.log)

    def __repr__(self) -> str:
        return (f"Trainer(step={self.step}/{self.total_steps}, data={self.sources}, "
                f"batch={self.batch_size}x{self.block_size}, per_device={self.per_device_batch_size}, "
                f"mesh={dict(self.mesh.shape)})")



