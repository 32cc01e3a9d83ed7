"""The training loop of any recipe: init or restore, step, train, validate, save, close.

The trainer knows nothing of the event store or of jobs. It builds its recipe once
(`theseus.train.recipe.Recipe.build`: a frozen `theseus.train.built.Built` with every part) and
runs the loop; the outside attaches hooks (`theseus.train.hooks`) with their own cadence:
``add_hook(fn, every=N, on="report" | "step" | "commit")``.

- Reports (``on="report"``, ``fn(step, metrics)``): every ``logging.report_interval`` steps (and the
  last step of a ``train()`` call) with ``train/loss``, ``train/lr``, ``train/grad_norm``,
  ``train/tokens``, ``train/step``, ``train/mfu``, ``train/tokens_per_second`` (`theseus.train.reports`);
  every ``logging.validation_interval`` steps and at the last step also ``val/loss`` and the metrics of
  the recipe's evaluations and analyses (a step hook the trainer attaches; a validation-only step
  reports those and its position). ``step`` is the number of updates applied: the node at seq ``step``.
  Train metrics are fetched from the device one step late, so the next step is already running
  while the hooks work.
- Checkpoints: ``checkpoint_to(folder_fn)`` saves every ``logging.checkpoint_interval`` steps, at the
  run's last step and where ``train()`` stops; commit hooks (``on="commit"``, ``fn(step, folder)``) run
  after the checkpoint's MANIFEST.json is published, on the trainer's thread, before the next save
  starts and at the latest when ``train()`` / ``wait()`` / ``close()`` returns.
- Replay: ``run_step(batch)`` enqueues one step (on the next batch by default) after ``prepare()``;
  ``context(step)`` is what an evaluation sees. ``find``/``debug`` look inside the forward pass
  (`theseus.model.debug`).
- A frozen tree (``freeze(tree)``: a frozen base under adapters, a reference copy) is held on the mesh
  sharded like the params and passed to every step, out of the optimizer and of checkpoints.

>>> root, config = tiny_example()
>>> config["logging"] = {"report_interval": 1, "validation_interval": 3}
>>> seen = []
>>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
>>> hook = trainer.add_hook(lambda step, m: seen.append((step, sorted(m))))
>>> trainer.total_steps, trainer.batch()["x"].shape
(3, (4, 16))
>>> trainer.train()
>>> [s for s, _ in seen], seen[-1][1][-2:]
([1, 2, 3], ['val/fineweb/loss', 'val/loss'])
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
from loguru import logger

from theseus.errors import BadInput
from theseus.store.layout import CONFIG_FILE, RNG_FILE
from theseus.train import mfu, placement
from theseus.train.checkpointing import Checkpoints
from theseus.train.compile_cache import enable_compilation_cache
from theseus.train.compiled import batch_keys, compile_train_step, place_batch
from theseus.train.config import load_config, to_yaml
from theseus.train.example import tiny_example  # noqa: F401 - the doctests' example run
from theseus.train.hooks import Hook, Hooks, Outputs, resolve
from theseus.train.progress import TrainProgress
from theseus.train.recipe import Recipe, as_recipe
from theseus.train.reports import log_report, position, train_metrics
from theseus.train.rng import key_to_json
from theseus.train.settings import Settings
from theseus.train.sharding import make_mesh
from theseus.train.validation import Evaluator
from theseus.train.verbs import RunVerbs

__all__ = ["Trainer"]


class Trainer(RunVerbs):
    """Trains a recipe's model on its data with the config of its job (`gpt/train/pretrain` by default).

    Construction loads and checks the config before any device work, builds the mesh and the recipe's
    parts once (`theseus.train.recipe.Recipe.build`: the plan, the data, the model and its state's layout;
    with ``per_device_batch_size=-1`` the micro-batch autobatch picks), and attaches the validation hook.
    ``recipe``: a `Recipe` (class or instance) or a training job (class) carrying one; ``hooks``: `Hook`s
    to attach; ``options``: `theseus.train.settings.Settings` (``peak_flops``, ``seed``, ``devices``,
    ``progress``..., and the shorthands ``on_report``, ``on_checkpoint``, ``folder_fn``,
    ``write_artifact``, ``sidecars``).

    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> trainer.per_device_batch_size, trainer.accumulation, trainer.step
    (4, 1, 0)
    >>> sorted(trainer.tick())[:3]
    ['train/grad_norm', 'train/loss', 'train/lr']
    """

    def __init__(self, config: Any, root: str, *, recipe: Any = None, hooks: Sequence[Hook] = (), log: Any = logger,
                 **options: Any):
        enable_compilation_cache(log=log)  # before anything compiles: a second start reads what the first compiled
        self.log, self.root = log, os.fspath(root).rstrip("/")
        self.recipe: Recipe = as_recipe(recipe)
        self.settings = settings = Settings.of(options)
        self.config = load_config(config, type(self.recipe).Config)
        self.recipe.check(self.config)  # before any device work
        mesh = make_mesh(int(self.config.shard.tp), settings.devices)  # tp must divide the device count
        self.built = built = self.recipe.build(self.config, mesh, self.root, log=log,
                                               memory_budget_bytes=settings.memory_budget_bytes)
        self.plan, self.model, self.loader, self.mesh = built.plan, built.model, built.loader, built.mesh
        self.total_steps, self.abstract_state = built.plan.total_steps, built.layout.abstract_state
        self.outputs = Outputs(settings.sidecars, settings.write_artifact)
        self.evaluator = Evaluator(built, self.outputs, self.root, log)
        self.hooks = Hooks(self.total_steps)
        self.checkpoints = Checkpoints(self.hooks.commit, log)
        self.seed, self.peak_cache = int(settings.seed), settings.peak_cache or f"{self.root}/meta/cpu_peak"
        self.base_key = jax.random.PRNGKey(self.seed)
        self.state: dict | None = None
        self.frozen: Any = None
        self.step = 0
        self._peak, self._keys = settings.peak_flops, batch_keys(built.loader)
        self._compiled: dict[int, Any] = {} if built.compiled_step is None else {
            built.plan.per_device_batch_size: built.compiled_step}
        self._key_device: jax.Array | None = None
        self._attach_defaults(hooks)

    def _attach_defaults(self, hooks: Sequence[Hook]) -> None:
        """The validation hook, the settings' shorthands, then ``hooks``, in this order."""
        built, settings = self.built, self.settings
        if built.validating or built.evaluations or built.analyses:
            self.add_hook(lambda step: self.evaluator.measure(step, self.state["params"], self.frozen),
                          every=int(self.config.logging.validation_interval), on="step")
        if settings.folder_fn is not None:
            self.checkpoint_to(settings.folder_fn)
        if settings.on_checkpoint is not None:
            self.add_hook(settings.on_checkpoint, on="commit")
        if settings.on_report is not None:
            self.add_hook(settings.on_report)
        for hook in hooks:
            self.hooks.add(hook)

    # ------------------------------------------------------------------ hooks

    def add_hook(self, fn: Callable[..., Any], every: int = 1, *, on: str = "report", at_stop: bool = False) -> Hook:
        """Attach ``fn`` to ``on`` events every ``every`` steps (`theseus.train.hooks`); returns the `Hook`.

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> steps = []
        >>> _ = trainer.add_hook(lambda step: steps.append(step) or {"my/step": step}, every=2, on="step")
        >>> trainer.train(); steps
        [2, 3]
        """
        return self.hooks.add(Hook(fn, every, on, at_stop))

    def checkpoint_to(self, folder_fn: Callable[[int], str]) -> Hook:
        """Checkpoint into ``folder_fn(step)`` every ``logging.checkpoint_interval`` steps, at the run's last
        step and where a ``train()`` call stops (a step hook); returns it."""
        def save(step: int) -> None:
            if self.checkpoints.last_saved != step:
                self._save(step, folder_fn(step))

        return self.add_hook(save, int(self.config.logging.checkpoint_interval), on="step", at_stop=True)

    # ------------------------------------------------------------------ the built run

    def __getattr__(self, name: str) -> Any:
        """The built run's figures by name (`_FORWARDED`: ``n_params``, the plan's ``batch_size``..., the layout's
        ``state_shardings``...).

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> trainer.batch_size, trainer.tokens_per_step, trainer.n_params > 0
        (4, 64, True)
        """
        built = self.__dict__.get("built")
        for owner in ("built", "plan", "layout") if built is not None else ():
            if name in _FORWARDED[owner]:
                return getattr(built if owner == "built" else getattr(built, owner), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def train_step(self) -> Any:
        """The compiled ``(state, batch, base_key[, frozen]) -> (state, metrics)`` of this trainer (state donated)."""
        size = self.per_device_batch_size
        if size not in self._compiled:
            frozen = None if self.frozen is None else jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), self.frozen)
            self._compiled = {size: compile_train_step(self.built.parts, self.built.layout, self.batch_size, size,
                                                       self.block_size, self.base_key, keys=self._keys,
                                                       frozen=frozen)}
        return self._compiled[size]

    # ------------------------------------------------------------------ state

    def init(self) -> dict:
        """A fresh state (params from `theseus.train.rng.init_key` of the base key), laid out on the mesh; step 0.

        >>> int(Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).init()["step"])
        0
        """
        self.state = placement.fresh_state(self.built, self.base_key)
        self._set_step(0)
        self.log.debug(f"TRAINER | fresh state, seed {self.seed}")
        return self.state

    def freeze(self, tree: Any) -> Any:
        """Hold ``tree`` (a frozen base, a reference copy of the params; None: none) on the mesh, sharded like the
        params: every step and validation pass gets it, no gradient or optimizer state does, checkpoints leave
        it out (a job restores it from where its checkpoint records it came from). Returns it placed.

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> frozen = trainer.freeze(trainer.params)
        >>> m = trainer.tick(); sorted(trainer.state) == ["opt_state", "params", "step"]
        True
        """
        copy = jax.jit(lambda t: jax.tree.map(lambda a: a.copy(), t),  # the step donates params it may come from
                       out_shardings=None if tree is None else self.built.layout.shardings_like_params(tree))
        placed = None if tree is None else copy(tree)
        self.frozen, self._compiled = placed, {}  # the step takes a frozen tree, or not: compile it again
        return placed

    def _set_step(self, step: int) -> None:
        self.step = int(step)
        self._host_batch = None
        self.evaluator.passes.forget()
        self.checkpoints.last_saved = None  # the state was replaced: that step may be saved again
        self._key_device = jax.device_put(self.base_key, self.built.layout.replicated)

    def _ensure_state(self) -> dict:
        if self.state is None:
            self.init()
        return self.state

    def restore(self, folder: str, partial: bool = True, verify: bool = True, node: Any = None,
                step: int | None = None) -> dict:
        """Load the checkpoint in ``folder`` onto this trainer's mesh (each device reads its slices: another
        topology's restores here); its ``rng.json`` becomes the base key; the step continues from its ``step``.
        ``partial``: leaves missing or of another shape keep a fresh initialisation (logged), else any difference
        is an error; ``verify``: check each file's sha256 against MANIFEST.json; ``node`` and ``step``: the node
        whose checkpoint it must be (`theseus.train.placement.restore_checked`) and the step that node recorded.

        >>> import tempfile
        >>> root, config = tiny_example()
        >>> trainer, folder = Trainer(config, root, peak_flops=1e12, progress=False), tempfile.mkdtemp() + "/ckpt"
        >>> _ = trainer.tick(); trainer.save(folder); trainer.wait()
        >>> other = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = other.restore(folder); other.step
        1
        """
        folder = folder.rstrip("/")
        try:
            state, report, run_key = placement.restore_checked(
                self.built, folder, node, step, placement.RunKey(self.base_key, self.seed), partial=partial,
                verify=verify, log=self.log)
        except (FileNotFoundError, ValueError) as e:  # DamagedFolder is a ValueError
            if node is None or str(e).startswith("checkpoint of node "):
                raise
            raise type(e)(f"checkpoint of node {node.id} ({node.name}:{node.nonce}:{node.seq}): {e}") from None
        self.state, (self.base_key, self.seed) = state, run_key
        self._set_step(int(jax.device_get(state["step"])))
        (self.log.info if report.exact else self.log.warning)(f"RESTORE | step {self.step} from {folder} | {report}")
        return state

    def start_from(self, folder: str, node: Any = None, verify: bool = True) -> dict:
        """A fresh state (step 0, a fresh optimizer, this trainer's base key) holding the parameters of the
        checkpoint in ``folder``, cast to this trainer's parameter dtype; what ``training.init_from`` and a
        params-only checkpoint (an imported model) start from. ``node``: the node the folder must belong to.

        >>> import tempfile
        >>> root, config = tiny_example()
        >>> source = Trainer(config, root, peak_flops=1e12, progress=False)
        >>> _ = source.tick(); folder = tempfile.mkdtemp() + "/source"; source.save(folder); source.wait()
        >>> state = Trainer(config, root, peak_flops=1e12, progress=False).start_from(folder)
        >>> int(state["step"]), bool((state["params"]["wte"]["embedding"] == source.params["wte"]["embedding"]).all())
        (0, True)
        """
        folder = folder.rstrip("/")
        sealed = placement.sealed_of(folder, node, verify)  # the folder is node's
        self.state = placement.started_from(self.built, placement.params_from(self.built, folder, sealed, verify))
        self._set_step(0)
        self.log.info(f"INIT FROM | parameters of {folder}, step 0, a fresh optimizer")
        return self.state

    # ------------------------------------------------------------------ stepping

    def prepare(self) -> None:
        """Everything a step needs, outside any timing: the state, the compiled step, the key on the mesh and
        the MFU peak (`measure_peak`)."""
        self._ensure_state()
        _ = self.train_step
        if self._key_device is None:
            self._key_device = jax.device_put(self.base_key, self.built.layout.replicated)
        self.measure_peak()

    def run_step(self, batch: dict | None = None) -> dict[str, jax.Array]:
        """Enqueue step ``self.step`` -> ``self.step + 1`` on ``batch`` (default: the loader's batch of this step,
        each device's rows read for it) after ``prepare()``; returns the metrics as device arrays.

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> trainer.prepare(); metrics = trainer.run_step(); trainer.step, sorted(metrics)
        (1, ['grad_norm', 'loss', 'lr', 'tokens'])
        """
        if batch is None:
            batch = place_batch(self.loader, self.step, self.built.layout, self.block_size, self._keys)
        args = (self.state, batch, self._key_device) + (() if self.frozen is None else (self.frozen,))
        self.state, metrics = self.train_step(*args)
        self.step += 1
        return metrics

    def measure_peak(self) -> float | None:
        """Peak FLOP/s of the mesh for the activation dtype (`theseus.train.mfu.mesh_peak`: on CPU measured once
        and cached in ``peak_cache``), asked once; None when unknown. ``peak_flops`` given: that.

        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).measure_peak()
        1000000000000.0
        """
        if self._peak is None:
            arch = self.config.architecture
            dtype = str(arch.dtype.activation) if "dtype" in arch else "float32"
            self._peak = mfu.mesh_peak(self.mesh, dtype, self.peak_cache, self.log)
        return None if self._peak != self._peak else self._peak

    def _report(self, step: int, device_metrics: dict | None, measured: dict[str, Any],
                timing: tuple[float, int]) -> dict[str, Any]:
        # a validation-only report carries the position too
        out = position(step, self.tokens_per_step) if device_metrics is None else train_metrics(
            device_metrics, step, timing, self.tokens_per_step, self.built.flops_per_token, self.measure_peak())
        out.update(resolve(measured))
        return out

    def _emit(self, step: int, metrics: dict[str, Any], bar: TrainProgress | None = None) -> None:
        log_report(self.log, step, self.total_steps, metrics)
        if bar is not None:
            bar.update(step, metrics.get("train/loss"), metrics.get("train/tokens_per_second"))
        self.hooks.report(step, metrics)

    # ------------------------------------------------------------------ the loop

    def tick(self) -> dict[str, Any]:
        """Advance exactly one step (consuming ``batch()``) and return its metrics: like a step of ``train()``,
        its step hooks run (validation, a checkpoint when due) and the report hooks get the train metrics.

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> m = trainer.tick(); trainer.step, m["train/tokens"]
        (1, 64)
        """
        if self.step >= self.total_steps:
            raise BadInput(f"the run is finished: step {self.step} of {self.total_steps}")
        self.prepare()
        start = time.perf_counter()
        device_metrics = self.run_step()
        jax.block_until_ready(device_metrics)
        seconds = time.perf_counter() - start
        measured = self.hooks.step(self.step)
        metrics = self._report(self.step, device_metrics, measured, (seconds, 1))
        self._emit(self.step, metrics)
        self.checkpoints.deliver()
        return metrics

    def train(self, until: int | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Run steps until ``until`` (default and at most ``total_steps``), with the hooks at their cadence.

        Train metrics reach the report hooks one step late: the next step is already enqueued when the
        host fetches them. Returns after the last checkpoint is committed. ``stop()`` (asked after each step
        is dispatched; e.g. a SIGTERM seen) makes that step the last: it is reported and checkpointed.

        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> trainer.train(until=2); trainer.step
        2
        """
        end = self.total_steps if until is None else min(int(until), self.total_steps)
        if self.step >= end:
            self.log.info(f"TRAIN | nothing to do: step {self.step}, asked to run until {end}")
            return
        self.prepare()
        pending: tuple[int, dict | None, dict] | None = None  # reported one step late
        inflight: collections.deque = collections.deque()
        last = [self.step, time.perf_counter()]  # (step, time) of the last train report, for tokens/s
        every = int(self.config.logging.report_interval)
        self.log.info(f"BEGIN TRAINING | step {self.step} -> {end}")
        with TrainProgress(self.total_steps, self.step, self.settings.progress if jax.process_index() == 0
                           else False) as bar:
            while self.step < end:
                device_metrics = self.run_step()
                k = self.step
                if stop is not None and stop() and k < end:
                    end = k  # asked to stop: this step is the last, reported and checkpointed
                inflight.append(device_metrics["loss"])
                if len(inflight) > 2:  # at most two steps in flight: bounded host run-ahead
                    inflight.popleft().block_until_ready()
                if pending is not None:
                    self._finish(pending, last, bar)
                pending = None
                report = k % every == 0 or k == end
                measured = self.hooks.step(k, end)
                if report or measured:
                    pending = (k, device_metrics if report else None, measured)
                self.checkpoints.deliver()
            if pending is not None:
                self._finish(pending, last, bar)
        self.wait()

    def _finish(self, pending: tuple[int, dict | None, dict], last: list, bar: TrainProgress) -> None:
        """Report a step of ``train()`` one step late; ``last``: (step, time) of the last train report."""
        k, device_metrics, measured = pending
        jax.block_until_ready(device_metrics)
        now = time.perf_counter()
        metrics = self._report(k, device_metrics, measured, (now - last[1], k - last[0]))
        if device_metrics is not None:
            last[:] = [k, now]
        self._emit(k, metrics, bar)

    # ------------------------------------------------------------------ validation and evaluations

    def validate(self) -> float:
        """Mean loss of the current params over one pass of the val split (at most ``validation_steps`` batches;
        the same batches every time).

        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).validate() > 0
        True
        """
        if not self.built.validating:
            raise BadInput("validation is off (training.validation is false or validation_steps is 0)")
        return self.evaluator.passes.mean_loss(None, self.params, self.step, self.frozen)

    # ------------------------------------------------------------------ checkpoints

    def _save(self, step: int, folder: str, on_commit: Callable[[str], Any] | None = None) -> None:
        self.checkpoints.wait()  # the previous checkpoint is delivered before this one's sidecars exist
        sidecars = {RNG_FILE: key_to_json(self.base_key, self.seed), CONFIG_FILE: to_yaml(self.config),
                    **self.outputs.sidecars_at(step)}
        self.checkpoints.save(step, self._ensure_state(), sidecars, folder, on_commit)

    def save(self, folder: str, on_commit: Callable[[str], Any] | None = None) -> None:
        """Start checkpointing the current state into ``folder`` (``rng.json``, ``config.yaml``, sidecars); the
        files are written in the background. ``on_commit(folder)`` and the commit hooks run on this thread after
        the commit, at the latest in ``wait()``.

        >>> import tempfile
        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> folder = tempfile.mkdtemp() + "/step-0"
        >>> trainer.save(folder); trainer.wait(); os.path.exists(folder + "/MANIFEST.json")
        True
        """
        self._save(self.step, folder, on_commit)

    def wait(self) -> None:
        """Block until the pending checkpoint is committed, run its commit hooks; re-raise its error.

        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).wait()  # nothing pending: returns
        """
        self.checkpoints.wait()

    def close(self) -> None:
        """Finish pending checkpoints and drop the device state (also on leaving a ``with`` block).

        >>> with Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False) as trainer:
        ...     _ = trainer.init()
        >>> trainer.state is None
        True
        """
        try:
            self.wait()
        finally:
            self.state, self.frozen, self._compiled = None, None, {}
            self.evaluator = Evaluator(self.built, self.outputs, self.root, self.log)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Trainer(step={self.step}/{self.total_steps}, data={list(self.built.sources)}, "
                f"batch={self.batch_size}x{self.block_size}, per_device={self.per_device_batch_size}, "
                f"mesh={dict(self.mesh.shape)})")


#: the names `Trainer.__getattr__` reads from the built run, its plan and its layout
_FORWARDED = {
    "built": ("n_params", "flops_per_token", "topology", "autobatch_trials", "sources", "evaluations", "analyses"),
    "plan": ("per_device_batch_size", "accumulation", "batch_size", "block_size", "tokens_per_step", "micro_rows",
             "data_parallel"),
    "layout": ("state_shardings", "batch_sharding", "replicated", "shard"),
}
