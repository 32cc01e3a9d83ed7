"""Replay training steps from a restored trainer and compare them with the logged losses.

``theseus verify``: `verify` restores a node's checkpoint, `replay`s steps without
reporting or checkpointing, and `compare`s them with the ``train/loss`` the store holds
for those steps: bitwise / within tolerance / diverged. Nothing is written to the root.

>>> compare({1: 2.5, 2: 2.25}, {1: 2.5, 2: 2.25}).status
'bitwise'
>>> compare({1: 2.5}, {1: 2.5000001}, rtol=1e-5).status
'tolerance'
>>> compare({1: 2.5, 2: 2.0}, {1: 2.5, 2: 3.0}).first_divergence
2
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
from loguru import logger

from theseus.errors import BadInput
from theseus.jobs import get_job
from theseus.store import EmptyResult, Node, Store, trust
from theseus.store import fs as rootfs
from theseus.store.layout import CONFIG_FILE
from theseus.store.node import describe
from theseus.store.schema import CHECKPOINT, CONFIG, JOB, JOB_SOURCE, RETIRED
from theseus.train import manifest as mf
from theseus.train.jobs import recorded_step
from theseus.train.trainer import Trainer

LOSS = "train/loss"


def replay(trainer: Any, steps: int) -> dict[int, float]:
    """Run ``steps`` training steps from the trainer's current state; ``{step: train loss}``.

    Nothing is reported or checkpointed (no hook runs: only the trainer's public step, ``prepare()`` then
    ``run_step()``); the trainer's state and step advance as in training. Losses are fetched once at the end.

    >>> from theseus.train.example import tiny_example
    >>> from theseus.train.trainer import Trainer
    >>> root, config = tiny_example()
    >>> losses = replay(Trainer(config, root, peak_flops=1e12, progress=False), 2)
    >>> sorted(losses)
    [1, 2]
    """
    if steps < 0:
        raise BadInput(f"steps must be >= 0, got {steps}")
    if trainer.step + steps > trainer.total_steps:
        raise BadInput(f"cannot replay {steps} steps from step {trainer.step}: the run has {trainer.total_steps}")
    trainer.prepare()
    pending = {}
    for _ in range(steps):
        metrics = trainer.run_step()
        pending[trainer.step] = metrics["loss"]
    return {k: float(v) for k, v in jax.device_get(pending).items()}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How replayed losses compare with logged ones.

    ``status``: "bitwise" (every compared step equal), "tolerance" (all within
    ``rtol``/``atol``) or "diverged"; ``steps`` compared; the largest absolute and
    relative differences; the first step outside tolerance (None if none).

    >>> Verdict("bitwise", [1], 0.0, 0.0, None).ok
    True
    """

    status: str
    steps: list[int]
    max_abs_diff: float
    max_rel_diff: float
    first_divergence: int | None

    @property
    def ok(self) -> bool:
        """True unless diverged."""
        return self.status != "diverged"


def compare(logged: Mapping[int, float], replayed: Mapping[int, float], rtol: float = 1e-5,
            atol: float = 0.0) -> Verdict:
    """Compare losses at the steps both mappings hold (ValueError when they share none).

    >>> compare({1: 1.0}, {1: 1.0 + 1e-3}, rtol=1e-5).status
    'diverged'
    """
    steps = sorted(set(logged) & set(replayed))
    if not steps:
        raise BadInput(f"no common steps: logged {sorted(logged)[:10]}, replayed {sorted(replayed)[:10]}")
    max_abs = max_rel = 0.0
    first = None
    bitwise = True
    for k in steps:
        a, b = float(logged[k]), float(replayed[k])
        same = a == b or (math.isnan(a) and math.isnan(b))
        bitwise = bitwise and same
        diff = 0.0 if same else abs(a - b)
        rel = diff / abs(a) if a else (0.0 if diff == 0 else math.inf)
        max_abs, max_rel = max(max_abs, diff), max(max_rel, rel)
        if first is None and not same and not diff <= atol + rtol * abs(a):
            first = k
    status = "bitwise" if bitwise else ("tolerance" if first is None else "diverged")
    return Verdict(status, steps, max_abs, max_rel, first)


