"""The fold: one row per node of a run, vectorized over its segments' key blocks.

A node is the fold of its records: per key, the value of the record with the
highest (stamp, writer). Every segment keeps a key's rows together, ordered by
(seq, stamp, writer) (``segments.Block``), so within a block the latest value of
a seq is its last row. Blocks of different segments only need a merge by stamp
where their seq ranges overlap (a record rewritten later by another flush or
writer); otherwise they are concatenated in seq order, and the footers' distinct
counts tell whether any seq repeats at all. No step groups or joins whole
segments.
"""

from __future__ import annotations

from typing import NamedTuple

import fsspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from theseus.store import fs as rootfs
from theseus.store.segments import (
    SMALL_SEGMENT_ROWS,
    Block,
    CorruptSegment,
    Footer,
    index_of,
    read_columns,
    sort_records,
)

DTYPES = {"float": pl.Float64, "int": pl.Int64, "bool": pl.Boolean, "str": pl.String}
ARROW = {"float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(), "str": pa.string()}
WRITTEN = "_written"


def node_ids(name: pl.Expr, nonce: pl.Expr, seq: pl.Expr) -> pl.Expr:
    """Node ids (URL-safe base64 of ``name:nonce:seq``, unpadded) as a Polars expression.

    >>> pl.select(node_ids(pl.lit("general.default.train-gpt"), pl.lit("949e88"), pl.lit(0))).item()
    'Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA'
    """
    raw = pl.concat_str([name, pl.lit(":"), nonce, pl.lit(":"), seq.cast(pl.String)])
    encoded = raw.str.encode("base64").str.replace_all("+", "-", literal=True).str.replace_all("/", "_", literal=True)
    return encoded.str.strip_chars_end("=")


class RunFold(NamedTuple):
    """A folded run: ``frame`` has ``seq`` (sorted), optionally ``parent`` and ``_written``,
    then one column per asked key; ``latest`` maps a key to ``(value, stamp, writer)`` of
    its most recent record in the whole run."""

    frame: pl.DataFrame
    latest: dict[str, tuple]


def fold_run(
    fs: fsspec.AbstractFileSystem,
    segments: list[tuple[str, Footer]],
    keys: dict[str, str],
    rows: list[str] | None = None,
    parent: bool = False,
    written: bool = False,
    latest: tuple[str, ...] = (),
) -> RunFold:
    """Fold one run's ``segments`` (``(path, footer)`` pairs) into one row per node.

    ``keys`` maps each wanted key to its read type (int folds into float,
    anything into str). The nodes are those holding any of ``rows`` (or every
    node of the run when None); ``parent`` and ``written`` add the node's parent
    id and last write stamp; ``latest`` names keys whose run-wide latest record
    is returned too (``finished``, ``job``).

    >>> import tempfile
    >>> from theseus.store import Store, Node
    >>> from theseus.store.segments import list_segments, read_footer
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     w.write(n, {"a": 1.0}); w.write(n.next(), {"a": 2, "b": "x"})
    >>> with store.writer() as w:
    ...     w.write(n, {"a": 5.0})
    >>> paths = list_segments(store.fs, store.path())
    >>> run = fold_run(store.fs, [(p, read_footer(store.fs, p)) for p in paths], {"a": "float", "b": "str"})
    >>> run.frame.rows()
    [(0, 5.0, None), (1, 2.0, 'x')]
    """
    data, blocks_of, seqs, values = _fold_segments(fs, segments, keys, rows, parent, written, latest)
    columns = [pl.Series("seq", seqs)]
    if parent:
        columns.append(_per_node(data, seqs, "parent"))
    if written:
        columns.append(_per_node(data, seqs, "stamp").alias(WRITTEN))
    for key, kind in keys.items():
        columns.append(pl.Series(key, values[key], dtype=DTYPES[kind]))
    return RunFold(pl.DataFrame(columns), {k: _latest(blocks_of[k]) for k in latest if blocks_of[k]})


def fold_values(fs: fsspec.AbstractFileSystem, segments: list[tuple[str, Footer]], keys: dict[str, str],
                rows: list[str]) -> dict[str, pa.Array]:
    """:func:`fold_run`'s key columns alone, as Arrow arrays: the values of ``keys`` (read
    types) for the nodes holding one of ``rows``, in seq order, null where a node lacks one.

    >>> import tempfile
    >>> from theseus.store import Store, Node
    >>> from theseus.store.segments import list_segments, read_footer
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     w.write(n, {"a": 1.0}); w.write(n.next(), {"b": "x"}); w.write(n.next().next(), {"a": 3})
    >>> paths = list_segments(store.fs, store.path())
    >>> values = fold_values(store.fs, [(p, read_footer(store.fs, p)) for p in paths], {"a": "float"}, ["a"])
    >>> values["a"].to_pylist()
    [1.0, 3.0]
    """
    return _fold_segments(fs, segments, keys, rows, False, False, ())[3]


def python_values(values: pa.Array) -> list:
    """An Arrow array's values as a Python list (None for nulls); numbers without nulls go
    through numpy, faster than Arrow's own ``to_pylist``.

    >>> python_values(pa.array([1.5, 2.0])), python_values(pa.array([1, None])), python_values(pa.array(["a"]))
    ([1.5, 2.0], [1, None], ['a'])
    """
    if values.null_count == 0 and (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)
                                   or pa.types.is_boolean(values.type)):
        return values.to_numpy(zero_copy_only=False).tolist()
    return values.to_pylist()


