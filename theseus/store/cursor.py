"""The cursor DSL: immutable query builders over the folded log."""

from __future__ import annotations

import difflib
import fnmatch
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from theseus.errors import BadInput, NotFound
from theseus.store import fs as rootfs
from theseus.store import marks, schema, topk
from theseus.store.fold import WRITTEN, node_ids
from theseus.store.index import Index
from theseus.store.listing import vanished
from theseus.store.node import Node, check_nonce, decode_id, normalize_name
from theseus.store.nonces import one_name
from theseus.store.plan import QueryPlan
from theseus.store.predicates import Finished, Has, Job, Lacks, NodeId, Seq, Tagged, Where, compare
from theseus.store.scope import Scope, read_scope

if TYPE_CHECKING:
    import pandas

OPS = ("==", "!=", "<", "<=", ">", ">=", "in")
IDENTITY = ("node", "name", "nonce", "seq", "parent")
RUN_KEYS = (schema.JOB, schema.FINISHED, schema.TAGS)  # the latest records run filters read
_COUNT, _LAST = "\x00count", "\x00last"  # a pruned top-k's proof, dropped before it is returned


class UnknownKey(BadInput):
    """A query named a key that no run in its scope has logged."""


class EmptyResult(NotFound):
    """A query that had to return one node matched none."""


