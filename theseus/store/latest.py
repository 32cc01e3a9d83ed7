"""The latest record of each key in a segment, as its block index records it.

A segment's ``theseus.index`` may hold ``"latest": {key: [stamp, writer, seq, column, value]}``:
for each key, its most recent record in the segment (highest write stamp, then writer), the
value column it fills (one of ``schema.TYPES``; null when it fills none) and the value as
stored there. A non-finite float is written as the string ``"nan"``, ``"inf"`` or ``"-inf"``
(the entry stays strict JSON); a string longer than ``TEXT_LIMIT`` characters has no entry.
A run's summary (``theseus.store.summary``) takes its latest values from these entries
instead of reading blocks. The entry is optional: segments written before it, or by another
tool, have none, and readers then read the key's block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pyarrow as pa

from theseus.errors import BadInput
from theseus.store.recency import latest_index
from theseus.store.schema import TYPES

TEXT_LIMIT = 256  # longer strings (configs, tracebacks) stay in the rows only: footers stay small
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_PYTHON = {"float": float, "int": int, "bool": bool, "str": str}


class Latest(NamedTuple):
    """One key's most recent record in a segment: write stamp, writer, seq and value as stored."""

    stamp: int
    writer: str
    seq: int
    value: bool | int | float | str | None


def entry(stamp: int, writer: str, seq: int, column: str | None, value) -> list | None:
    """The footer entry of one key's latest record (None when it is a string too long to keep).

    >>> entry(7, "w1", 3, "float", float("nan")), entry(7, "w1", 3, "int", 5)
    ([7, 'w1', 3, 'float', 'nan'], [7, 'w1', 3, 'int', 5])
    >>> entry(7, "w1", 3, "str", "x" * 1000) is None
    True
    """
    if column == "float" and not math.isfinite(value):
        value = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    elif column == "str" and len(value) > TEXT_LIMIT:
        return None
    return [int(stamp), writer, int(seq), column, value]


def parse(raw: object, blocks: dict, stamps: tuple[int, int] | None) -> dict[str, Latest]:
    """The ``latest`` entries of a block index, checked against its ``blocks`` (``{key: Block}``) and
    ``stamps``: each names a key with a block, a stamp within the segment's, a seq within the
    block's, a column the block uses and a value of that column's type (or no column and no
    value: a row that fills none); anything else is a ValueError (the caller names the segment).

    >>> from theseus.store.segments import Block
    >>> blocks = {"a": Block(0, 2, 0, 1, 2, ("float",))}
    >>> parse({"a": [6, "w", 1, "float", "inf"]}, blocks, (5, 6))
    {'a': Latest(stamp=6, writer='w', seq=1, value=inf)}
    >>> parse({"a": [6, "w", 1, "int", 2]}, blocks, (5, 6))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: key 'a': latest record [6, 'w', 1, 'int', 2] is not [stamp, writer, seq, column, value] of its block
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if type(raw) is not dict:
        raise BadInput(f"latest {str(raw)[:80]} is not {{key: [stamp, writer, seq, column, value]}}")
    found = {}
    for key, e in raw.items():
        block = blocks.get(key)
        value = _value(e[3], e[4]) if type(e) is list and len(e) == 5 else _BAD
        if (value is _BAD or block is None or stamps is None or type(e[0]) is not int or type(e[1]) is not str
                or type(e[2]) is not int or not stamps[0] <= e[0] <= stamps[1]
                or not block.seq_min <= e[2] <= block.seq_max
                or (e[3] is not None and e[3] not in block.columns)):
            raise BadInput(f"key {key!r}: latest record {str(e)[:80]} "
                             "is not [stamp, writer, seq, column, value] of its block")
        found[key] = Latest(e[0], e[1], e[2], value)
    return found


_BAD = object()


def same(a: Latest, b: Latest) -> bool:
    """Whether two latest records are the same: equal fields, values of the same type (NaN equals NaN).

    >>> nan = float("nan")
    >>> same(Latest(1, "w", 0, nan), Latest(1, "w", 0, nan)), same(Latest(1, "w", 0, 1), Latest(1, "w", 0, 1.0))
    (True, False)
    """
    return a[:3] == b[:3] and type(a.value) is type(b.value) and same_value(a.value, b.value)


def same_value(a: object, b: object) -> bool:
    """``a == b``, a NaN equal to a NaN (``==`` tells two NaN objects apart).

    >>> same_value(float("nan"), float("nan")), same_value(1, 1.0), same_value(1.5, None)
    (True, True, False)
    """
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _value(column: object, value: object):
    """A stored value from its entry (_BAD when it does not have its column's type)."""
    if column is None:
        return None if value is None else _BAD
    kind = _PYTHON.get(column) if type(column) is str else None
    if kind is float and type(value) is str:
        return _NON_FINITE.get(value, _BAD)
    if kind is float and type(value) is int:  # a float JSON wrote without its point (1e16 reads back as int)
        return float(value)
    return value if kind is not None and type(value) is kind else _BAD


def of_table(table: pa.Table, blocks: dict[str, list]) -> dict[str, list]:
    """The ``latest`` entries of a table in block order (``blocks``: ``{key: [start, stop, ...,
    [columns]]}`` as ``segments.index_of`` makes them), from its rows: for audits and for
    writers that hold whole tables.

    >>> t = pa.table({"seq": [0, 1], "stamp": [9, 5], "writer": ["w", "w"], "float": [1.5, 2.5],
    ...               "int": pa.nulls(2, pa.int64()), "bool": pa.nulls(2, pa.bool_()), "str": pa.nulls(2, pa.string())})
    >>> of_table(t, {"a": [0, 2, 0, 1, 2, ["float"]]})
    {'a': [9, 'w', 0, 'float', 1.5]}
    """
    found = {}
    for key, (start, stop, *_, columns) in blocks.items():
        rows = table.slice(start, stop - start)
        stamp = rows["stamp"].to_numpy()
        i = latest_index(stamp, rows["writer"])
        column = next((c for c in TYPES if c in columns and rows[c][i].is_valid), None)
        made = entry(int(stamp[i]), rows["writer"][i].as_py(), rows["seq"][i].as_py(), column,
                     None if column is None else rows[column][i].as_py())
        if made is not None:
            found[key] = made
    return found