@dataclasses.dataclass(frozen=True)
class Verification:
    """The outcome of `verify`: the node, the step it restored, the logged and replayed
    losses by step (step k is the node at ``seq = node.seq + k - start``), and the `Verdict`.

    >>> v = Verification("abc", 4, {5: 1.0}, {5: 1.0}, compare({5: 1.0}, {5: 1.0}))
    >>> v.status, v.to_dict()["first_divergence"]
    ('bitwise', None)
    """

    node: str
    start: int
    logged: dict[int, float]
    replayed: dict[int, float]
    verdict: Verdict

    @property
    def status(self) -> str:
        """``bitwise``, ``tolerance`` or ``diverged``."""
        return self.verdict.status

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (what ``theseus verify --json`` prints)."""
        v = self.verdict
        return {"node": self.node, "start_step": self.start, "status": v.status, "steps": v.steps,
                "max_abs_diff": v.max_abs_diff, "max_rel_diff": v.max_rel_diff,
                "first_divergence": v.first_divergence,
                "losses": [{"step": k, "logged": self.logged[k], "replayed": self.replayed[k]} for k in v.steps]}


def checkpoint_of(store: Store, node: str | Node) -> tuple[Node, str]:
    """``(node, checkpoint url)`` of a node id that has a committed checkpoint; a clear
    ValueError for a malformed id, an unknown node or a node without a checkpoint.

    >>> import tempfile
    >>> checkpoint_of(Store(tempfile.mkdtemp()), "not-an-id")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: malformed node id 'not-an-id': expected URL-safe base64 of 'name:nonce:seq'
    """
    node = node if isinstance(node, Node) else Node.from_id(str(node))
    try:
        record = store.record(node)
    except EmptyResult:
        raise BadInput(f"no node {node.id} ({node.name}:{node.nonce}:{node.seq}) in {store.root}; "
                         f"`theseus ls {store.root}` lists the runs") from None
    path = record.get(CHECKPOINT)
    if not path or record.get(RETIRED):
        saved = [n.seq for n in store.find().name(node.name).nonce(node.nonce).checkpoint().all()]
        hint = f"seqs with one: {saved}" if saved else "that run has no checkpoint at all"
        what = f"its checkpoint was retired ({record[RETIRED]})" if path else "has no committed checkpoint"
        raise BadInput(f"node {node.id} ({node.name}:{node.nonce}:{node.seq}) {what} ({hint})")
    try:  # the rule audit and resume apply: only a folder inside the root is followed
        folder = trust.checkpoint_folder(store.fs, store.path(), path)
    except ValueError as e:
        raise BadInput(f"{describe(node.id)}: {e}") from None
    return node, rootfs.url(store.fs, folder)


def checkpoint_config(node: Node, folder: str) -> str:
    """The ``config.yaml`` of ``node``'s checkpoint folder, read once and checked against its MANIFEST; a missing,
    corrupt or not regular file (a FIFO would block the read) is an error naming the file and the node.

    >>> import tempfile
    >>> checkpoint_config(Node("general.default.a", "abc123", 3), tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: checkpoint of node ...:abc123:3): incomplete checkpoint: no MANIFEST.json in ...
    """
    try:
        return mf.Sealed(folder).read(CONFIG_FILE).decode()
    except (FileNotFoundError, ValueError) as e:  # DamagedFolder is a ValueError
        raise type(e)(f"checkpoint of {describe(node.id)}: {e}") from None


def step_of(store: Store, node: Node) -> int | None:
    """The step ``node`` recorded (``train/step``): the step its checkpoint must hold; None when it has none.

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp()); n = Node.start("doc")
    >>> with store.writer() as w:
    ...     w.write(n, {"train/step": 4})
    >>> step_of(store, n)
    4
    """
    return recorded_step(store.record(node))


def logged_losses(store: Store, node: Node) -> dict[int, float]:
    """``{seq: train/loss}`` of the node's lineage after ``node`` (seq > node.seq).

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     for loss in (3.0, 2.5, 2.0):
    ...         w.write(n, {"train/loss": loss}); n = n.next()
    >>> logged_losses(store, Node(n.name, n.nonce, 0))
    {1: 2.5, 2: 2.0}
    """
    rows = store.find().name(node.name).nonce(node.nonce).has(LOSS).frame().collect()
    return {int(s): float(v) for s, v in zip(rows["seq"], rows[LOSS]) if s > node.seq}


def _config_after(store: Store, node: Node) -> str | None:
    """The config YAML recorded at ``node.next()`` (where a job resumed from ``node`` starts), if any."""
    try:
        return store.record(node.next()).get(CONFIG) or None
    except EmptyResult:
        return None


def verify(store: Store | str, node: str | Node, steps: int, rtol: float = 1e-5, atol: float = 0.0,
           log: Any = None) -> Verification:
    """Restore ``node``'s checkpoint, replay ``steps`` steps and compare with the logged losses.

    The trainer is built from the config of the job that ran the steps after the node (the
    config recorded at seq + 1 when a job was resumed there, e.g. with a larger token
    budget; else the checkpoint's own ``config.yaml``) and restored exactly
    (``partial=False``) on this machine's devices; nothing is written to the root.
    Bad input (malformed or unknown node, no checkpoint, ``steps`` < 1 or past the end
    of the run, no logged loss in range) is a ValueError; so is a run whose job is not
    registered in this process (the message names the module or file to import, from the
    run's ``_job_source``: nothing named by the root is imported).

    >>> import tempfile
    >>> verify(tempfile.mkdtemp(), "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA", steps=2)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no node Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA ...
    """


    store = store if isinstance(store, Store) else Store(store)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise BadInput(f"steps must be a positive integer, got {steps!r}")
    node, folder = checkpoint_of(store, node)
    run = store.run_record(node.nonce, name=node.name)  # its own run, should another share the nonce
    # the run's own job class (its parts and code overrides) replays it; nothing the root names is imported
    recipe = get_job(run[JOB], run.get(JOB_SOURCE)) if run.get(JOB) else None
    logged = logged_losses(store, node)
    # peak_flops NaN: no CPU peak is measured (or cached into the root) for a replay
    config = _config_after(store, node)
    if config is None:
        config = checkpoint_config(node, folder)
    trust.plain_config(config, f"node {node.id} ({node.name}:{node.nonce}:{node.seq})")  # no tags, no resolvers
    trainer = Trainer(config, store.root, recipe=recipe, log=log or logger, peak_flops=float("nan"), progress=False)
    try:
        trainer.restore(folder, partial=False, node=node, step=step_of(store, node))
        frozen = getattr(recipe, "restore_frozen", None)  # a job's frozen tree (a base, a reference) is read back
        if frozen is not None:
            frozen(trainer, store)
        start = trainer.step
        if start + steps > trainer.total_steps:
            raise BadInput(f"cannot replay {steps} steps from step {start}: the run ends at step "
                             f"{trainer.total_steps}")
        wanted = {start + i: node.seq + i for i in range(1, steps + 1)}
        have = {step: logged[seq] for step, seq in wanted.items() if seq in logged}
        if not have:
            raise BadInput(f"no {LOSS} logged for seqs {node.seq + 1}..{node.seq + steps} of "
                             f"{node.name}:{node.nonce}; logged seqs: {sorted(logged)[:20]}")
        replayed = replay(trainer, steps)
    finally:
        trainer.close()
    return Verification(node.id, start, have, replayed, compare(have, replayed, rtol=rtol, atol=atol))
