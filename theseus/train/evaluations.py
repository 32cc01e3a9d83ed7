"""Evaluations and analyses: parts the trainer calls with its current parameters.

Every ``logging.validation_interval`` steps and at the last step, the trainer calls
each evaluation of the job (when ``training.evaluate``) and then each analysis
(when ``training.analyze``) with an `EvalContext`. A part returns scalar metrics
(``{"val/pydoc/loss": 2.1}``), which land on that step's node; an analysis may also
write files (arrays, pictures) with ``context.write(name, data)``, which land under
``objects/<node-id>/analysis/``.

``ValidationLoss`` is the evaluation every job has by default: the validation loss
of each dataset of its data mixture, ``val/<dataset>/loss``.

>>> class Norms(Analysis):
...     '''Not registered: a part need not be, to be used.'''
...     @classmethod
...     def run(cls, context):
...         return {"analysis/steps": context.step}
>>> Norms.run(EvalContext(step=3, params={}, config=None, sources=("toy",), mean_loss=lambda name: 0.0))
{'analysis/steps': 3}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from omegaconf import OmegaConf

from theseus.errors import BadInput
from theseus.train.parts import Part, part

__all__ = ["Analysis", "EvalContext", "Evaluation", "ValidationLoss", "architecture_sizes", "example_limit",
           "first_examples"]


def _no_artifacts(name: str, data: bytes) -> str:
    raise BadInput(f"cannot write {name!r}: this trainer has no artifact folder (it runs without a store)")


def _no_batches(dataset: str | None) -> dict:
    raise BadInput("this context has no validation data")


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What an evaluation or analysis sees at ``step`` (the node at seq ``step``).

    - ``params``: the current parameters (on the trainer's mesh); ``config``: the job's config;
    - ``model``: the flax module (``model.apply({"params": params}, idx)``);
    - ``sources``: the names of the datasets of the job's data;
    - ``mean_loss(dataset)``: mean token loss of ``params`` over one pass of that dataset's val
      split, at most ``training.validation_steps`` batches (``None``: the whole mixture);
    - ``write(name, data)``: publish ``data`` (bytes) as ``analysis/<name>`` in the node's
      artifact folder, ``name`` a file name or ``<folder>/<file>`` (one folder of files, as
      `theseus.train.analyses.base.publish_folder` writes them); returns its path relative to the root;
    - ``batch(dataset)``: the first validation batch of that dataset (``None``: the job's data) as
      NumPy ``x``, ``y``, ``padding_mask``, the rows of one micro-batch;
    - ``tokenizer``: the tokenizer the job's data was tokenized with, as its dataset records it
      (``{"backend": ..., "name": ...}``), or None;
    - ``root``: the root the job's datasets are in (``<root>/data/``), or None.

    >>> EvalContext(step=1, params={}, config=None, sources=(), mean_loss=lambda d: 1.0).mean_loss(None)
    1.0
    """

    step: int
    params: Any
    config: Any
    sources: tuple[str, ...]
    mean_loss: Callable[[str | None], float]
    model: Any = None
    write: Callable[[str, bytes], str] = _no_artifacts
    log: Any = None
    batch: Callable[[str | None], Mapping[str, Any]] = _no_batches
    tokenizer: Mapping[str, Any] | None = None
    root: str | None = None


def example_limit(config: Any) -> int:
    """How many examples an evaluation reads: ``eval.length`` (-1: all; also when the config has none).

    >>> from omegaconf import OmegaConf
    >>> example_limit(OmegaConf.create({"eval": {"length": 64}})), example_limit(None)
    (64, -1)
    """
    length = None if config is None else OmegaConf.select(config, "eval.length")
    return -1 if length is None else int(length)


def first_examples(items: Sequence[Any], config: Any) -> list[Any]:
    """The first ``eval.length`` of ``items`` (all of them for -1).

    >>> from omegaconf import OmegaConf
    >>> first_examples([1, 2, 3], OmegaConf.create({"eval": {"length": 2}})), first_examples([1, 2], None)
    ([1, 2], [1, 2])
    """
    limit = example_limit(config)
    return list(items) if limit == -1 else list(items)[:limit]


def architecture_sizes(config: Any) -> tuple[int, int] | None:
    """``(block_size, vocab_size)`` of a job config's ``architecture`` (None: it has neither), for a model the
    recipe wraps without a ``config`` of its own.

    >>> from omegaconf import OmegaConf
    >>> architecture_sizes(OmegaConf.create({"architecture": {"block_size": 64, "vocab_size": 128}}))
    (64, 128)
    """
    arch = OmegaConf.select(config, "architecture") if config is not None else None
    if arch is None or "block_size" not in arch or "vocab_size" not in arch:
        return None
    return int(arch.block_size), int(arch.vocab_size)


class Evaluation(Part):
    """Base of the evaluation parts: ``run(context) -> {key: scalar}`` (``training.evaluate`` turns them on).

    >>> Evaluation.kind == "" and Evaluation.Config is None   # set by @part on a subclass
    True
    """

    @classmethod
    def check(cls, config: Any) -> None:
        """Raise on a job config this part cannot run with (before any device work); the default accepts any."""

    @classmethod
    def run(cls, context: EvalContext) -> Mapping[str, Any]:
        """Scalar metrics of the current parameters, written on the node of ``context.step``."""
        raise NotImplementedError(f"{cls.__name__} must implement run()")


class Analysis(Evaluation):
    """Base of the analysis parts: like an evaluation, and may write files (``training.analyze`` turns them on).

    ``reads`` names config keys that only this analysis reads (``architecture.instrumentation.*``):
    a job that sets one without listing an analysis that reads it is refused (`Recipe.check`).

    >>> issubclass(Analysis, Evaluation), Analysis.reads
    (True, ())
    """

    reads: ClassVar[tuple[str, ...]] = ()


@part("evaluation", "val-loss", "Validation loss of each dataset of the job's data: val/<dataset>/loss.")
class ValidationLoss(Evaluation):
    """``val/<dataset>/loss`` for every dataset of the job's data (one pass of each val split, at most
    ``training.validation_steps`` batches), when ``training.validation`` is on.

    >>> context = EvalContext(step=2, params={}, config=None, sources=("a", "b"), mean_loss=lambda d: len(d))
    >>> ValidationLoss.run(context)
    {'val/a/loss': 1.0, 'val/b/loss': 1.0}
    """

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """The mean token loss of each source's val split; nothing when ``training.validation`` is off."""
        if context.config is not None and not context.config.training.validation:
            return {}  # per-dataset validation is validation: off with it, so its batches cost nothing
        return {f"val/{name}/loss": float(context.mean_loss(name)) for name in context.sources}
