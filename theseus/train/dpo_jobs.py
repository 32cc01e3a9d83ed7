"""The DPO jobs: ``<family>/train/dpo``, a family's pretraining job tuning a checkpoint against a frozen copy of it.

Each is the family's pretraining job (the GPT's and every decoder family's) with the DPO objective
(`theseus.train.dpo`) on a preference dataset (`theseus.data.preference`).

A run starts from ``training.init_from`` (a node id, or a nonce: that run's last checkpoint), resolved once to
the node id the run records in its config. The policy starts from that checkpoint's parameters (architecture and
tokenizer adopted from it: `theseus.train.init_from`), and a copy of them is the reference, held frozen on the mesh
(`theseus.train.trainer.Trainer.freeze`): no gradient, no optimizer state, not in checkpoints. A resume restores
the policy from the run's own checkpoint and reads the reference again from the node its config records, so the
resumed run continues bit for bit.

``data.dataset`` names a dataset of ``data/tokenize/preference``; its batches hold whole pairs (`PairLoader`).
The step reports ``dpo/loss`` (also ``train/loss``), ``dpo/reward_margin`` and ``dpo/accuracy``; ``val/loss``
is the DPO loss of the validation pairs. ``dpo.beta`` (default 0.1) sets the pull towards the reference.
Not implemented, and refused: a mixture of datasets, ``loss.z_loss`` (DPO scores log-probabilities, not a
token loss), autobatch (``training.per_device_batch_size=-1``: it would probe a step without its reference),
and an accumulation that does not divide the pairs of a step (a micro-batch must hold whole pairs).

>>> DpoLlama.key, DpoLlama.MODEL.name, DpoGpt.defaults().dpo.beta
('llama/train/dpo', 'llama', 0.1)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig

from theseus.data.preference import PairLoader
from theseus.data.store import open_dataset
from theseus.errors import BadInput
from theseus.train import init_from, placement
from theseus.train.config import NotImplementedSetting
from theseus.train.dpo import DPOConfig, DPOObjective
from theseus.train.evaluations import ValidationLoss
from theseus.train.jobs import Pretrain, family_jobs

__all__ = ["DpoGemma", "DpoGpt", "DpoGptNeox", "DpoLlama", "DpoMistral", "DpoQwen2", "DpoQwen3", "dpo_recipe",
           "reference_params"]


def _with_dpo(config: type) -> type:
    """``config`` (a job's config dataclass) with a ``dpo`` section after its others."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(config)]
    return dataclasses.make_dataclass(f"Dpo{config.__name__}", [
        *fields, ("dpo", DPOConfig, dataclasses.field(default_factory=DPOConfig))])


def reference_params(trainer: Any, store: Any, verify: bool = True) -> Any:
    """Hold the reference of a DPO trainer frozen on its mesh: the parameters of the checkpoint its config's
    ``training.init_from`` names, sharded like the policy's; returns the frozen tree. A DPO job's
    ``restore_frozen``: what a restored trainer (`theseus.replay.restore`) reads back beside its checkpoint.

    >>> reference_params(None, None, True)  # doctest: +SKIP
    """
    node, folder, _ = init_from.source_of(store, str(trainer.config.training.init_from))
    params = placement.params_from(trainer.built, folder, placement.sealed_of(folder, node, verify), verify)
    return trainer.freeze(params)


class _Dpo:
    """The DPO transform of a pretraining job class (the module doc); mixed in before it."""

    EVALUATION = (ValidationLoss,)

    def check(self, config: DictConfig) -> None:
        """The pretraining job's checks, then DPO's settings and what a DPO run cannot do."""
        super().check(config)
        DPOObjective(beta=config.dpo.beta)  # a positive beta
        if not config.training.init_from:
            raise BadInput("a DPO run tunes a trained model against itself: set training.init_from to its node id "
                           "or nonce")
        if "mixture" in config.data:
            raise NotImplementedSetting("a mixture of datasets is not implemented for DPO runs: train on one "
                                        "preference dataset (data.dataset)")
        if float(config.loss.z_loss) != 0:
            raise NotImplementedSetting(f"loss.z_loss={config.loss.z_loss} is not implemented for DPO runs (the "
                                        "objective scores log-probabilities, not a token loss); leave it at 0.0")
        if int(config.training.per_device_batch_size) == -1:
            raise NotImplementedSetting("training.per_device_batch_size=-1 (autobatch) is not implemented for DPO "
                                        "runs: set a per-device batch size")

    def loader(self, config: DictConfig, root: str, split: str, batch_size: int) -> PairLoader:
        """A `PairLoader` of ``data.dataset``: batches of whole pairs (a dataset without pairs is refused). A
        batch of one row, how the recipe checks that a split exists and fits, opens one pair: no DPO plan reads
        batches of one row (its micro-batches hold whole pairs)."""
        name = config.data.dataset
        dataset = open_dataset(root, f"{name}{config.data.suffix}", hint="data/tokenize/preference")
        return PairLoader(dataset, split, seed=config.data.seed, batch_size=2 if batch_size == 1 else batch_size,
                          block_size=int(config.architecture.block_size))

    def objective(self, config: DictConfig, loss: Any) -> DPOObjective:
        """`DPOObjective` with ``dpo.beta``."""
        return DPOObjective(beta=float(config.dpo.beta))

    def build(self, config: DictConfig, *args: Any, **kwargs: Any) -> Any:
        """The pretraining recipe built; an accumulation that splits a pair across micro-batches is refused."""
        built = super().build(config, *args, **kwargs)
        pairs, accumulation = built.plan.batch_size // 2, built.plan.accumulation
        if pairs % accumulation:
            raise BadInput(f"a DPO step of {pairs} pairs cannot be split into {accumulation} micro-batches of whole "
                           "pairs: make training.batch_size / 2 a multiple of the accumulation (batch_size / "
                           "(per_device_batch_size * devices))")
        return built


def _setup(self: Pretrain) -> None:
    """Pin ``training.init_from`` to the node it names now (a nonce's last checkpoint moves on), set up the
    pretraining job (the policy from that node, or from the run's own checkpoint), then freeze the reference."""
    if self.base is None:
        self.check_init_from()
    Pretrain.setup(self)
    reference_params(self.trainer, self.store, self.verify)


def _check_init_from(self: Pretrain) -> None:
    """``training.init_from`` set, and pinned to the exact node id it names."""
    if not self.config.training.init_from:
        raise BadInput("a DPO run tunes a trained model against itself: set training.init_from to its node id "
                       "or nonce")
    node, _, _ = init_from.source_of(self.store, str(self.config.training.init_from))
    self.config.training.init_from = node.id


def dpo_recipe(parent: type[Pretrain]) -> dict[str, Any]:
    """The recipe half of the DPO transform of the job class ``parent``, for a class body over it: its
    ``Config`` with a ``dpo`` section, the evaluations, and the ``check``, ``loader``, ``objective`` and ``build``
    hooks (the DPO objective on whole pairs, DPO's refusals). How its reference is held is the job's own.

    >>> sorted(dpo_recipe(Pretrain)), list(dpo_recipe(Pretrain)["Config"]().dpo.__dict__)
    (['Config', 'EVALUATION', 'build', 'check', 'loader', 'objective'], ['beta'])
    """
    return {"EVALUATION": _Dpo.EVALUATION, "Config": _with_dpo(parent.Config), "check": _Dpo.check,
            "loader": _Dpo.loader, "objective": _Dpo.objective, "build": _Dpo.build}


def _dpo_body(pretrain: type[Pretrain], family: str) -> dict[str, Any]:
    """The class body of the DPO job over the pretraining job ``pretrain`` of ``family`` (`family_jobs`).

    >>> DpoGpt.key, [e.name for e in DpoGpt.EVALUATION]
    ('gpt/train/dpo', ['val-loss'])
    """
    return {**dpo_recipe(pretrain), "setup": _setup, "check_init_from": _check_init_from,
            "restore_frozen": staticmethod(reference_params),
            "__doc__": f"DPO of a ``{family}`` checkpoint (module doc)."}


DpoGpt, DpoLlama, DpoMistral, DpoQwen2, DpoQwen3, DpoGemma, DpoGptNeox = family_jobs(
    "dpo", "Dpo", "DPO of a {family} checkpoint (training.init_from) on a preference dataset, against a frozen "
                  "copy of it.", _dpo_body, __name__)