@dataclass(frozen=True)
class Cursor:
    """An immutable query; each method returns a new cursor, terminals run it.

    >>> import tempfile
    >>> from theseus.store import Store, Node
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     for i in range(3):
    ...         w.write(n, {"train/loss": 3.0 - i, "train/tokens": 100 * i}); n = n.next()
    >>> store.find().where("train/tokens", ">", 0).sort("train/loss").select(keys=["train/loss"])
    [{'train/loss': 1.0}, {'train/loss': 2.0}]
    """

    index: Index
    name_glob: str | None = "*"  # None: no name matches (two name filters contradict)
    nonce_glob: str | None = "*"  # None: no nonce matches
    node_filters: tuple = ()  # store.predicates' node predicates
    run_filters: tuple = ()  # store.predicates' run predicates
    sorts: tuple = ()
    by_seq: bool = False  # latest(): the default order is seq, name, nonce
    only_newest: bool = False  # newest(): only the most recently written node
    limit_n: int | None = None

    # -- identity filters ---------------------------------------------------

    def spec(self, project: str | None = None, group: str | None = None, run: str | None = None) -> Cursor:
        """Nodes whose name has these parts; omitted parts match anything."""
        parts = self.name_glob.split(".") if self.name_glob not in ("*", None) else ["*", "*", "*"]
        for i, (label, value) in enumerate((("project", project), ("group", group), ("run", run))):
            if value is None:
                continue
            normalize_name(f"a.b.{value}")  # validates the part
            if parts[i] not in ("*", value):
                return replace(self, name_glob=None)  # contradicting parts: matches nothing
            parts[i] = value
        return replace(self, name_glob=".".join(parts) if self.name_glob is not None else None)

    def name(self, name: str) -> Cursor:
        """Nodes of runs with exactly this name (a bare run name means general.default.<run>)."""
        full = normalize_name(name)
        if self.name_glob is None or (self.name_glob not in ("*", full) and not _glob_match(self.name_glob, full)):
            return replace(self, name_glob=None)
        return replace(self, name_glob=full)

    def nonce(self, nonce: str) -> Cursor:
        """Nodes of the lineage with this nonce."""
        check_nonce(nonce)
        if self.nonce_glob not in ("*", nonce):
            return replace(self, nonce_glob=None)
        return replace(self, nonce_glob=nonce)

    def seq(self, seq: int) -> Cursor:
        """Nodes at this seq."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise BadInput(f"seq must be a non-negative int, got {seq!r}")
        return replace(self, node_filters=self.node_filters + (Seq(seq),))

    def node(self, node: str | Node) -> Cursor:
        """Exactly this node (an id string or a Node)."""
        node_id = node.id if isinstance(node, Node) else node
        name, nonce, _ = decode_id(node_id)
        return replace(self.name(name).nonce(nonce), node_filters=self.node_filters + (NodeId(node_id),))

    # -- run and node predicates ------------------------------------------

    def job(self, key: str) -> Cursor:
        """Nodes of runs of this registry key."""
        if not isinstance(key, str) or not key:
            raise BadInput(f"job key must be a non-empty string, got {key!r}")
        return replace(self, run_filters=self.run_filters + (Job(key),))

    def finished(self, flag: bool = True) -> Cursor:
        """Nodes of runs that did (or, with False, did not) finish."""
        if not isinstance(flag, bool):
            raise BadInput(f"finished() takes a bool, got {flag!r}")
        return replace(self, run_filters=self.run_filters + (Finished(flag),))

    def tag(self, tag: str) -> Cursor:
        """Nodes of runs tagged ``tag`` now (``theseus tag``; the run's latest tag set).

        >>> from theseus.store import marks
        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> _ = marks.mark(store, n.nonce, tags=["baseline"])
        >>> store.find().tag("baseline").all() == [n], store.find().tag("other").all()
        (True, [])
        """
        return replace(self, run_filters=self.run_filters + (Tagged(marks.check_tag(tag)),))

    def checkpoint(self, retired: bool = False) -> Cursor:
        """Only nodes with a committed checkpoint that is not retired (``logging.keep_checkpoints``
        retires old ones: a ``_retired`` record, after which the folder is deleted); ``retired=True``
        keeps the retired ones too, for a run's history (their checkpoint files are gone).

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> with store.writer() as w:
        ...     w.checkpoint(n, f"objects/{n.id}"); w.checkpoint(n.next(), f"objects/{n.next().id}")
        ...     w.retire(n, "keep_checkpoints=1")
        >>> [node.seq for node in store.find().checkpoint().all()]
        [1]
        >>> [node.seq for node in store.find().checkpoint(retired=True).all()]
        [0, 1]
        """
        kept = () if retired else (Lacks(schema.RETIRED),)
        return replace(self, node_filters=self.node_filters + (Has(schema.CHECKPOINT), *kept))

    def has(self, key: str) -> Cursor:
        """Nodes where ``key`` is not null."""
        return replace(self, node_filters=self.node_filters + (Has(schema.check_user_key(key)),))

    def where(self, key: str, op: str, value: Any) -> Cursor:
        """Nodes whose folded ``key`` satisfies ``op value`` (op in == != < <= > >= in)."""
        schema.check_user_key(key)
        if op not in OPS:
            raise BadInput(f"unknown operator {op!r}; use one of {', '.join(OPS)}")
        if op == "in":
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise BadInput(f"where({key!r}, 'in', ...) needs a list, tuple or set, got {value!r}")
            value = tuple(value)
            for v in value:
                schema.value_type(key, v)
        else:
            schema.value_type(key, value)
        return replace(self, node_filters=self.node_filters + (Where(key, op, value),))

    # -- shaping --------------------------------------------------------------

    def sort(self, key: str, ascending: bool = True) -> Cursor:
        """Order by ``key``; the default order is name, nonce, seq.

        A sort ranks only the nodes that hold ``key`` (as ``has(key)`` would keep), so that
        ``first()``, ``last()`` and ``resume()`` after a sort are always a node with the key.

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> with store.writer() as w:
        ...     w.write(n.next(), {"other": 1.0})
        >>> store.find().nonce(n.nonce).sort("loss", ascending=False).last() == n
        True
        """
        schema.check_user_key(key)
        if not isinstance(ascending, bool):
            raise BadInput(f"sort({key!r}, ascending=...) takes a bool, got {ascending!r}")
        return replace(self, sorts=self.sorts + ((key, ascending),))

    def latest(self) -> Cursor:
        """Each matching node once, at its latest record, ordered by seq (then name, nonce): the
        moments of every matching run interleaved, step by step (a ``sort`` still comes first).

        >>> from theseus.store.store import _doc_store
        >>> from theseus.store import Node
        >>> store, a = _doc_store()
        >>> b = Node.start("doc")
        >>> with store.writer() as w:
        ...     w.write(a.next(), {"loss": 1.0}); w.write(b, {"loss": 2.0}); w.write(a, {"loss": 1.25})
        >>> [(n.nonce == a.nonce, n.seq) for n in store.find().latest().all()] in (
        ...     [(True, 0), (False, 0), (True, 1)], [(False, 0), (True, 0), (True, 1)])
        True
        >>> store.record(store.find().nonce(a.nonce).latest().first())["loss"]  # its latest record
        1.25
        """
        return replace(self, by_seq=True)

    def newest(self) -> Cursor:
        """Only the most recently written matching node (by its latest record's write stamp).

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> with store.writer() as w:
        ...     w.write(n.next(), {"loss": 1.0}); w.write(n, {"loss": 1.25})
        >>> store.find().newest().all() == [n]
        True
        """
        return replace(self, only_newest=True)

    def limit(self, n: int) -> Cursor:
        """The first ``n`` results."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise BadInput(f"limit takes a non-negative int, got {n!r}")
        return replace(self, limit_n=n)

    # -- terminals ---------------------------------------------------------------

    def all(self) -> list[Node]:
        """The matching nodes."""
        rows = self._run([], parent=True).select("name", "nonce", "seq", "parent").iter_rows()
        return [Node(name, nonce, seq, parent) for name, nonce, seq, parent in rows]

    def first(self) -> Node:
        """The first matching node; EmptyResult when none match.

        A query naming a run by its nonce alone, which several runs share (a collision,
        see ``theseus audit``), is an ``AmbiguousNonce`` naming them, as for :meth:`last`.
        """
        self._one_run()
        nodes = self.limit(1).all() if self.limit_n is None else self.all()[:1]
        if not nodes:
            raise EmptyResult(f"query matched no nodes: {self.describe()}")
        return nodes[0]

    def last(self) -> Node:
        """The last matching node; EmptyResult when none match.

        >>> import shutil, tempfile
        >>> from theseus.store.store import Store, _doc_store
        >>> store, n = _doc_store()
        >>> store.find().nonce(n.nonce).last() == n
        True
        >>> other = Store(tempfile.mkdtemp())
        >>> with other.writer() as w:  # another root's run under the same nonce, copied in: a collision
        ...     w.write(Node("other", n.nonce, 0), {"loss": 2.0})
        >>> _ = shutil.copytree(other.path("log"), store.path("log"), dirs_exist_ok=True)
        >>> store.find().nonce(n.nonce).last()
        Traceback (most recent call last):
        ...
        theseus.store.nonces.AmbiguousNonce: nonce ... names 2 runs: general.default.doc, general.default.other ...
        """
        self._one_run()
        nodes = self.all()
        if not nodes:
            raise EmptyResult(f"query matched no nodes: {self.describe()}")
        return nodes[-1]

    def select(self, keys: list[str] | None = None) -> list[dict[str, Any]]:
        """Values of ``keys`` per matching node (nodes holding none of them are skipped).

        A bare ``select()`` returns every scalar user column, never reserved fields or artifacts.
        """
        return _dicts(self.columns(keys))

    def columns(self, keys: list[str] | None = None) -> dict[str, list]:
        """:meth:`select` by column: one Python list per key, over the same nodes in the same
        order (``None`` where a node lacks the key), with no dict built per node; the way
        to read a history to plot or to sum.

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> store.find().nonce(n.nonce).columns(keys=["loss"])
        {'loss': [1.5]}
        """
        if keys is not None:
            if isinstance(keys, str):
                keys = [keys]
            keys = list(dict.fromkeys(schema.check_user_key(k) for k in keys))  # a key asked twice is one column
        result = self._run(keys, all_user_keys=keys is None, select=True)
        return result if isinstance(result, dict) else {c: result[c].to_list() for c in result.columns}

    def frame(self, keys: list[str] | None = None) -> pl.LazyFrame:
        """The result as a Polars LazyFrame: node identity plus every user key, or plus ``keys``
        only (then, as with :meth:`select`, only the nodes holding one of them).

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> store.find().nonce(n.nonce).frame(keys=["loss"]).collect()["loss"].to_list()
        [1.5]
        """
        if keys is None:
            frame = self._run(None, all_user_keys=True, parent=True)
        else:
            keys = [schema.check_user_key(k) for k in ([keys] if isinstance(keys, str) else keys)]
            frame = self._run(keys, parent=True, select=True, identity=True)
        keys = [c for c in frame.columns if c not in IDENTITY and not c.startswith("_")]
        node = node_ids(pl.col("name"), pl.col("nonce"), pl.col("seq")).alias("node")
        # lazy: node ids are only encoded when the caller's projection keeps them
        return frame.lazy().select(node, "name", "nonce", "seq", "parent", *keys)

    def to_pandas(self) -> pandas.DataFrame:
        """The result as a pandas DataFrame."""
        return self.frame().collect().to_pandas()

    def resume(self, verify: bool = True):
        """A store's cursor restores nothing: a session's cursor (``quick(root).find()``) resumes a run.

        >>> from theseus.store.store import _doc_store
        >>> store, _ = _doc_store()
        >>> store.find().resume()
        Traceback (most recent call last):
        ...
        RuntimeError: resume() needs a quick session: use quick(root).find()...resume()
        """
        raise RuntimeError("resume() needs a quick session: use quick(root).find()...resume()")

    def branch(self, verify: bool = True):
        """A store's cursor branches nothing either (see ``resume``): a session's cursor does.

        >>> from theseus.store.store import _doc_store
        >>> try:
        ...     _doc_store()[0].find().branch()
        ... except RuntimeError as e:
        ...     print(e)
        branch() needs a quick session: use quick(root).find()...branch()
        """
        raise RuntimeError("branch() needs a quick session: use quick(root).find()...branch()")

    def _one_run(self) -> None:
        """Refuse a query naming a run by its nonce alone when several runs share that nonce."""
        if self.name_glob == "*" and self.nonce_glob not in ("*", None):
            one_name(self.index, self.nonce_glob)

    def describe(self) -> str:
        """A readable summary of the query, for error messages."""
        parts = []
        if self.name_glob is None or self.nonce_glob is None:
            parts.append("contradicting name or nonce filters")
        if self.name_glob not in ("*", None):
            parts.append(f"name={self.name_glob!r}")
        if self.nonce_glob not in ("*", None):
            parts.append(f"nonce={self.nonce_glob!r}")
        parts += [str(f) for f in self.run_filters + self.node_filters]
        parts += [f"sort {k} {'asc' if a else 'desc'}" for k, a in self.sorts]
        if self.by_seq:
            parts.append("latest")
        if self.only_newest:
            parts.append("newest")
        if self.limit_n is not None:
            parts.append(f"limit {self.limit_n}")
        return ", ".join(parts) or "all nodes"

    def plan(self) -> QueryPlan:
        """The query's plan (``theseus.store.plan``): the runs it reads from the view and from the log,
        the keys it folds, its predicates, order and limit, and Polars' plan of the folded frame; print
        it (or call ``explain()``) to read it. Folds what the query would fold, returns no node.

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> plan = store.find().where("loss", "<", 2.0).sort("loss").limit(1).plan()
        >>> plan.from_log == (f"{n.name}:{n.nonce}",), plan.keys, plan.rows, plan.limit
        (True, {'loss': 'float'}, 'loss', 1)
        >>> print(plan.explain().split("polars:")[0].strip())
        runs: name '*', nonce '*': 0 from the view, 1 from the log
        fold: loss (float), nodes holding 'loss'
        filter nodes: 'where' 'loss' '<' 2.0
        sort: loss ascending, then name, nonce, seq
        limit: 1
        """
        self.index.require_root()

        def read(scope: Scope) -> QueryPlan:
            pruned = self._prune(scope)
            keys, rows = self._folded(scope, None, False, light=pruned is not None)
            frame = self._plan(scope, None, False, False, pruned=pruned)
            label = [f"{name}:{nonce}" for name, nonce in scope.runs]
            return QueryPlan(self.name_glob, self.nonce_glob,
                             tuple(r for r, run in zip(label, scope.runs) if run in scope.in_view),
                             tuple(r for r, run in zip(label, scope.runs) if run not in scope.in_view),
                             None if pruned is None else tuple(f"{name}:{nonce}" for name, nonce in pruned.runs),
                             keys, rows[0] if rows else None, self.run_filters, self.node_filters, self.sorts,
                             self._order(), self.only_newest, self.limit_n, frame.explain())

        return read_scope(self.index, self.name_glob, self.nonce_glob, read)

    # -- execution ----------------------------------------------------------------

    def _run(self, select_keys: list[str] | None, all_user_keys: bool = False, parent: bool = False,
             select: bool = False, identity: bool = False) -> pl.DataFrame | dict[str, list]:
        """Plan and collect the result; retried when a compaction retires a segment mid-read.

        With ``select``, only the value columns (``select_keys``, or every user key),
        after the node identity columns with ``identity``, and only rows holding one of them
        (as ``{column: values}`` when :meth:`_plan` answers from the folds alone).
        """
        self.index.require_root()

        def read(scope: Scope) -> pl.DataFrame | dict[str, list]:
            pruned = self._prune(scope)
            if pruned is not None:  # fold only the runs that can hold the first nodes, if that proves enough
                found = self._plan(scope, select_keys, all_user_keys, parent, select, identity, pruned).collect()
                (key, ascending), = self.sorts
                # a sort keeps only the nodes holding its key
                if found.height and topk.proves(pruned, found[_COUNT][0], found[_LAST][0], self.limit_n, ascending,
                                                True):
                    return found.drop(_COUNT, _LAST)
            plan = self._plan(scope, select_keys, all_user_keys, parent, select, identity)
            return plan.collect() if isinstance(plan, pl.LazyFrame) else plan

        return read_scope(self.index, self.name_glob, self.nonce_glob, read)

    def _prune(self, scope: Scope) -> topk.Pruned | None:
        """For a query sorted by one numeric key with a limit, over many runs read from the log
        (local roots): the runs that can hold its first nodes (``theseus.store.topk``); None
        when the query folds every run."""
        if (len(self.sorts) != 1 or not self.limit_n or self.by_seq or self.only_newest
                or not rootfs.is_local(self.index.fs)):
            return None
        logged = [scope.runs[run] for run in scope.runs if run not in scope.in_view]
        if len(logged) < topk.MIN_RUNS:
            return None
        (key, ascending), = self.sorts
        wheres = [f for f in self.node_filters if isinstance(f, Where) and f.key == key]

        def condition(value: pl.Expr) -> pl.Expr:
            return pl.all_horizontal([compare(value, f.op, f.value) for f in wheres])

        scan = topk.start([p for paths in logged for p in paths], key, ascending, topk.rows_for(self.limit_n),
                          condition if wheres else None)
        kind = scope.types(light=True).get(key)  # the keys footers, read while the scan runs
        try:
            pruned = scan.result()
        except Exception as e:
            if vanished(e):  # retired by a compaction meanwhile: listed again
                raise
            return None  # a damaged segment: the fold names it
        if kind not in ("int", "float"):
            return None
        for f in wheres:
            _check_where_type(key, kind, f.op, f.value)
        return pruned

    def _plan(self, scope: Scope, select_keys: list[str] | None, all_user_keys: bool, parent: bool,
              select: bool = False, identity: bool = False,
              pruned: topk.Pruned | None = None) -> pl.LazyFrame | dict[str, list]:
        """The query as a Polars plan over the scope's nodes; or, for a plain ``select(keys)``
        (no filter, sort, limit or latest) of runs all read from the log, the folded values
        themselves (``{key: values}``): the plan would only project them.

        ``pruned``: of the runs read from the log, fold only ``pruned.runs`` (a pruned top-k); the
        plan then adds the count of its limited rows and the sort key's last value as columns
        (``_COUNT``, ``_LAST``), the proof :func:`theseus.store.topk.proves` checks."""
        only = pruned.runs if pruned is not None else None
        fold_keys, rows = self._folded(scope, select_keys, all_user_keys, light=only is not None)
        select_only = not (self.node_filters or self.run_filters or self.sorts or self.by_seq or self.only_newest
                           or self.limit_n is not None)
        if select and select_keys and not identity and select_only:
            folded = scope.log_values(fold_keys, select_keys)
            if folded is not None:
                return folded
        run_filter = self._run_filter() if self.run_filters else None
        nodes, ordered = scope.nodes(fold_keys, rows, parent=parent, written=self.only_newest, run_filter=run_filter,
                                     run_keys=RUN_KEYS if run_filter else (), only=only)
        for f in self.node_filters:
            nodes = nodes.filter(f.expr())
        for key, _ in self.sorts:
            nodes = nodes.filter(pl.col(key).is_not_null())
        if self.only_newest:
            nodes = nodes.sort([WRITTEN, "name", "nonce", "seq"], descending=[True, False, False, False]).head(1)
        by, descending = [k for k, _ in self.sorts], [not a for _, a in self.sorts]
        if self.by_seq or not ordered:
            order = list(self._order())
            nodes = nodes.sort([*by, *order], descending=[*descending, False, False, False], nulls_last=True)
        elif by:  # a stable sort keeps ties in the default order (and lets Polars take a top-k)
            nodes = nodes.sort(by, descending=descending, nulls_last=True, maintain_order=True)
        if self.limit_n is not None:
            nodes = nodes.head(self.limit_n)
        proof = []
        if only is not None:
            nodes = nodes.with_columns(pl.len().alias(_COUNT), pl.col(by[0]).last().alias(_LAST))
            proof = [_COUNT, _LAST]
        if select:
            columns = select_keys if select_keys is not None else [k for k in fold_keys if not k.startswith("_")]
            nodes = nodes.select([*(IDENTITY[1:] if identity else ()), *columns, *proof])
            if rows != columns and columns:
                nodes = nodes.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in columns))
        return nodes

    def _run_filter(self):
        """A predicate on a run's latest ``_job`` / ``_finished`` / ``_tags`` records (by write stamp)."""
        return lambda latest: all(f.keep(latest) for f in self.run_filters)

    def _folded(self, scope: Scope, select_keys: list[str] | None, all_user_keys: bool,
                light: bool = False) -> tuple[dict[str, str], list[str] | None]:
        """``(keys, rows)``: the keys the query folds with their read types (a key no run logged, or a
        ``where`` value of the wrong type, is an error naming it), and the keys a node must hold one of
        to be folded at all (None: every node)."""
        types = scope.types(light=light)
        used = [f.key for f in self.node_filters if f.key is not None] + [k for k, _ in self.sorts]
        used += select_keys or []
        if scope.runs:
            for key in used:
                if key not in types and not key.startswith("_"):
                    _unknown_key(key, types)
            for f in self.node_filters:
                if isinstance(f, Where):
                    _check_where_type(f.key, types[f.key], f.op, f.value)
        fold_keys = {k: types.get(k, "str") for k in dict.fromkeys(used)}
        if all_user_keys:
            fold_keys.update({k: t for k, t in types.items() if not k.startswith("_")})
        # a sort ranks only the nodes holding its key
        rejecting = [f.key for f in self.node_filters if f.requires] + [k for k, _ in self.sorts]
        if rejecting:
            return fold_keys, [rejecting[0]]  # a wanted node must hold this key: fold only those
        if select_keys and self.limit_n is None and not self.only_newest:
            return fold_keys, list(select_keys)  # select() drops nodes holding none of its keys
        return fold_keys, None

    def _order(self) -> tuple[str, ...]:
        """The order after the sorts: seq first after ``latest()``, else name, nonce, seq."""
        return ("seq", "name", "nonce") if self.by_seq else ("name", "nonce", "seq")


