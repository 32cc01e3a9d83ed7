"""Validation passes of a built run (the mean loss of given params over one pass of a val split), and its evaluations.

A pass reads batches 0.. of a val loader (`theseus.train.built.ValidationData`): one pass of its split
(`theseus.data.passes`), at most ``training.validation_steps`` batches, logged at the first pass of each
loader. The eval step is the train step's objective and forward (`theseus.train.compiled.jit_eval_step`), so
``val/loss`` measures what training minimises; a batch's optional keys (a packed batch's ``segment_ids``,
``positions``) reach the model as in training. One pass per loader and step: asked again at the same step,
the enqueued one is returned.

>>> from theseus.train.trainer import Trainer
>>> root, config = tiny_example()
>>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
>>> passes = Validation(trainer.built)
>>> loss = passes.mean_loss(None, trainer.params, step=0)
>>> loss > 0, passes.mean_loss("fineweb", trainer.params, step=0) == loss
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from loguru import logger

from theseus.data.passes import one_pass
from theseus.train.built import Built
from theseus.train.compiled import batch_keys, jit_eval_step, place_batch
from theseus.train.evaluations import EvalContext
from theseus.train.example import tiny_example  # noqa: F401 - the doctests' example run
from theseus.train.objective import plain_model

__all__ = ["Evaluator", "Validation"]


class Validation:
    """The validation passes of ``built`` (module doc); ``forget()`` drops the passes of a replaced state.

    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> Validation(trainer.built).batches(trainer.built.validation.whole)
    1
    """

    def __init__(self, built: Built, log: Any = logger):
        self.built = built
        self.log = log
        # (with a frozen tree or without, the batch keys) -> the jitted eval step: a mixture's datasets may differ
        # in keys (a packed one's segment ids), and a step's shardings name its keys
        self._eval_steps: dict[tuple[bool, tuple[str, ...]], Any] = {}
        self._losses: dict[int, tuple[int, tuple]] = {}  # id(loader) -> (step, the loss pass of that step)
        self._batches: dict[int, int] = {}  # id(loader) -> batches one validation pass reads

    def forget(self) -> None:
        """Forget the passes made (the state they measured was replaced)."""
        self._losses.clear()

    def loss_async(self, loader: Any, params: Any, step: int, frozen: Any = None) -> tuple[jax.Array, jax.Array]:
        """Enqueue the loss pass of ``params`` (the state of ``step``) over ``loader``: (sum of losses, count)
        on device."""
        cached = self._losses.get(id(loader))
        if cached is not None and cached[0] == step:
            return cached[1]
        keys = batch_keys(loader)
        with_frozen = frozen is not None
        if (with_frozen, keys) not in self._eval_steps:
            self._eval_steps[with_frozen, keys] = jit_eval_step(self.built.parts, self.built.layout, keys, with_frozen)
        eval_step = self._eval_steps[with_frozen, keys]
        total = jnp.zeros((), jnp.float32)
        count = jnp.zeros((), jnp.float32)
        for k in range(self.batches(loader)):
            batch = place_batch(loader, k, self.built.layout, self.built.block_size, keys)
            out = eval_step(params, batch, frozen) if with_frozen else eval_step(params, batch)
            tokens = out["tokens"].astype(jnp.float32)
            total = total + out["loss"] * tokens
            count = count + tokens
        self._losses[id(loader)] = (step, (total, count))
        return total, count

    def mean_loss(self, dataset: str | None, params: Any, step: int, frozen: Any = None) -> float:
        """The mean loss of ``params`` over one pass of ``dataset``'s val split (None: the job's whole data)."""
        total, count = jax.device_get(self.loss_async(self.built.validation.loader(dataset), params, step, frozen))
        return float(total) / max(float(count), 1.0)

    def batches(self, loader: Any) -> int:
        """Batches a validation pass reads of ``loader`` (module doc)."""
        if id(loader) not in self._batches:
            steps = int(self.built.config.training.validation_steps)
            cap = max(steps, 1)
            whole = one_pass(loader)
            n = self._batches[id(loader)] = min(cap, whole)
            name = "+".join(loader.names) if hasattr(loader, "names") else loader.dataset.name
            why = (f"one pass of the split, under training.validation_steps={steps}" if whole <= cap
                   else f"training.validation_steps; one pass of the split is {whole}")
            self.log.info(f"VALIDATION | {name} val: {n} batches of {loader.batch_size} x {loader.block_size} "
                          f"tokens ({why})")
        return self._batches[id(loader)]


class Evaluator:
    """The evaluations and analyses of ``built``: what one sees at a step (`context`), their metrics (`run`),
    and what the validation hook measures at its steps (`measure`: ``val/loss`` enqueued, fetched at the report,
    then the evaluations' metrics). Analysis files go through ``outputs``
    (`theseus.train.hooks.Outputs`); ``root`` is where the job's datasets are.

    >>> from theseus.train.hooks import Outputs
    >>> from theseus.train.trainer import Trainer
    >>> root, config = tiny_example()
    >>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
    >>> evaluator = Evaluator(trainer.built, Outputs(), root)
    >>> measured = evaluator.measure(0, trainer.params)
    >>> measured["val/loss"]() == measured["val/fineweb/loss"]
    True
    """

    def __init__(self, built: Built, outputs: Any, root: str, log: Any = logger):
        self.built, self.outputs, self.root, self.log = built, outputs, root, log
        self.passes = Validation(built, log)

    def context(self, step: int, params: Any, frozen: Any = None) -> EvalContext:
        """What an evaluation or analysis sees at ``step`` with ``params`` (`EvalContext`)."""
        loader = self.built.loader
        data = loader.dataset if hasattr(loader, "dataset") else loader.datasets[0]
        model, plain = plain_model(self.built.model, params, frozen)  # adapters over a frozen base: merged
        return EvalContext(step=step, params=plain, config=self.built.config, sources=self.built.sources,
                           mean_loss=lambda dataset: self.passes.mean_loss(dataset, params, step, frozen),
                           model=model, write=lambda name, blob: self.outputs.artifact(step, name, blob),
                           log=self.log, batch=lambda dataset: self.built.validation.loader(dataset).batch(0),
                           tokenizer=data.tokenizer, root=self.root)

    def run(self, context: EvalContext, parts: Sequence[Any] | None = None) -> dict[str, Any]:
        """The metrics of ``parts`` (default: the run's evaluations, then its analyses) in ``context``."""
        out: dict[str, Any] = {}
        for part in [*self.built.evaluations, *self.built.analyses] if parts is None else list(parts):
            values = part.run(context)
            if not isinstance(values, Mapping):
                raise TypeError(f"{part.__name__}.run() must return a mapping of scalar metrics, got {values!r}")
            out.update(values)
        return out

    def measure(self, step: int, params: Any, frozen: Any = None) -> dict[str, Any]:
        """The validation hook's metrics at ``step``: ``val/loss`` (a callable fetching the enqueued pass) and the
        evaluations' and analyses'."""
        out: dict[str, Any] = {}
        if self.built.validating:
            total, count = self.passes.loss_async(self.built.validation.whole, params, step, frozen)
            out["val/loss"] = lambda: float(jax.device_get(total)) / max(float(jax.device_get(count)), 1.0)
        if self.built.evaluations or self.built.analyses:
            out.update(self.run(self.context(step, params, frozen)))
        return out
