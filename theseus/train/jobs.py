"""The registered training job ``gpt/train/pretrain``: a recipe trained by the Trainer, every step a node.

``Pretrain`` holds a `theseus.train.recipe.Recipe` (a GPT on one tokenized dataset, AdamW,
warmup-stable-decay, cross-entropy and per-dataset validation loss) and puts the store around
its trainer. Its class carries the recipe class (``Pretrain.RECIPE``); a subclass that replaces
parts, or overrides a recipe hook (``model(config)``, ``loss(config)``...), is a new training job
whose ``RECIPE`` is made from its body (`job_recipe`)::

    @job("mylab/train/mix", "Pretrain on a 70/30 mixture with Lion and a cosine schedule.")
    class Mix(Pretrain):
        DATA = [Sampling("pydoc", 0.7), Sampling("addition", 0.3)]
        OPTIMIZER = optimizers.Lion
        SCHEDULE = schedules.Cosine
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax

from theseus import config as configs
from theseus.errors import BadInput
from theseus.jobs import Job, Preempted, job, job_json
from theseus.mirror import Mirror, MirrorRun, open_sink
from theseus.store import EmptyResult, Node, layout, retired, schema, trust
from theseus.store import fs as rootfs
from theseus.train import init_from
from theseus.train.evals.text import BitsPerByte
from theseus.train.evaluations import ValidationLoss
from theseus.train.inspection import Inspection
from theseus.train.models import DECODER_PARTS
from theseus.train.preemption import AgreedStop, StopRequest
from theseus.train.recipe import Recipe
from theseus.train.retention import Policy, Retention


def recorded_step(record: dict[str, Any]) -> int | None:
    """The ``train/step`` a node's record holds (the step its checkpoint must hold), None when it has none.

    >>> recorded_step({"train/step": 8.0}), recorded_step({"train/loss": 2.5})
    (8, None)
    """
    value = record.get("train/step")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return int(value)


#: the recipe hooks a job class may override in its body (they become methods of its recipe class)
RECIPE_HOOKS = ("check", "model", "loss", "forward", "objective", "schedule", "optimizer", "sources", "loader",
                "build", "step_parts", "validation_data")


def _moved(fn: types.FunctionType, owner: type) -> types.FunctionType:
    """``fn`` (a hook written in a job class's body) as a method of the recipe class ``owner``: its zero-argument
    ``super()`` then walks the recipe classes, as it would have walked the job classes."""
    cells = tuple(types.CellType(owner) if name == "__class__" else cell
                  for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    moved = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells or None)
    moved.__kwdefaults__, moved.__doc__, moved.__qualname__ = fn.__kwdefaults__, fn.__doc__, fn.__qualname__
    return moved


def job_recipe(cls: type, base: type[Recipe]) -> type[Recipe]:
    """The recipe class of the job class ``cls``: a subclass of ``base`` (its parent job's recipe class) with the
    part attributes and constants (upper-case names), the ``Config`` and the hooks (`RECIPE_HOOKS`) declared by
    the body of ``cls`` and of the mixins before its parent job class in its MRO (a mixin's first).

    >>> from theseus.train import optimizers
    >>> class Fast(Pretrain):
    ...     OPTIMIZER = optimizers.Lion
    ...     def loss(self, config):
    ...         return super().loss(config)
    >>> from theseus.train.config import load_config
    >>> loss = Fast.RECIPE().loss(load_config(None, Fast.Config))
    >>> Fast.RECIPE.OPTIMIZER.name, Fast.RECIPE.__bases__ == (Pretrain.RECIPE,), loss.__name__
    ('lion', True, 'cross_entropy')
    """
    owners = []
    for owner in cls.__mro__:
        if owner is not cls and "RECIPE" in vars(owner):
            break  # the parent job: its recipe class is ``base``
        owners.append(owner)
    body: dict[str, Any] = {}
    hooks: dict[str, types.FunctionType] = {}
    for owner in reversed(owners):
        for name, value in vars(owner).items():
            if name == "Config" or (name.isupper() and not name.startswith("_") and name != "RECIPE"):
                body[name] = value
            elif name in RECIPE_HOOKS and isinstance(value, types.FunctionType):
                hooks[name] = value
    recipe = type(f"{cls.__name__}Recipe", (base,), {**body, "__module__": cls.__module__,
                                                     "__qualname__": f"{cls.__qualname__}.RECIPE"})
    for name, fn in hooks.items():
        setattr(recipe, name, _moved(fn, recipe))
    return recipe


class PretrainRecipe(Recipe):
    """The recipe of `gpt/train/pretrain`: `Recipe`'s parts, with the bits per byte of each dataset's validation
    split among the evaluations.

    >>> [e.name for e in PretrainRecipe.EVALUATION], PretrainRecipe()._named()
    (['val-loss', 'bits-per-byte'], 'Pretrain')
    """

    __qualname__ = "Pretrain.RECIPE"  # what it is, as a subclass's (`job_recipe`): messages name the job class
    EVALUATION = (ValidationLoss, BitsPerByte)


@job("gpt/train/pretrain", "Pretrain a GPT on a tokenized dataset; every step a node, checkpoints in objects/.")
class Pretrain(Job):
    """Train the recipe's model on its data (by default a GPT on ``<root>/data/<data.dataset>``); the node at
    seq k holds the state after k steps.

    The job holds its recipe (``self.recipe``, an instance of ``RECIPE``); a subclass replaces parts
    (``DATA``, ``OPTIMIZER``...) or overrides a recipe hook (``model``, ``loss``): see
    `theseus.train.recipe.Recipe` and `job_recipe`. Reports land on their step's node, checkpoints
    under ``objects/<node-id>/`` and the node's checkpoint record is appended only after the
    checkpoint's MANIFEST is published. Restoring (``q.find()...resume()`` or ``branch()``) continues
    from the base node's checkpoint.

    By default it lists the validation loss and the bits per byte of each dataset's validation
    split (`theseus.train.evals.text.BitsPerByte`).

    >>> Pretrain.key, [e.name for e in Pretrain.EVALUATION], Pretrain.RECIPE.EVALUATION == Pretrain.EVALUATION
    ('gpt/train/pretrain', ['val-loss', 'bits-per-byte'], True)
    """

    RECIPE: ClassVar[type[Recipe]] = PretrainRecipe  # a subclass's is made from its body: see job_recipe
    MODEL = RECIPE.MODEL
    DATA = RECIPE.DATA
    OPTIMIZER = RECIPE.OPTIMIZER
    SCHEDULE = RECIPE.SCHEDULE
    LOSS = RECIPE.LOSS
    EVALUATION = RECIPE.EVALUATION
    ANALYSIS = RECIPE.ANALYSIS
    Config = RECIPE.Config

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.RECIPE = job_recipe(cls, next(b.RECIPE for b in cls.__mro__[1:] if "RECIPE" in vars(b)))
        cls.Config = cls.RECIPE.Config

    def __init__(self, *args: Any, **kwargs: Any):
        """Use ``create``; the job holds an instance of its recipe class."""
        super().__init__(*args, **kwargs)
        self.recipe: Recipe = type(self).RECIPE()

    def setup(self) -> None:
        """Validate, build the trainer (autobatch when asked), attach its hooks (records, mirror, checkpoints)
        and initialise or restore its state."""
        from theseus.train.trainer import Trainer  # with TensorStore, loaded only when a training job is set up

        checkpoint, step = self._base_checkpoint()
        source = source_folder = None  # training.init_from: a new lineage under that node, from its parameters
        if self.base is None and self.config.training.init_from:
            source, source_folder, source_config = init_from.source_of(self.store, str(self.config.training.init_from))
            init_from.adopt(self.config, type(self).defaults(), source_config, self.recipe)
            self.node = Node(self.name, self.node.nonce, 0, source.id)
        self._first_parent = self.base.id if self.base is not None else source.id if source is not None else None
        self.primary = jax.process_index() == 0
        self._ticked = False
        # ticks outside job() are an inspection session, closed by close() or at exit
        self._inspection = Inspection(self.store, new_lineage=self.base is None or self.node.nonce != self.base.nonce)
        self._mirror: Mirror | None = None  # opened at the first report when logging.remote is on
        self._artifact_nodes: set[str] = set()  # nodes whose artifacts record this job wrote
        policy = Policy.from_config(self.config.logging)  # logging.keep_checkpoints: None keeps every checkpoint
        self._retention = Retention(policy, self.store, self.log) if policy.keep else None
        self.trainer = Trainer(self.config, self.store.root, recipe=self.recipe, log=self.log,
                               write_artifact=self._write_artifact, sidecars=self._sidecars)
        self.trainer.checkpoint_to(self._folder_at)
        self.trainer.add_hook(self._committed, on="commit")
        self.trainer.add_hook(self._report)
        if self.config.training.per_device_batch_size == -1:
            self.config.training.per_device_batch_size = self.trainer.per_device_batch_size
        self._place_state(checkpoint, step, source, source_folder)

    def _place_state(self, checkpoint: str | None, step: int | None, source: Node | None,
                     source_folder: str | None) -> None:
        """The trainer's first state: the parameters of ``source`` (``training.init_from``), a fresh one, or the
        base node's ``checkpoint`` (which must hold ``step``); sets the offset of seq against step."""
        if source is not None:
            self.trainer.start_from(source_folder, node=source, verify=self.verify)
            self._offset = 0
        elif checkpoint is None:
            self.trainer.init()
            self._offset = 0
        else:
            # the folder must be the base node's own (its job.json, its step): never a swapped one
            self.trainer.restore(rootfs.url(self.store.fs, checkpoint), verify=self.verify, node=self.base, step=step)
            # same lineage: seq == step; a branch starts its own seq 0 at the base's step
            self._offset = self.trainer.step if self.node.nonce != self.base.nonce else 0

    def _base_checkpoint(self) -> tuple[str | None, int | None]:
        """The checkpoint folder of the base node (inside the root) and the step it recorded; (None, None) for a
        fresh run. A base without a committed checkpoint, or with a retired one, is refused."""
        if self.base is None:
            return None, None
        record = self.store.record(self.base)
        checkpoint, step = record.get("_checkpoint"), recorded_step(record)
        if not checkpoint or retired.retired(record):
            what = f"retired ({retired.retired(record)})" if checkpoint else "no committed"
            raise BadInput(f"node {self.base.id} (seq {self.base.seq} of {self.base.name}:{self.base.nonce}) has "
                           f"{what} checkpoint; query with .checkpoint() to pick one that has")
        try:  # the rule audit applies: only a folder inside the root is followed
            return trust.checkpoint_folder(self.store.fs, self.store.path(), checkpoint), step
        except ValueError as e:
            raise BadInput(f"cannot restore node {self.base.id} (seq {self.base.seq} of "
                           f"{self.base.name}:{self.base.nonce}): {e}") from None

    # -- the nodes of this run ------------------------------------------------

    def _node_at(self, step: int) -> Node:
        """The node holding the state after ``step`` steps."""
        seq = step - self._offset
        if seq == self.node.seq:
            return self.node
        if seq == 0:
            return Node(self.name, self.node.nonce, 0, self._first_parent)
        return Node(self.name, self.node.nonce, seq, Node(self.name, self.node.nonce, seq - 1).id)

    def _folder_at(self, step: int) -> str:
        """The checkpoint folder of ``step``'s node, cleared of a complete checkpoint that no record references.

        Such a folder is left by a crash between its MANIFEST and its record (garbage by
        the commit order); this run continues the lineage under its claim, so no one else
        writes that node's folder, and the save replaces it instead of refusing.
        """
        node = self._node_at(step)
        folder = self.store.objects(node)
        if self.primary and rootfs.exists(rootfs.join(folder, layout.MANIFEST)) and not self._references(node):
            self.log.warning(f"CHECKPOINT | {folder} holds a complete checkpoint no record references "
                             "(left by a crash before its commit); replacing it")
            rootfs.remove_tree_except(folder, layout.ANALYSIS)  # published analyses have their own record
        return folder

    def _references(self, node: Node) -> bool:
        """Whether a checkpoint record of ``node`` exists."""
        try:
            return bool(self.store.record(node).get(schema.CHECKPOINT))
        except EmptyResult:
            return False

    def _report(self, step: int, metrics: dict[str, Any]) -> None:
        self._record(step, metrics)
        self.node = self._node_at(step)

    def _record(self, step: int, metrics: dict[str, Any]) -> None:
        """Write ``metrics`` on ``step``'s node and mirror them live, so the mirror holds what the store does."""
        if self.writer is not None:
            self.writer.write(self._node_at(step), metrics)
            if self._retention is not None:
                self._retention.observe(self._node_at(step).id, metrics)
            if self.primary and self.config.logging.remote:
                self._mirrored().report(step, metrics)

    def _mirrored(self) -> Mirror:
        """The live mirror of this run's reports (`theseus.mirror`), started at the first report."""
        if self._mirror is None:
            section = self.config.logging
            run = MirrorRun(self.name, self.node.nonce, configs.to_dict(self.config),
                            folder=section.remote_dir, offline=section.remote_offline)
            backend = section.remote_backend
            self._mirror = Mirror(lambda: open_sink(backend, run), f"{backend} {run.label}", log=self.log)
        return self._mirror

    def _close_mirror(self) -> None:
        """Close the mirror (it logs what it mirrored and what it dropped); the next report opens a new one."""
        if self._mirror is not None:
            mirror, self._mirror = self._mirror, None
            mirror.close()

    def _committed(self, step: int, folder: str) -> None:
        node = self._node_at(step)
        if self.writer is not None:
            # a checkpoint step that reports nothing still places its node against steps and tokens
            self.writer.write(node, self.trainer.position(step))
            self.writer.checkpoint(node, layout.objects(node.id))
            if self._retention is not None and self.primary:
                # the files go on the checkpoints' background thread, which trainer.wait() joins
                self._retention.committed(node, self.writer, defer=self.trainer.checkpoints.defer)

    def _start(self) -> None:
        """Place the node this job starts from (the job record's node) against steps and tokens."""
        self._record(self.trainer.step, self.trainer.position())

    def _write_artifact(self, step: int, name: str, data: bytes) -> str:
        """Publish ``data`` as ``analysis/<name>`` in ``step``'s node folder, then record that folder (commit order)
        once per node: the record keeps the whole folder, and each one is a flushed segment."""
        node = self._node_at(step)
        relative = f"{layout.objects(node.id)}/{layout.ANALYSIS}/{name}"
        if self.primary:
            rootfs.publish(self.store.fs, f"{self.store.objects(node)}/{layout.ANALYSIS}/{name}", bytes(data))
            if self.writer is not None and node.id not in self._artifact_nodes:
                self.writer.artifacts(node, layout.objects(node.id))
                self._artifact_nodes.add(node.id)
        return relative

    def _sidecars(self, step: int) -> dict[str, str]:
        node = self._node_at(step)
        return {layout.JOB_FILE: job_json(self.key, node, self.base.id if self.base else None, step=step)}

    # -- lifecycle ------------------------------------------------------------------

    def run(self) -> Node:
        """Train to the end of the run (``training.steps`` or ``training.tokens``); returns the last node.

        SIGTERM while it trains (`theseus.train.preemption`) ends the current step, commits its
        checkpoint and raises ``Preempted``: ``job()`` records the run ``preempted``, and a
        resume continues it from that node as if it had never stopped. The processes of a
        multi-process run stop at one step, agreed when the first of them gets the signal
        (`theseus.train.preemption.AgreedStop`).
        """
        self._inspection.drop()  # job() records how the run ends
        self._start()
        with StopRequest() as request:
            stop = AgreedStop(request)
            try:
                self.trainer.train(stop=lambda: stop(self.trainer.step))
            finally:
                try:
                    self.trainer.wait()
                finally:
                    self._close_mirror()
        self.node = self._node_at(self.trainer.step)
        if stop.stopped and self.trainer.step < self.trainer.total_steps:
            why = request.signal_name or "another process's signal"
            self.log.warning(f"JOB {self.node.run} | {why}: stopped after step {self.trainer.step}, "
                             f"checkpoint committed at node {self.node.id}")
            raise Preempted(self.node, self.trainer.step)
        return self.node

    def save(self) -> str:
        """Checkpoint the current state into this node's artifact folder (committed in the background)."""
        folder = self.store.objects(self._node_at(self.trainer.step))
        self.trainer.save(folder)
        return folder

    def tick(self) -> Node:
        """Train exactly one step (consuming ``batch()``) and write its node like a normal step: inside ``job()``
        with its writer; outside it in the job's own run context (`theseus.jobs.Job.recording`: claimed, and the
        job record first when the lineage starts here), as an inspection session."""
        if self.writer is not None:
            self.trainer.tick()
        else:
            first = not self._ran and not self._ticked  # a created job ticked before it ran: its lineage starts here
            with self.recording(first=first) as writer:
                try:
                    if first:
                        self._start()
                        if self.primary:
                            self._inspection.start(writer, self.node)
                            weakref.finalize(self, self._inspection.close)  # at exit when close() never comes
                    self._ticked = True
                    self.trainer.tick()
                    self.trainer.wait()
                finally:
                    self._close_mirror()
        self.node = self._node_at(self.trainer.step)
        self._inspection.moved(self.node)
        return self.node

    # -- replay: the trainer's inspection API on the job ----------------------------

    def batch(self) -> dict:
        """The batch the next step consumes (the same until ``tick()``)."""
        return self.trainer.batch()

    def find(self, module_type: type) -> list[tuple[str, ...]]:
        """Module paths of ``module_type`` in forward order, e.g. ``[('blocks_0', 'mlp'), ...]``."""
        return self.trainer.find(module_type)

    def debug(self, path=None, **kwargs):
        """``(layer, inputs)`` of the module at ``path`` on ``batch()`` with the current parameters."""
        return self.trainer.debug(path, **kwargs)

    def generate(self, prompts, **options):
        """A sample per prompt from the current parameters (`theseus.train.trainer.Trainer.generate`)."""
        return self.trainer.generate(prompts, **options)

    def close(self) -> None:
        """Finish pending checkpoints and the mirror, close an inspection session (ticks outside ``job()``:
        `theseus.train.inspection`), and free the device state."""
        try:
            self.trainer.close()
        finally:
            try:
                self._inspection.close()
            finally:
                self._close_mirror()


# -- the open-model decoder families: Pretrain with another model part ----------------------------------

_FAMILY_JOBS = {
    "llama": "Pretrain a Llama-family decoder (RMSNorm, SwiGLU, GQA, RoPE with linear or llama3 scaling).",
    "mistral": "Pretrain a Mistral-family decoder (Llama's, with a sliding window).",
    "qwen2": "Pretrain a Qwen2-family decoder (Llama's, with q/k/v biases).",
    "qwen3": "Pretrain a Qwen3-family decoder (Llama's, with q/k RMSNorm).",
    "gemma": "Pretrain a Gemma-family decoder (scaled embedding, (1 + w) RMSNorm, GeGLU, tied).",
    "gpt_neox": "Pretrain a GPT-NeoX-family decoder (parallel residual, partial rotary).",
}


#: the class-name suffix of each family's jobs (``PretrainLlama``, ``LoraGptNeox``...), the GPT's first
FAMILY_NAMES = {"gpt": "Gpt", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                "gemma": "Gemma", "gpt_neox": "GptNeox"}
#: the decoder families (every family but the GPT): each has its own ``<family>/train/pretrain``
DECODER_FAMILIES = tuple(family for family in FAMILY_NAMES if family != "gpt")


def family_jobs(kind: str, prefix: str, description: str | Mapping[str, str],
                body: Callable[[type[Pretrain], str], dict[str, Any]], module: str,
                base: Callable[[str], type[Pretrain]] | None = None,
                families: Sequence[str] = tuple(FAMILY_NAMES)) -> tuple[type[Pretrain], ...]:
    """One registered job ``<family>/train/<kind>`` per family of ``families``, in that order: the class
    ``<prefix><Family>`` (`FAMILY_NAMES`) of ``module``, a subclass of ``base(family)`` (by default the family's
    pretraining job, `pretraining_job`) with ``body(base, family)``, whose ``__doc__`` gains a doctest of its
    model part. ``description`` is the registry's line: a template of ``{family}``, or one line per family.

    >>> PretrainQwen3.key, PretrainQwen3.__bases__ == (Pretrain,), PretrainQwen3.MODEL.name
    ('qwen3/train/pretrain', True, 'qwen3')
    """
    made = []
    for family in families:
        parent, name = (base or pretraining_job)(family), prefix + FAMILY_NAMES[family]
        namespace = body(parent, family)
        namespace = {**namespace, "__module__": module,
                     "__doc__": f"{namespace['__doc__']}\n\n>>> {name}.MODEL.name\n{family!r}\n"}
        line = description[family] if isinstance(description, Mapping) else description.format(family=family)
        made.append(job(f"{family}/train/{kind}", line)(type(name, (parent,), namespace)))
    return tuple(made)


def pretraining_job(family: str) -> type[Pretrain]:
    """The job ``<family>/train/pretrain`` (`Pretrain` for the GPT): what a family's other jobs are made over.

    >>> pretraining_job("gpt") is Pretrain, pretraining_job("gemma").key
    (True, 'gemma/train/pretrain')
    """
    if family not in PRETRAINING:
        raise BadInput(f"unknown model family {family!r}: one of {', '.join(PRETRAINING)}")
    return PRETRAINING[family]


PretrainLlama, PretrainMistral, PretrainQwen2, PretrainQwen3, PretrainGemma, PretrainGptNeox = family_jobs(
    "pretrain", "Pretrain", _FAMILY_JOBS, lambda base, family: {
        "MODEL": DECODER_PARTS[family], "__doc__": f"`Pretrain` with the ``{family}`` model part."},
    __name__, base=lambda family: Pretrain, families=DECODER_FAMILIES)

#: each family's pretraining job, the GPT's first (`pretraining_job`)
PRETRAINING: dict[str, type[Pretrain]] = {"gpt": Pretrain, **dict(zip(DECODER_FAMILIES, (
    PretrainLlama, PretrainMistral, PretrainQwen2, PretrainQwen3, PretrainGemma, PretrainGptNeox), strict=True))}