def _fold_segments(fs, segments, keys, rows, parent, written,
                   latest) -> tuple[list[_Segment], dict, np.ndarray, dict[str, pa.Array]]:
    """Read what a fold needs from ``segments`` and fold each key: ``(segments read, blocks
    by key, seqs of the nodes, {key: its values at those seqs})``."""
    data = [_Segment(fs, path, footer) for path, footer in segments]
    blocks_of = {k: _blocks(data, k) for k in dict.fromkeys([*keys, *latest, *(rows or [])])}
    overlap = {k: _overlapping(b) for k, b in blocks_of.items()}
    for key, found in blocks_of.items():
        for seg, block in found:
            stamps = ("stamp", "writer") if overlap[key] or key in latest else ()
            seq = () if _seq_implied(block) and seg.footer.rows >= SMALL_SEGMENT_ROWS else ("seq",)
            seg.need(block, (*seq, *block.columns, *stamps))
    for seg in data:
        if rows is None and not all(b.dense for b in seg.footer.blocks.values()):
            seg.need(None, ("seq",))
        if parent:
            seg.need(None, ("seq", "parent"))
        if written:
            seg.need(None, ("seq", "stamp"))
    for seg in data:
        seg.load()

    folded = {}
    for key in dict.fromkeys([*keys, *(rows or [])]):
        folded[key] = _fold_key(blocks_of[key], keys.get(key, "str"), overlap[key])
    seqs = _all_seqs(data) if rows is None else _union([folded[k][0] for k in rows])
    return data, blocks_of, seqs, {key: _align(*folded[key], seqs, kind) for key, kind in keys.items()}


def with_identity(frame: pl.DataFrame, name: str, nonce: str) -> pl.DataFrame:
    """A run's folded frame with its ``name`` and ``nonce`` as the first columns.

    >>> with_identity(pl.DataFrame({"seq": [0, 1]}), "a.b.c", "949e88").rows()
    [('a.b.c', '949e88', 0), ('a.b.c', '949e88', 1)]
    """
    n = frame.height
    return pl.DataFrame([
        pl.Series("name", [name], pl.String).new_from_index(0, n),
        pl.Series("nonce", [nonce], pl.String).new_from_index(0, n),
        *frame.get_columns(),
    ])