def _dicts(columns: dict[str, list]) -> list[dict[str, Any]]:
    """Rows as dicts, from one list per column (faster than ``DataFrame.to_dicts`` for few columns)."""
    names, lists = list(columns), list(columns.values())
    if not names:
        return []
    if len(names) == 1:
        (a,) = names
        return [{a: x} for x in lists[0]]
    if len(names) == 2:
        a, b = names
        return [{a: x, b: y} for x, y in zip(*lists)]
    return [dict(zip(names, row)) for row in zip(*lists)]


def _check_where_type(key: str, kind: str, op: str, value: Any) -> None:
    values = value if op == "in" else (value,)
    for v in values:
        got = schema.value_type(key, v)
        numeric = {"int", "float"}
        if kind in numeric and got in numeric:
            if isinstance(v, float) and math.isnan(v):
                raise BadInput(f"where({key!r}, {op!r}, nan): NaN never compares; use has() or a finite bound")
            continue
        if got != kind:
            raise BadInput(f"where({key!r}, {op!r}, {v!r}): {key!r} holds {kind} values, got {got}")
        if kind == "bool" and op in ("<", "<=", ">", ">="):
            raise BadInput(f"where({key!r}, {op!r}, ...): {key!r} is bool; use == or !=")


def _unknown_key(key: str, types: dict[str, str]) -> None:
    user = sorted(k for k in types if not k.startswith("_"))
    close = difflib.get_close_matches(key, user, n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    shown = ", ".join(user[:20]) + (" ..." if len(user) > 20 else "")
    raise UnknownKey(f"no run in this query has logged key {key!r}{hint} (known keys: {shown or 'none'})")


def _glob_match(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern)
