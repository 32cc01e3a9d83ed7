"""What a trainer answers about its run without training it: the next batch, the tokenizer, the evaluations'
context and metrics, samples of text, and looks inside the forward pass.

`RunVerbs` is the part of `theseus.train.trainer.Trainer` that replay and the seeds' walkthrough use beside the
loop: ``dataset``, ``params``, ``position(step)``, ``batch()``, ``tokenizer``, ``context(step)``, ``evaluate()``,
``generate(prompts)``, and ``find`` /
``debug``, thin verbs over `theseus.model.debug` (``find_modules``, ``capture``). It reads the trainer's
``built`` run, ``loader``, ``step``, ``params``, ``evaluator`` and ``log``.

>>> from theseus.train.trainer import Trainer
>>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
>>> isinstance(trainer, RunVerbs), trainer.batch()["x"].shape
(True, (4, 16))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput
from theseus.model.debug import DebugResult, capture, find_modules, normalize_path
from theseus.model.layers.mlp import MLP
from theseus.train.evaluations import EvalContext
from theseus.train.example import tiny_example  # noqa: F401 - the doctests' example run
from theseus.train.generate import Sample, generate, tokenizer_of
from theseus.train.objective import plain_model
from theseus.train.reports import position

__all__ = ["RunVerbs"]


class RunVerbs:
    """The trainer's verbs beside the loop (module doc).

    >>> from theseus.train.trainer import Trainer
    >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).find(MLP)
    [('blocks_0', 'mlp')]
    """

    _tokenizer: Any = None
    _host_batch: tuple[int, dict] | None = None
    _last_find: tuple[tuple[str, ...], ...] = ()

    @property
    def dataset(self) -> Any:
        """The dataset of a single-dataset job (a mixture has ``loader.datasets``)."""
        return getattr(self.loader, "dataset", None)

    @property
    def params(self) -> Any:
        """The current parameters (initialising a fresh state if none yet)."""
        return self._ensure_state()["params"]

    def position(self, step: int | None = None) -> dict[str, int]:
        """``train/step`` and ``train/tokens`` after ``step`` updates (default: the current step).

        >>> from theseus.train.trainer import Trainer
        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).position(3)
        {'train/step': 3, 'train/tokens': 192}
        """
        return position(self.step if step is None else int(step), self.plan.tokens_per_step)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the job's ``tokenizer`` section (the one its datasets recorded), built once.

        >>> from theseus.train.trainer import Trainer
        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).tokenizer.name
        'cl100k_base'
        """
        if self._tokenizer is None:
            datasets = [self.loader.dataset] if hasattr(self.loader, "dataset") else list(self.loader.datasets)
            self._tokenizer = tokenizer_of(self.config, [d.tokenizer for d in datasets], root=self.root)
        return self._tokenizer

    def batch(self) -> dict[str, np.ndarray]:
        """The global batch the next step consumes (NumPy ``x``, ``y``, ``padding_mask``, ``[batch_size, block_size]``):
        a pure function of (datasets, rates, data seed, batch size, block size, step), the same until a step.

        >>> from theseus.train.trainer import Trainer
        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> trainer.batch() is trainer.batch()
        True
        """
        if self._host_batch is None or self._host_batch[0] != self.step:
            self._host_batch = (self.step, self.loader.batch(self.step))
        return self._host_batch[1]

    def context(self, step: int) -> EvalContext:
        """What an evaluation or analysis sees at ``step`` with the current params (`EvalContext`).

        >>> from theseus.train.trainer import Trainer
        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).context(0).sources
        ('fineweb',)
        """
        return self.evaluator.context(step, self.params, self.frozen)

    def evaluate(self, parts: Sequence[Any] | None = None, config: Any = None) -> dict[str, Any]:
        """The metrics of the recipe's evaluations (and analyses) on the current params, as ``train()`` reports them;
        or of the evaluation ``parts`` given, reading ``config`` (default: the job's) as their settings.

        >>> from theseus.train.trainer import Trainer
        >>> sorted(Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).evaluate())
        ['val/fineweb/loss']
        """
        context = self.context(self.step)
        return self.evaluator.run(context if config is None else dataclasses.replace(context, config=config), parts)

    def generate(self, prompts: str | Sequence[str], **options: Any) -> list[Sample]:
        """A `theseus.train.generate.Sample` per prompt, continued by the current parameters through the job's
        tokenizer (`theseus.train.generate.generate` and its options: ``max_new_tokens``, ``temperature``,
        ``top_k``, ``top_p``, ``seed``, ``stop``, ``cache``); the same seed, the same text.

        >>> from theseus.train.trainer import Trainer
        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
        >>> [sample] = trainer.generate("1+2=", max_new_tokens=4, temperature=0.0)
        >>> len(sample.tokens), sample == trainer.generate("1+2=", max_new_tokens=4, temperature=0.0)[0]
        (4, True)
        """
        model, params = plain_model(self.model, self.params, self.frozen)  # adapters over a frozen base: merged
        return generate(model, params, self.tokenizer, prompts, **options)

    def find(self, module_type: type | tuple[type, ...]) -> list[tuple[str, ...]]:
        """Paths of the modules of ``module_type`` in forward order, e.g. ``[('blocks_0', 'mlp'), ...]``
        (`theseus.model.debug.find_modules`; abstract, no compute). ``debug()`` without a path uses the first.

        >>> from theseus.train.trainer import Trainer
        >>> Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).find(MLP)
        [('blocks_0', 'mlp')]
        """
        idx = jax.ShapeDtypeStruct((1, self.block_size), jnp.int32)
        self._last_find = find_modules(self.model, {"params": self.abstract_state["params"]}, module_type, idx)
        return list(self._last_find)

    def debug(self, path: str | Sequence[str] | None = None, *, micro: int = 0) -> DebugResult:
        """``(layer, inputs)`` of the module at ``path`` in the deterministic forward pass on the rows of micro-batch
        ``micro`` of ``batch()`` (rows ``micro::accumulation``) with the current params
        (`theseus.model.debug.capture`). Without ``path``: the first path of the last ``find``, else the first MLP.

        >>> from theseus.train.trainer import Trainer
        >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
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
        return capture(self.model, {"params": self._ensure_state()["params"]}, path, x, deterministic=True,
                       log=self.log)

