"""The LoRA jobs: ``<family>/train/lora`` for the GPT and every decoder family, the family's pretraining job
with its model trained through adapters over a frozen base (`theseus.train.lora`).

A run starts from ``training.init_from`` (a node id, or a nonce: that run's last checkpoint), resolved once
to the node id the run records in its config, and in each checkpoint's ``job.json`` (``adapts``): the base
the adapters apply to. The architecture and tokenizer are the base's (`theseus.train.init_from`); the base
parameters are read from its checkpoint onto the mesh and held frozen (`theseus.train.trainer.Trainer.freeze`):
no gradient, no optimizer state, not in checkpoints. The state (adapters, their AdamW moments, the step) starts
fresh, or is restored from the run's own checkpoint on a resume, which reads the same base again: the resumed run
continues bit for bit. ``theseus sample`` and ``theseus export`` read base + adapters the same way
(`restore_frozen`). A ``training.init_from`` naming a LoRA checkpoint (a trained or imported adapter:
`theseus.hf.peft_import`) continues its adapters: the run adapts that checkpoint's base, with its rank, alpha
and targets, starting from its adapters and a fresh optimizer (``job.json``'s ``continues`` names it).

The validation loss runs through the forward (base and adapters); the evaluations, analyses and sampling read the
adapted model as one plain model, the adapters merged into the base (`theseus.train.objective.plain_model`).
Autobatch (``training.per_device_batch_size=-1``), which probes a step without its frozen tree, is refused.

>>> LoraLlama.key, LoraLlama.MODEL.name, list(LoraLlama.defaults().lora)
('llama/train/lora', 'llama', ['rank', 'alpha', 'dropout', 'targets'])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml
from omegaconf import DictConfig

from theseus.errors import BadInput, NotFound
from theseus.jobs import job_json
from theseus.store import EmptyResult, Node, Store, layout
from theseus.train import init_from, placement
from theseus.train.built import Built, Layout
from theseus.train.jobs import Pretrain, family_jobs
from theseus.train.lora import LoraConfig, LoraModel, lora_forward, lora_part, lora_spec

__all__ = ["ADAPTS", "LoraGemma", "LoraGpt", "LoraGptNeox", "LoraLlama", "LoraMistral", "LoraQwen2", "LoraQwen3",
           "base_of", "frozen_params", "restore_frozen"]

#: the ``job.json`` field of a LoRA checkpoint naming the base node its adapters apply to
ADAPTS = "adapts"


def _with_lora(config: type) -> type:
    """``config`` (a job's config dataclass) with a ``lora`` section after its others."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(config)]
    return dataclasses.make_dataclass(f"Lora{config.__name__}", [
        *fields, ("lora", LoraConfig, dataclasses.field(default_factory=LoraConfig))])


def base_of(store: Store, config: DictConfig) -> tuple[Node, str]:
    """``(base node, its checkpoint folder)`` of a LoRA run's config: ``training.init_from``; a run without one is a
    BadInput saying so, a base gone from the root is a NotFound naming it.

    >>> import tempfile
    >>> from omegaconf import OmegaConf
    >>> base_of(Store(tempfile.mkdtemp()), OmegaConf.create({"training": {"init_from": ""}}))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a LoRA run adapts a base model: set training.init_from to its node id or nonce
    """
    target = str(config.training.init_from or "")
    if not target:
        raise BadInput("a LoRA run adapts a base model: set training.init_from to its node id or nonce")
    try:
        node, folder, _ = init_from.source_of(store, target)
    except EmptyResult:
        raise NotFound(f"the base of this LoRA run, node {target}, is not in {store.root}") from None
    return node, folder


def frozen_params(built: Built, base: Any, folder: str, node: Node | None, verify: bool) -> Any:
    """The parameters of the base model ``base`` (the LoRA model's) from the checkpoint in ``folder`` (``node``'s),
    on ``built``'s mesh and sharded as the params would be; every file read is checked against the folder's
    MANIFEST.json.

    >>> import tempfile
    >>> try:
    ...     frozen_params(None, None, tempfile.mkdtemp(), None, True)
    ... except FileNotFoundError as e:
    ...     print("no MANIFEST.json" in str(e))
    True
    """
    opened = placement.sealed_of(folder, node, verify)
    layout_of = Layout.of(base, built.optimizer, built.mesh, built.layout.shard, built.block_size)
    return placement.params_from(dataclasses.replace(built, layout=layout_of), folder, opened, verify)


def restore_frozen(trainer: Any, store: Store, verify: bool = True) -> Any:
    """Hold the base of a LoRA trainer (its model a `LoraModel`) frozen on its mesh, read from the base
    checkpoint its config names; returns the frozen tree (None for a trainer of another model).

    >>> restore_frozen(type("T", (), {"model": None})(), None) is None
    True
    """
    if not isinstance(trainer.model, LoraModel):
        return None
    node, folder = base_of(store, trainer.config)
    return trainer.freeze(frozen_params(trainer.built, trainer.model.base, folder, node, verify))


class _Lora:
    """The LoRA transform of a pretraining job class (the module doc); mixed in before it."""

    def check(self, config: DictConfig) -> None:
        """The pretraining job's checks, then LoRA's settings and what a LoRA run cannot do."""
        super().check(config)
        lora_spec(config.lora)
        if int(config.training.per_device_batch_size) == -1:
            raise BadInput("training.per_device_batch_size=-1 (autobatch) is not implemented for LoRA runs: "
                           "set a per-device batch size")

    def model(self, config: DictConfig) -> Any:
        """The `LoraModel` of the pretraining job's model, adapting ``config.lora``'s targets."""
        return LoraModel.of(super().model(config), lora_spec(config.lora), int(config.architecture.block_size))

    def forward(self, config: DictConfig, model: Any) -> Any:
        """`lora_forward`: the adapters trained, the base the trainer's frozen tree."""
        return lora_forward(model)


def _continued(self: Pretrain, source: Node, folder: str) -> tuple[Node, str] | None:
    """``(node, folder)`` of the adapters a run starts from when ``training.init_from`` names a LoRA checkpoint (a
    trained or imported adapter), None for a model: the run then adapts that checkpoint's base, with its rank, alpha
    and targets (a differing setting of the run is a BadInput)."""
    adapted = yaml.safe_load(placement.sealed_of(folder, source, self.verify).read(layout.CONFIG_FILE).decode())
    if not isinstance(adapted.get("lora"), dict):
        return None
    defaults = type(self).defaults().lora
    for key in ("rank", "alpha", "targets"):
        mine, theirs = self.config.lora[key], adapted["lora"][key]
        if mine != defaults[key] and mine != theirs:
            raise BadInput(f"lora.{key}={mine}: training.init_from={source.id} holds adapters of lora.{key}="
                           f"{theirs}, which this run continues: leave it unset")
        self.config.lora[key] = theirs
    self.config.training.init_from = str(adapted["training"]["init_from"])
    return source, folder


def _pin_base(self: Pretrain) -> None:
    """A new run's ``training.init_from`` resolved to the exact node id (a nonce's last checkpoint moves on as that
    run goes on; the adapters apply to one node); a LoRA checkpoint there continues its adapters over its base
    (`_continued`: ``self._continues``, None for a model)."""
    self._continues = None
    if self.base is None:
        source, folder = base_of(self.store, self.config)
        self.config.training.init_from = source.id
        self._continues = _continued(self, source, folder)


def _setup(self: Pretrain) -> None:
    """The pretraining job's setup, its base pinned first (`_pin_base`)."""
    self._pin_base()
    Pretrain.setup(self)


def _place(self: Pretrain, checkpoint: str | None, step: int | None, source: Node | None,
           source_folder: str | None) -> None:
    """A LoRA job's state: fresh adapters over the base ``source``, or the run's own checkpoint over the base its
    config names; then the base frozen on the mesh."""
    if source is not None and self._continues is not None:  # the adapters of a LoRA checkpoint, a fresh optimizer
        self.trainer.start_from(self._continues[1], node=self._continues[0], verify=self.verify)
        self._offset = 0
    elif source is not None:
        self.trainer.init()
        self._offset = 0
    else:
        Pretrain._place_state(self, checkpoint, step, None, None)
    self._adapts, _ = base_of(self.store, self.config)
    restore_frozen(self.trainer, self.store, self.verify)


def _sidecars(self: Pretrain, step: int) -> dict[str, str]:
    """``job.json`` as every checkpoint's, naming the base the adapters apply to (`ADAPTS`)."""
    node = self._node_at(step)
    continues = {"continues": self._continues[0].id} if getattr(self, "_continues", None) else {}
    return {layout.JOB_FILE: job_json(self.key, node, self.base.id if self.base else None, step=step,
                                      **{ADAPTS: self._adapts.id}, **continues)}


def _lora_body(pretrain: type[Pretrain], family: str) -> dict[str, Any]:
    """The class body of the LoRA job over the pretraining job ``pretrain`` of ``family`` (`family_jobs`).

    >>> LoraGpt.key, [e.name for e in LoraGpt.EVALUATION]
    ('gpt/train/lora', ['val-loss', 'bits-per-byte'])
    """
    return {"MODEL": lora_part(pretrain.MODEL), "Config": _with_lora(pretrain.Config),
            "check": _Lora.check, "model": _Lora.model, "forward": _Lora.forward, "setup": _setup,
            "_pin_base": _pin_base, "_place_state": _place, "_sidecars": _sidecars,
            "restore_frozen": staticmethod(restore_frozen),
            "__doc__": f"LoRA over a frozen ``{family}`` base (module doc)."}


LoraGpt, LoraLlama, LoraMistral, LoraQwen2, LoraQwen3, LoraGemma, LoraGptNeox = family_jobs(
    "lora", "Lora", "LoRA adapters over a frozen {family} checkpoint (training.init_from); only the adapters train "
                    "and are checkpointed.", _lora_body, __name__)