class _Segment:
    """One segment's footer and the row groups and columns a fold reads from it."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, footer: Footer):
        self.fs, self.path, self.footer = fs, path, footer
        self.table: pa.Table | None = None
        self.columns: set[str] = set()
        self.groups: set[int] = set()
        if footer.blocks is None:  # no block index (the index is optional in the format): sort in memory
            self.table = sort_records(read_columns(fs, path, footer, None))
            found, index = index_of(self.table)
            blocks = {k: Block(*b[:5], tuple(b[5])) for k, b in index["blocks"].items()}
            self.footer = Footer(found, blocks, tuple(index["stamps"] or (0, 0)), self.table.num_rows, footer.meta)
            self.starts = np.array([0, self.table.num_rows])
        else:
            sizes = ([footer.meta.row_group(i).num_rows for i in range(footer.meta.num_row_groups)]
                     if footer.meta else [footer.rows])
            self.starts = np.concatenate([[0], np.cumsum(sizes)])

    def need(self, block: Block | None, columns: tuple[str, ...]) -> None:
        """Ask for ``columns`` of the row groups holding ``block`` (None: the whole segment)."""
        self.columns.update(columns)
        n = len(self.starts) - 1
        if block is None:
            self.groups.update(range(n))
        else:
            first = int(np.searchsorted(self.starts, block.start, side="right")) - 1
            last = int(np.searchsorted(self.starts, block.stop - 1, side="right")) - 1
            self.groups.update(range(first, last + 1))

    def load(self) -> None:
        """Read what was asked, in one call."""
        if self.table is not None or not self.groups:
            self.base = {0: 0}
            return
        groups = sorted(self.groups)
        self.table = read_columns(self.fs, self.path, self.footer, sorted(self.columns), groups)
        sizes = np.diff(self.starts)[groups]
        self.base = dict(zip(groups, (np.cumsum(sizes) - sizes).tolist()))

    def rows(self, start: int, stop: int) -> tuple[int, int]:
        """Where segment rows ``start:stop`` are in the loaded table."""
        group = int(np.searchsorted(self.starts, start, side="right")) - 1
        offset = self.base[group] + start - int(self.starts[group])
        return offset, offset + stop - start

    def column(self, name: str, block: Block | None = None) -> pa.Array:
        """A loaded column, whole or the rows of one block."""
        col = self.table.column(name)
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        if block is None:
            return col
        lo, hi = self.rows(block.start, block.stop)
        return col.slice(lo, hi - lo)


def _blocks(segments: list[_Segment], key: str) -> list[tuple[_Segment, Block]]:
    found = [(s, s.footer.blocks[key]) for s in segments if key in s.footer.blocks]
    return sorted(found, key=lambda x: (x[1].seq_min, x[1].seq_max))


def _overlapping(blocks: list[tuple[_Segment, Block]]) -> bool:
    top = -1
    for _, b in blocks:
        if b.seq_min <= top:
            return True
        top = b.seq_max
    return False


def _values(seg: _Segment, block: Block, kind: str) -> pa.Array:
    """A block's values as read type ``kind`` (int folds into float, anything into str)."""
    if block.columns == (kind,):
        return seg.column(kind, block)
    parts = [seg.column(c, block) for c in block.columns]
    # Polars' casts, as the view uses (a float 2.0 reads "2.0" as str either way)
    parts = [p if p.type == ARROW[kind] else pl.Series(p).cast(DTYPES[kind]).to_arrow().cast(ARROW[kind])
             for p in parts]
    if not parts:
        return pa.nulls(block.stop - block.start, ARROW[kind])
    return parts[0] if len(parts) == 1 else pc.coalesce(*parts)


def _fold_key(blocks: list[tuple[_Segment, Block]], kind: str, overlap: bool) -> tuple[np.ndarray, pa.Array]:
    """``(seqs, values)`` of one key: the latest value of each seq, seqs ascending."""
    if not blocks:
        return np.empty(0, np.int64), pa.nulls(0, ARROW[kind])
    seqs = [_block_seqs(s, b) for s, b in blocks]
    values = [_values(s, b, kind) for s, b in blocks]
    seq = seqs[0] if len(seqs) == 1 else np.concatenate(seqs)
    value = values[0] if len(values) == 1 else pa.concat_arrays(values)
    if overlap:
        merged = pa.table({
            "seq": seq,
            "stamp": pa.concat_arrays([s.column("stamp", b) for s, b in blocks]),
            "writer": pa.concat_arrays([s.column("writer", b) for s, b in blocks]),
        })
        order = pc.sort_indices(merged, [("seq", "ascending"), ("stamp", "ascending"), ("writer", "ascending")])
        seq, value = seq[order.to_numpy()], value.take(order)
    elif sum(b.distinct for _, b in blocks) == len(seq):
        return seq, value
    keep = np.ones(len(seq), bool)
    keep[:-1] = seq[1:] != seq[:-1]  # the last row of each seq is its latest record
    return seq[keep], value.filter(pa.array(keep))


def _seq_implied(block: Block) -> bool:
    """True when the footer alone gives a block's seqs: each seq of its range exactly once.

    >>> _seq_implied(Block(0, 3, 5, 7, 3, ("float",))), _seq_implied(Block(0, 4, 5, 7, 3, ("float",)))
    (True, False)
    """
    return block.dense and block.stop - block.start == block.distinct


