"""A query's plan (``Cursor.plan()``): which runs it reads and from where, which keys it folds, then
its filters, order and limit, printable as Polars' ``explain()`` prints a lazy frame's.

>>> from theseus.store.predicates import Has
>>> plan = QueryPlan("*", "*", ("a.b.c:949e88",), (), None, {"loss": "float"}, "loss", (), (Has("loss"),),
...                  (("loss", True),), ("name", "nonce", "seq"), False, 10, "")
>>> print(plan.explain())
runs: name '*', nonce '*': 1 from the view, 0 from the log
fold: loss (float), nodes holding 'loss'
filter nodes: 'has' 'loss'
sort: loss ascending, then name, nonce, seq
limit: 10
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.store.predicates import NodePredicate, RunPredicate


@dataclass(frozen=True)
class QueryPlan:
    """What a query does, in order: the runs matching its name and nonce (each ``name:nonce``, read
    from the view or folded from the log; ``pruned``: the log runs a top-k query folds first, its
    answer checked to be the whole one), the keys folded with their read types and the key a node
    must hold to be folded at all (``rows``; None: every node), the run and node predicates, the
    sorts then the default ``order``, ``newest`` (only the most recently written node), ``limit``,
    and Polars' own plan of the folded frame (``polars``).

    >>> QueryPlan("*", None, (), (), None, {}, None, (), (), (), ("name", "nonce", "seq"), False, None, "").runs
    ()
    """

    name: str | None  # the name glob; None: contradicting filters, no run matches
    nonce: str | None
    from_view: tuple[str, ...]
    from_log: tuple[str, ...]
    pruned: tuple[str, ...] | None
    keys: dict[str, str]
    rows: str | None
    run_filters: tuple[RunPredicate, ...]
    node_filters: tuple[NodePredicate, ...]
    sorts: tuple[tuple[str, bool], ...]
    order: tuple[str, ...]
    newest: bool
    limit: int | None
    polars: str

    @property
    def runs(self) -> tuple[str, ...]:
        """Every run the query reads (``name:nonce``), from the view first.

        >>> QueryPlan("*", "*", ("a:1",), ("b:2",), None, {}, None, (), (), (), (), False, None, "").runs
        ('a:1', 'b:2')
        """
        return self.from_view + self.from_log

    def explain(self) -> str:
        """The plan as text, one step a line (and Polars' plan of the folded frame after them).

        >>> QueryPlan(None, "*", (), (), None, {}, None, (), (), (), (), True, None, "").explain().splitlines()[-1]
        'newest: the most recently written node only'
        """
        lines = [f"runs: name {self.name!r}, nonce {self.nonce!r}: {len(self.from_view)} from the view, "
                 f"{len(self.from_log)} from the log"]
        if self.pruned is not None:
            lines.append(f"top-k: folds {len(self.pruned)} of the {len(self.from_log)} runs from the log first")
        folded = ", ".join(f"{k} ({t})" for k, t in self.keys.items()) or "no key"
        lines.append(f"fold: {folded}, " + (f"nodes holding {self.rows!r}" if self.rows else "every node"))
        if self.run_filters:
            lines.append("filter runs: " + "; ".join(map(str, self.run_filters)))
        if self.node_filters:
            lines.append("filter nodes: " + "; ".join(map(str, self.node_filters)))
        if self.newest:
            lines.append("newest: the most recently written node only")
        if self.sorts or self.order:
            sorts = [f"{k} {'ascending' if a else 'descending'}" for k, a in self.sorts]
            lines.append("sort: " + ", then ".join([*sorts, ", ".join(self.order)] if self.order else sorts))
        if self.limit is not None:
            lines.append(f"limit: {self.limit}")
        if self.polars:
            lines += ["polars:", *("  " + line for line in self.polars.splitlines())]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()
