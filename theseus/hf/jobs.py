"""The job of an imported run: ``<family>/import/hf``, the family's pretraining recipe without data.

`theseus.hf.importer` writes a run of one node whose checkpoint holds a Hugging Face model's
parameters; the run records one of these keys, so ``theseus sample``, ``theseus eval``,
``theseus export`` and ``training.init_from`` rebuild its model and tokenizer as for any
training run (`theseus.replay.restore.restored_trainer`). The recipe has no dataset: a trainer
of an imported run opens none, and asking it for a batch is an error naming what to do. The
job is never run: an import is written by ``theseus import hf``, and a model is trained further
by a training job with ``training.init_from`` set to its node.

>>> IMPORTED["llama"].key, IMPORTED["llama"].MODEL.name
('llama/import/hf', 'llama')
"""

from __future__ import annotations

from typing import Any

import theseus.train.jobs  # noqa: F401 - registers the pretraining jobs these extend
from theseus.errors import BadInput
from theseus.jobs import job, registry

__all__ = ["IMPORTED", "NoData", "job_key"]

#: the model parts an import writes: our GPT (GPT-2 folders) and the decoder families (`theseus.hf.convert`)
FAMILIES = ("gpt", "llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox")


def job_key(family: str) -> str:
    """The job key an import of a ``family`` model records.

    >>> job_key("qwen2")
    'qwen2/import/hf'
    """
    return f"{family}/import/hf"


class _NoDataset:
    """The dataset of an imported run: none, named so, with no recorded tokenizer."""

    name = "(imported: no data)"
    tokenizer = None


class NoData:
    """The loader of an imported run's trainer: it has no batches.

    >>> NoData("train", 8, 16).batch(0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: an imported run has no data: train a model from it with training.init_from=<its ...
    """

    dataset = _NoDataset()

    def __init__(self, split: str, batch_size: int, block_size: int):
        self.split, self.batch_size, self.block_size = split, batch_size, block_size

    def batch(self, k: int, rows: Any = None) -> dict:
        """No batch: raises, naming ``training.init_from``."""
        raise BadInput("an imported run has no data: train a model from it with training.init_from=<its node or "
                         "nonce>")


class _Imported:
    """The hooks an imported run's recipe replaces: no sources, a loader without batches, no job to run."""

    def sources(self, config: Any) -> list:
        """No dataset."""
        return []

    def loader(self, config: Any, root: str, split: str, batch_size: int) -> NoData:
        """`NoData`: the trainer opens nothing."""
        return NoData(split, batch_size, int(config.architecture.block_size))

    def setup(self) -> None:
        """Refused: an import is written by ``theseus import hf``, not run."""
        raise BadInput(f"{self.key} runs are written by `theseus import hf`, not run: train a model from one with "
                         "training.init_from=<its node or nonce> in a training job")


def _imported(family: str) -> type:
    pretrain = registry(load=False)[f"{family}/train/pretrain"]
    cls = type(f"Imported{pretrain.__name__.removeprefix('Pretrain') or 'Gpt'}", (_Imported, pretrain),
               {"__module__": __name__, "__doc__": f"A {family} model imported from a Hugging Face folder "
                                                   "(no data: see theseus.hf.jobs)."})
    return job(job_key(family), f"A {family} model imported from a Hugging Face folder by `theseus import hf` "
                                "(not run: continue it with training.init_from).")(cls)


#: the job class of an import of each family, by family
IMPORTED: dict[str, type] = {family: _imported(family) for family in FAMILIES}
