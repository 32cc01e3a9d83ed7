"""A query's filters as small typed objects: on a node's folded values, or on a run's latest records.

A node predicate (:class:`Seq`, :class:`NodeId`, :class:`Has`, :class:`Lacks`, :class:`Where`) names
the key it reads (``key``; None for identity filters), whether a matching node must hold that key
(``requires``: a fold may then read only the nodes holding it), and its Polars expression on the
folded frame. A run predicate (:class:`Job`, :class:`Finished`, :class:`Tagged`) keeps or drops a
whole run from its latest ``_job``, ``_finished`` and ``_tags`` records. Each prints as its
filter word and arguments, which is how plans and error messages show it.

>>> str(Where("train/loss", "<", 1.0)), Where("train/loss", "<", 1.0).requires, Lacks("_retired").requires
("'where' 'train/loss' '<' 1.0", True, False)
>>> Finished(True).keep({"_finished": (True, 5, "w")}), Job("gpt/train/pretrain").keep({})
(True, False)
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, ClassVar

import polars as pl

from theseus.store import marks, schema
from theseus.store.node import decode_id


class _Printed:
    """Printed as the query said it: the filter's word, then each field's repr."""

    word: ClassVar[str]

    def __str__(self) -> str:
        return " ".join(map(repr, (self.word, *astuple(self))))


@dataclass(frozen=True)
class Seq(_Printed):
    """Nodes at this seq.

    >>> pl.DataFrame({"seq": [0, 1]}).filter(Seq(1).expr())["seq"].to_list()
    [1]
    """

    seq: int
    word: ClassVar[str] = "seq"
    key: ClassVar[None] = None
    requires: ClassVar[bool] = False

    def expr(self) -> pl.Expr:
        """True at the nodes this predicate keeps."""
        return pl.col("seq") == self.seq


@dataclass(frozen=True)
class NodeId(_Printed):
    """Exactly the node with this id (its name and nonce are the cursor's filters; this is its seq).

    >>> pl.DataFrame({"seq": [0, 1]}).filter(NodeId("Z2VuZXJhbC5kZWZhdWx0LnJ1bjo5NDllODg6MQ").expr())["seq"].to_list()
    [1]
    """

    node: str
    word: ClassVar[str] = "node"
    key: ClassVar[None] = None
    requires: ClassVar[bool] = False

    def expr(self) -> pl.Expr:
        """True at the nodes this predicate keeps."""
        return pl.col("seq") == decode_id(self.node)[2]


@dataclass(frozen=True)
class Has(_Printed):
    """Nodes where ``key`` is not null.

    >>> pl.DataFrame({"a": [1.0, None]}).filter(Has("a").expr()).height
    1
    """

    key: str
    word: ClassVar[str] = "has"
    requires: ClassVar[bool] = True

    def expr(self) -> pl.Expr:
        """True at the nodes this predicate keeps."""
        return pl.col(self.key).is_not_null()


@dataclass(frozen=True)
class Lacks(_Printed):
    """Nodes where ``key`` is null (a checkpoint that is not retired).

    >>> pl.DataFrame({"a": [1.0, None]}).filter(Lacks("a").expr()).height
    1
    """

    key: str
    word: ClassVar[str] = "lacks"
    requires: ClassVar[bool] = False

    def expr(self) -> pl.Expr:
        """True at the nodes this predicate keeps."""
        return pl.col(self.key).is_null()


@dataclass(frozen=True)
class Where(_Printed):
    """Nodes whose folded ``key`` satisfies ``op value`` (``in``: ``value`` is a tuple).

    >>> pl.DataFrame({"a": [1, 2, 3]}).filter(Where("a", "in", (1, 3)).expr())["a"].to_list()
    [1, 3]
    """

    key: str
    op: str
    value: Any
    word: ClassVar[str] = "where"
    requires: ClassVar[bool] = True

    def expr(self) -> pl.Expr:
        """True at the nodes this predicate keeps."""
        return compare(pl.col(self.key), self.op, self.value)


@dataclass(frozen=True)
class Job(_Printed):
    """Runs whose latest ``_job`` record is this registry key.

    >>> Job("a/b").keep({"_job": ("a/b", 1, "w")})
    True
    """

    key: str
    word: ClassVar[str] = "job"

    def keep(self, latest: dict) -> bool:
        """Whether a run with these latest ``{key: (value, stamp, writer)}`` records matches."""
        return latest.get(schema.JOB, (None,))[0] == self.key


@dataclass(frozen=True)
class Finished(_Printed):
    """Runs that did (or, with False, did not) finish.

    >>> Finished(False).keep({})
    True
    """

    flag: bool
    word: ClassVar[str] = "finished"

    def keep(self, latest: dict) -> bool:
        """Whether a run with these latest ``{key: (value, stamp, writer)}`` records matches."""
        return (latest.get(schema.FINISHED, (None,))[0] is True) == self.flag


@dataclass(frozen=True)
class Tagged(_Printed):
    """Runs whose latest tag set holds ``tag``.

    >>> Tagged("best").keep({})
    False
    """

    tag: str
    word: ClassVar[str] = "tag"

    def keep(self, latest: dict) -> bool:
        """Whether a run with these latest ``{key: (value, stamp, writer)}`` records matches."""
        return self.tag in marks.tags_of(latest.get(schema.TAGS, (None,))[0])


NodePredicate = Seq | NodeId | Has | Lacks | Where
RunPredicate = Job | Finished | Tagged


def compare(col: pl.Expr, op: str, value: Any) -> pl.Expr:
    """``col op value`` as a Polars expression (``in``: membership in ``value``).

    >>> pl.DataFrame({"a": [1, 2]}).filter(compare(pl.col("a"), ">=", 2))["a"].to_list()
    [2]
    """
    if op == "in":
        return col.is_in(list(value))
    return {"==": col.__eq__, "!=": col.__ne__, "<": col.__lt__, "<=": col.__le__, ">": col.__gt__,
            ">=": col.__ge__}[op](value)

