"""Checkpoint retention: which committed checkpoints of a lineage a run keeps, and retiring the others.

``logging.keep_checkpoints=N`` keeps the newest N committed checkpoints of the run's lineage;
``logging.keep_best=KEY`` also keeps the best ``keep_best_count`` of them by ``KEY`` (``keep_best_mode``
``min`` or ``max``; a checkpoint whose node holds no value of KEY, or NaN, is never among the best).
Default (``keep_checkpoints: null``): every checkpoint is kept. After each commit the job retires
the others (`theseus.store.retired`: a durable ``_retired`` record, then the folder is cleared),
except a checkpoint that another lineage starts from (a branch, or ``init_from``): that one stays.
The newest checkpoint, the one a resume needs, is always kept (N is at least 1).

>>> policy = Policy(keep=2, best="val/loss")
>>> policy.retire([Kept("a", 1, 3.0), Kept("b", 2, 1.0), Kept("c", 3, 2.0), Kept("d", 4, None)])
['a']
>>> Policy().retire([Kept("a", 1, None), Kept("b", 2, None)])  # the default keeps everything
[]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from loguru import logger

from theseus.errors import BadInput
from theseus.store import EmptyResult, Node, Store, layout, retired, schema, trust
from theseus.store.cursor import UnknownKey

MODES = ("min", "max")


class Kept(NamedTuple):
    """A live committed checkpoint of the lineage: its node id, seq, and its value of the best key (None: none).

    >>> Kept("id", 3, 2.5).seq
    3
    """

    node: str
    seq: int
    value: float | None


@dataclasses.dataclass(frozen=True)
class Policy:
    """What a lineage keeps: the newest ``keep`` checkpoints (None: all) and the best ``best_count`` by
    ``best`` (``mode`` min or max). `from_config` reads and checks the ``logging`` section.

    >>> Policy(keep=3).reason
    'logging.keep_checkpoints=3'
    """

    keep: int | None = None
    best: str | None = None
    mode: str = "min"
    best_count: int = 1

    @classmethod
    def from_config(cls, logging: Any) -> Policy:
        """The policy of a ``logging`` config section; a ValueError naming the key for a value no run can use.

        >>> Policy.from_config({"keep_checkpoints": 2, "keep_best": "val/loss", "keep_best_mode": "max",
        ...                     "keep_best_count": 1}).mode
        'max'
        >>> Policy.from_config({"keep_checkpoints": 0, "keep_best": None, "keep_best_mode": "min",
        ...                     "keep_best_count": 1})
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: logging.keep_checkpoints must be a positive integer (...) or null to keep ...
        """
        keep, best = logging["keep_checkpoints"], logging["keep_best"]
        mode, count = logging["keep_best_mode"], logging["keep_best_count"]
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise BadInput("logging.keep_checkpoints must be a positive integer (the newest checkpoint is what a "
                             f"resume needs) or null to keep every checkpoint, got {keep!r}")
        if mode not in MODES:
            raise BadInput(f"logging.keep_best_mode must be one of {', '.join(MODES)}, got {mode!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BadInput(f"logging.keep_best_count must be a positive integer, got {count!r}")
        if best is None:
            if count != 1 or mode != "min":
                raise BadInput(f"logging.keep_best_count={count} / keep_best_mode={mode!r} need logging.keep_best "
                                 "(the key to rank checkpoints by, e.g. val/loss)")
            return cls(keep)
        try:
            schema.check_user_key(best)
        except ValueError as e:
            raise BadInput(f"logging.keep_best: {e}") from None
        if keep is None:
            raise BadInput(f"logging.keep_best={best!r} needs logging.keep_checkpoints (without it every "
                             "checkpoint is kept, so the best ones are kept anyway)")
        return cls(keep, best, mode, count)

    @property
    def reason(self) -> str:
        """The rule, as a retire record states it.

        >>> Policy(keep=1, best="val/loss", mode="max", best_count=2).reason
        'logging.keep_checkpoints=1, keep_best=val/loss (max, 2)'
        """
        best = f", keep_best={self.best} ({self.mode}, {self.best_count})" if self.best else ""
        return f"logging.keep_checkpoints={self.keep}{best}"

    def retire(self, live: list[Kept]) -> list[str]:
        """The node ids among ``live`` this policy retires, oldest first.

        >>> Policy(keep=1, best="acc", mode="max").retire([Kept("a", 1, 0.9), Kept("b", 2, 0.5), Kept("c", 3, 0.7)])
        ['b']
        """
        if self.keep is None:
            return []
        by_seq = sorted(live, key=lambda k: k.seq)
        kept = {k.node for k in by_seq[-self.keep:]}
        if self.best is not None:
            ranked = [k for k in by_seq if k.value is not None and not math.isnan(k.value)]
            sign = 1.0 if self.mode == "min" else -1.0
            ranked.sort(key=lambda k: (sign * k.value, -k.seq))  # ties: the newer one
            kept |= {k.node for k in ranked[:self.best_count]}
        return [k.node for k in by_seq if k.node not in kept]


class Retention:
    """A run's retention of its lineage's checkpoints (`Policy`), told each commit by the job.

    ``observe(node_id, values)`` takes the values the job records (the best key's, kept in memory);
    ``committed(node, writer, defer)`` retires what the policy no longer keeps, after the first commit
    learning the lineage's live checkpoints (a resumed lineage's earlier ones) from the store; the
    files are deleted by ``defer(work)`` (a background thread: `Checkpoints.defer`), or at once.

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp()); a = Node.start("doc-retention"); b = a.next()
    >>> retention = Retention(Policy(keep=1), store)
    >>> with store.writer() as w:
    ...     w.checkpoint(a, f"objects/{a.id}"); first = retention.committed(a, w)
    ...     w.checkpoint(b, f"objects/{b.id}"); second = retention.committed(b, w)
    >>> first, second == [a.id], store.find().checkpoint().all() == [b]
    ([], True, True)
    """

    def __init__(self, policy: Policy, store: Store, log: Any = logger):
        self.policy, self.store, self.log = policy, store, log
        self._live: dict[str, Kept] | None = None
        self._values: dict[str, float] = {}
        self._warned = False

    def observe(self, node_id: str, values: dict[str, Any]) -> None:
        """Remember ``node_id``'s value of the best key, when ``values`` holds one."""
        value = values.get(self.policy.best) if self.policy.best else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._values[node_id] = float(value)

    def committed(self, node: Node, writer: Any, defer: Callable[[Callable[[], Any]], Any] | None = None) -> list[str]:
        """``node``'s checkpoint committed: retire (record, then clear) what the policy drops; their ids."""
        live = self._lineage(node)
        live[node.id] = Kept(node.id, node.seq, None)
        ranked = [k._replace(value=self._values.get(k.node, k.value)) for k in live.values()]
        drop = self.policy.retire(ranked)
        if not drop:
            return []
        starts = self._branch_origins(set(drop))
        out = []
        for node_id in drop:
            if node_id in starts:
                continue  # another lineage starts from it: resuming that one may need it
            writer.retire(Node.from_id(node_id), self.policy.reason)  # durable before any file goes
            del live[node_id]
            self._clear(node_id, defer)
            out.append(node_id)
        if self.policy.best and not self._warned and not any(k.value is not None for k in ranked):
            self._warned = True
            self.log.warning(f"CHECKPOINT | logging.keep_best={self.policy.best!r}: no checkpoint of this run holds "
                             "that key yet, so only the newest are kept")
        return out

    def _lineage(self, node: Node) -> dict[str, Kept]:
        """The live checkpoints of ``node``'s lineage (read from the store once, then kept up to date)."""
        if self._live is None:
            cursor = self.store.find().name(node.name).nonce(node.nonce).checkpoint()
            values: dict[int, float] = {}
            if self.policy.best:
                try:
                    rows = cursor.frame(keys=[self.policy.best]).select("seq", self.policy.best).collect()
                    values = {s: v for s, v in rows.iter_rows() if isinstance(v, (int, float))}
                except UnknownKey:
                    pass  # not logged yet
            self._live = {n.id: Kept(n.id, n.seq, values.get(n.seq)) for n in cursor.all()}
        return self._live

    def _branch_origins(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` that another lineage starts from (its seq 0's parent), as the root holds it now."""
        return {n.parent for n in self.store.find().seq(0).all() if n.parent in ids}

    def _clear(self, node_id: str, defer: Callable[[Callable[[], Any]], Any] | None) -> None:
        """Delete the retired checkpoint's files (through ``defer``), when its record names the node's own
        folder (never another's)."""
        try:
            path = self.store.record(node_id).get(schema.CHECKPOINT)
        except EmptyResult:
            return
        if path != layout.objects(node_id):
            self.log.warning(f"CHECKPOINT | retired {node_id}, whose record names {path!r}, not its own folder: "
                             "left for `theseus gc`")
            return
        fs, base = self.store.fs, self.store.path()

        def work() -> None:
            try:
                freed = retired.clear(fs, base, trust.checkpoint_folder(fs, base, path))
            except (OSError, ValueError) as e:  # the record stands: gc clears the folder later
                self.log.warning(f"CHECKPOINT | retired {path} but could not delete it ({e}): `theseus gc` will")
                return
            self.log.info(f"CHECKPOINT | retired {path} ({self.policy.reason}), {freed} bytes freed")

        if defer is None:
            work()
        else:
            defer(work)
