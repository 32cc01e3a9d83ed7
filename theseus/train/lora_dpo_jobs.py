"""The DPO-over-LoRA jobs: ``<family>/train/lora_dpo``, DPO (`theseus.train.dpo_jobs`) whose policy is LoRA adapters
over a frozen base (`theseus.train.lora_jobs`) and whose reference is that base alone, as TRL's ``DPOTrainer`` does
with a peft config: the reference costs no second copy of the weights.

Each is the family's LoRA job with DPO's recipe half (`theseus.train.dpo_jobs.dpo_recipe`): a ``dpo`` section beside
``lora``, batches of whole pairs of a ``data/tokenize/preference`` dataset, the DPO objective and its refusals (a
mixture, ``loss.z_loss``, autobatch, an accumulation that splits a pair). The base is LoRA's: ``training.init_from``
pinned to its node id, read onto the mesh and held frozen; that frozen tree is at once the adapters' base and the
reference (the objective's ``reference`` forward runs the base model without adapters). Checkpoints hold the adapters
and their optimizer state only and name the base (``adapts`` in ``job.json``), so ``theseus sample``, ``theseus
export --format peft`` (and ``--format hf --merge``), the audit's ``missing-base`` check, verify and resume take such
a run as they take a LoRA run. Fresh adapters add zero: at step 0 the policy is the reference and the loss is log 2.

Not implemented, and refused: a ``training.init_from`` naming a LoRA checkpoint (its adapters continued), whose
reference would be its base without those adapters rather than the model they make; export it merged (``theseus
export ROOT NODE --format hf --merge OUT``) and import that folder (``theseus import hf``) to tune adapters over it.

>>> LoraDpoLlama.key, LoraDpoLlama.MODEL.name, [e.name for e in LoraDpoLlama.EVALUATION]
('llama/train/lora_dpo', 'llama', ['val-loss'])
>>> list(LoraDpoGpt.defaults().lora), LoraDpoGpt.defaults().dpo.beta
(['rank', 'alpha', 'dropout', 'targets'], 0.1)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig

from theseus.train.built import StepParts
from theseus.train.config import NotImplementedSetting
from theseus.train.dpo_jobs import dpo_recipe
from theseus.train.jobs import Pretrain, family_jobs
from theseus.train.lora_jobs import LoraGemma, LoraGpt, LoraGptNeox, LoraLlama, LoraMistral, LoraQwen2, LoraQwen3
from theseus.train.objective import model_forward

__all__ = ["LoraDpoGemma", "LoraDpoGpt", "LoraDpoGptNeox", "LoraDpoLlama", "LoraDpoMistral", "LoraDpoQwen2",
           "LoraDpoQwen3"]

#: each family's LoRA job, what its DPO-over-LoRA job is made over
_LORA = {lora.MODEL.name: lora for lora in (LoraGpt, LoraLlama, LoraMistral, LoraQwen2, LoraQwen3, LoraGemma,
                                            LoraGptNeox)}


class _LoraDpo:
    """The recipe hook DPO over LoRA adds to DPO's and LoRA's (module doc)."""

    def step_parts(self, config: DictConfig) -> StepParts:
        """The LoRA model and forward with the DPO objective, whose reference is the base model alone over the
        frozen tree (the adapters' base)."""
        parts = super().step_parts(config)
        reference = model_forward(parts.model.base)
        return dataclasses.replace(parts, objective=dataclasses.replace(parts.objective, reference=reference))


def _setup(self: Pretrain) -> None:
    """LoRA's setup: the base pinned to its node id, the adapters fresh (or the run's own on a resume) and the base
    read frozen; a ``training.init_from`` naming a LoRA checkpoint is refused first (module doc)."""
    self._pin_base()
    if self._continues is not None:
        node = self._continues[0].id
        raise NotImplementedSetting(
            f"training.init_from={node} is a LoRA checkpoint: DPO over LoRA continuing its adapters is not "
            "implemented (the reference would be its base without them, not the model they make); export it merged "
            f"(theseus export ROOT {node} --format hf --merge OUT), import that folder (theseus import hf) and "
            "start from the imported node")
    Pretrain.setup(self)


def _lora_dpo_body(lora: type[Pretrain], family: str) -> dict[str, Any]:
    """The class body of the DPO-over-LoRA job over the LoRA job ``lora`` of ``family`` (`family_jobs`).

    >>> LoraDpoGpt.__bases__ == (LoraGpt,), LoraDpoGpt.RECIPE.__bases__ == (LoraGpt.RECIPE,)
    (True, True)
    """
    return {**dpo_recipe(lora), "step_parts": _LoraDpo.step_parts, "setup": _setup,
            "__doc__": f"DPO of LoRA adapters over a frozen ``{family}`` base, against the base alone (module doc)."}


LoraDpoGpt, LoraDpoLlama, LoraDpoMistral, LoraDpoQwen2, LoraDpoQwen3, LoraDpoGemma, LoraDpoGptNeox = family_jobs(
    "lora_dpo", "LoraDpo", "DPO of LoRA adapters over a frozen {family} checkpoint (training.init_from) on a "
                           "preference dataset, against that checkpoint alone; only the adapters train and are "
                           "checkpointed.",
    _lora_dpo_body, __name__, base=_LORA.__getitem__)