def _block_seqs(seg: _Segment, block: Block) -> np.ndarray:
    """A block's seqs (rows are in seq order): the seq column, or the footer's range where
    that implies them and the column was not read (a large segment's seq column is
    compressed: decoding it costs more than the values; a small one is read as a check)."""
    if "seq" not in seg.columns and _seq_implied(block):
        return np.arange(block.seq_min, block.seq_max + 1, dtype=np.int64)
    seqs = seg.column("seq", block).to_numpy()
    # the rows read must be those the footer describes: a forged index is refused, never served
    if (seqs[0] != block.seq_min or seqs[-1] != block.seq_max or bool((seqs[1:] < seqs[:-1]).any())
            or np.count_nonzero(seqs[1:] != seqs[:-1]) + 1 != block.distinct):
        raise CorruptSegment(f"segment {rootfs.url(seg.fs, seg.path)} has a bad theseus footer: its index says seqs "
                             f"{block.seq_min}..{block.seq_max} ({block.distinct} distinct) for rows "
                             f"{block.start}:{block.stop}, which hold seqs {seqs[0]}..{seqs[-1]}")
    return seqs


def _union(arrays: list[np.ndarray]) -> np.ndarray:
    out = arrays[0]
    for a in arrays[1:]:
        if not np.array_equal(out, a):
            out = np.union1d(out, a)
    return out


def _all_seqs(segments: list[_Segment]) -> np.ndarray:
    """Every seq with a record in the run, from dense blocks' ranges where the footer allows."""
    ranges: set[tuple[int, int]] = set()
    parts = []
    for seg in segments:
        for b in seg.footer.blocks.values():
            if b.dense:
                ranges.add((b.seq_min, b.seq_max))
            else:
                parts.append(seg.column("seq", b).to_numpy())
    if len(ranges) == 1 and not parts:
        lo, hi = next(iter(ranges))
        return np.arange(lo, hi + 1, dtype=np.int64)
    parts += [np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in ranges]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def _per_node(segments: list[_Segment], seqs: np.ndarray, column: str) -> pl.Series:
    """Per node (in ``seqs`` order): its first non-null parent, or its highest write stamp.

    Reduced a slice of rows at a time (a run's records are several per node: one per key),
    so only one slice and the per-node result are ever converted at once."""
    def reduce(frame: pl.DataFrame) -> pl.DataFrame:
        if column == "parent":
            return frame.drop_nulls(column).unique("seq", keep="first", maintain_order=True)
        return frame.group_by("seq", maintain_order=True).agg(pl.col(column).max())

    per = None
    for s in segments:
        if s.table is None:
            continue
        table = s.table.select(["seq", column])
        for start in range(0, max(table.num_rows, 1), _PER_NODE_ROWS):
            part = reduce(pl.from_arrow(table.slice(start, _PER_NODE_ROWS)))
            per = part if per is None else reduce(pl.concat([per, part]))
    if per is None:
        per = pl.DataFrame({"seq": [], column: []}, schema={"seq": pl.Int64, column: DTYPES[
            "str" if column == "parent" else "int"]})
    return pl.DataFrame({"seq": seqs}).join(per, on="seq", how="left", maintain_order="left")[column]


_PER_NODE_ROWS = 1 << 20  # rows of a fold's segments converted to a frame at once by _per_node


def _align(seq: np.ndarray, value: pa.Array, seqs: np.ndarray, kind: str) -> pa.Array:
    """``value`` (at ``seq``) placed at the rows of ``seqs``, null where a node lacks the key."""
    if len(seq) == len(seqs) and np.array_equal(seq, seqs):
        return value
    if len(seq) == 0:
        return pa.nulls(len(seqs), ARROW[kind])
    pos = np.minimum(np.searchsorted(seq, seqs), len(seq) - 1)
    return value.take(pa.array(pos, mask=seq[pos] != seqs))


def _latest(blocks: list[tuple[_Segment, Block]]) -> tuple:
    """``(value, stamp, writer)`` of the most recent record among ``blocks`` (value as stored)."""
    best = None
    for seg, b in blocks:
        t = pa.table({c: seg.column(c, b) for c in ("stamp", "writer", *b.columns)})
        j = pc.sort_indices(t, [("stamp", "ascending"), ("writer", "ascending")])[-1].as_py()
        value = next(v for c in b.columns if (v := t.column(c)[j].as_py()) is not None)
        candidate = (t.column("stamp")[j].as_py(), t.column("writer")[j].as_py(), value)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return best[2], best[0], best[1]
