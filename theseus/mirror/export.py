"""``theseus export tensorboard``: TensorBoard event files for runs already in a root.

Each run becomes ``<out>/<name>/<nonce>/``, the layout the live TensorBoard mirror writes: every
user key of every node is a scalar at the node's training step (its seq, plus the step its lineage
branched at: a branch's seq 0 is the state after its base's steps, a fine-tuning run's is step 0),
the run's name, nonce and config are text. ``tensorboard --logdir <out>`` then shows any root,
however its runs were made. A run folder that already holds an event file is refused (written twice,
TensorBoard would show every point twice). Each run's event file is published whole (`EventFile`):
an export interrupted or failing part way leaves the runs it finished and no event file of the
others, only a temporary name TensorBoard skips, so running it again exports them.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> root, out = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> node = Node.start("my-run")
>>> with Store(root).writer() as w:
...     w.write(node.next(), {"train/loss": 2.5})
>>> [f.split("/")[-2:] for f in export_tensorboard(root, [], out)]
[['general.default.my-run', '...']]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import yaml

from theseus.errors import BadInput
from theseus.mirror.sinks import MirrorRun, scalars
from theseus.mirror.to_tensorboard import EventFile, is_event_file, run_folder
from theseus.store import EmptyResult, Node, Store, schema


def step_offset(store: Store, nonce: str, _seen: frozenset[str] = frozenset()) -> int:
    """The training step of seq 0 of lineage ``nonce``: the ``train/step`` its seq 0 records (a training job
    places its start there, so a fine-tuning run over a checkpoint counts from 0 as its live mirror does), else 0
    for a fresh lineage, else its base node's step (the base's seq plus its own lineage's offset). A base lineage
    missing from the root counts from 0.

    >>> import tempfile
    >>> from theseus.store import Node, Store
    >>> store = Store(tempfile.mkdtemp())
    >>> base = Node.start("a").next().next()             # seq 2 of a fresh lineage: step 2
    >>> branch = Node.start("b", parent=base.id)         # a branch from it: its seq 0 is step 2
    >>> with store.writer() as w:
    ...     w.write(base, {"x": 1}); w.write(branch, {"x": 2})
    >>> step_offset(store, base.nonce), step_offset(store, branch.nonce)
    (0, 2)
    >>> tuned = Node.start("c", parent=base.id)          # a fine-tuning run over it: its own steps from 0
    >>> with store.writer() as w:
    ...     w.write(tuned, {"train/step": 0})
    >>> step_offset(store, tuned.nonce)
    0
    """
    if nonce in _seen:
        raise BadInput(f"lineage {nonce} is its own ancestor (a corrupt parent chain)")
    try:
        first = store.find().nonce(nonce).seq(0).first()
    except EmptyResult:
        return 0
    recorded = store.record(first).get("train/step")
    if recorded is not None:
        return int(recorded)
    if first.parent is None:
        return 0
    base = Node.from_id(first.parent)
    return base.seq + step_offset(store, base.nonce, _seen | {nonce})


def run_config(store: Store, nonce: str) -> dict[str, Any]:
    """The run's config (its ``_config`` YAML, read as plain data), or {} for a run that recorded none.

    >>> import tempfile
    >>> from theseus.store import Node, Store
    >>> store, node = Store(tempfile.mkdtemp()), Node.start("r")
    >>> with store.writer() as w:
    ...     w.job(node, "doc/job", "training: {batch_size: 8}")
    >>> run_config(store, node.nonce)
    {'training': {'batch_size': 8}}
    """
    text = store.run_record(nonce).get(schema.CONFIG)
    loaded = yaml.safe_load(text) if text else None  # YAML as data: nothing read from a root runs
    return loaded if isinstance(loaded, dict) else {}


def export_tensorboard(root: str | Store, nonces: Sequence[str], out: str) -> list[str]:
    """Write TensorBoard event files for the runs ``nonces`` of ``root`` (all runs when empty) under ``out``;
    returns the run folders written, each holding one event file published whole. An unknown nonce, or a run
    folder in ``out`` that already holds an event file, is a ValueError raised before anything is written.

    >>> import tempfile
    >>> export_tensorboard(tempfile.mkdtemp(), ["abc123"], tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no run with nonce 'abc123' in ...
    """
    store = root if isinstance(root, Store) else Store(root)
    runs = store.runs()
    names = dict(zip(runs["nonce"].to_list(), runs["name"].to_list(), strict=True))
    wanted = list(dict.fromkeys(nonces)) or list(names)
    for nonce in wanted:
        if nonce not in names:
            raise BadInput(f"no run with nonce {nonce!r} in {store.root}")
    todo = [MirrorRun(names[n], n, run_config(store, n), folder=out) for n in wanted]
    for run in todo:
        folder = run_folder(run)
        if os.path.isdir(folder) and any(is_event_file(name) for name in os.listdir(folder)):
            raise BadInput(f"{folder} already holds event files; export into another folder or remove it first")
    written = []
    for run in todo:
        offset = step_offset(store, run.nonce)
        nodes = store.find().nonce(run.nonce).frame().drop("node", "name", "nonce", "parent").collect()
        events = EventFile(run)
        try:
            for row in nodes.sort("seq").iter_rows(named=True):
                step = offset + row.pop("seq")
                values = scalars({k: v for k, v in row.items() if v is not None})
                if values:
                    events.log(step, values)
        except BaseException:  # an interrupt too: no part of this run is published
            events.discard()
            raise
        events.close()
        written.append(events.folder)
    return written

