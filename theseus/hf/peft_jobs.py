"""The job of an imported peft adapter: ``<family>/import/peft``, the family's LoRA job without data.

`theseus.hf.peft_import` writes a run of one node whose checkpoint holds a peft LoRA adapter's tensors as the
adapters of a ``<family>/train/lora`` run (`theseus.train.lora_jobs`): its config names the base node in
``training.init_from`` and its ``job.json`` in ``adapts``, so ``theseus sample``, ``theseus export --format
peft`` and the audit read it as a trained LoRA checkpoint (the base read back frozen by `restore_frozen`). Like an
imported model (`theseus.hf.jobs`) it has no dataset and is never run.

>>> IMPORTED_PEFT["llama"].key, IMPORTED_PEFT["llama"].MODEL.name
('llama/import/peft', 'llama')
"""

from __future__ import annotations

import theseus.train.lora_jobs  # noqa: F401 - registers the LoRA jobs these extend
from theseus.errors import BadInput
from theseus.hf.jobs import _Imported
from theseus.jobs import job, registry
from theseus.model.decoder_config import FAMILIES

__all__ = ["IMPORTED_PEFT", "job_key"]


def job_key(family: str) -> str:
    """The job key an imported peft adapter over a ``family`` model records.

    >>> job_key("qwen2")
    'qwen2/import/peft'
    """
    return f"{family}/import/peft"


class _ImportedAdapter(_Imported):
    """An imported run's hooks (no sources, no batches), refusing to run with the command that writes it."""

    def setup(self) -> None:
        """Refused: an adapter is imported by ``theseus import peft``, not run."""
        raise BadInput(f"{self.key} runs are written by `theseus import peft`, not run: sample or export one, or "
                       "train new adapters over its base with a <family>/train/lora job")


def _imported(family: str) -> type:
    lora = registry(load=False)[f"{family}/train/lora"]
    body = {"Config": lora.Config,  # the LoRA job's, with its lora section (a subclass would compose its parts')
            "__module__": __name__, "__doc__": f"A peft LoRA adapter over a {family} model (no data: see "
                                               "theseus.hf.peft_jobs)."}
    cls = type(f"Imported{lora.__name__}", (_ImportedAdapter, lora), body)
    return job(job_key(family), f"A peft LoRA adapter over a {family} model imported by `theseus import peft` "
                                "(not run: sample or export it).")(cls)


#: the job class of an imported peft adapter over each decoder family, by family
IMPORTED_PEFT: dict[str, type] = {family: _imported(family) for family in FAMILIES}
