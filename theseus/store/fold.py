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

from theseus.store import fs as rootfs
from theseus.store.recency import last_of_each, later, latest_index, latest_per_group
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
    >>> from theseus.store.footers import read_footer
    >>> from theseus.store.listing import list_segments
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
    folded = _fold_segments(fs, segments, keys, rows, parent, written, latest)
    columns = [pl.Series("seq", folded.seqs)]
    if parent:
        columns.append(folded.per_node["parent"])
    if written:
        columns.append(folded.per_node["stamp"].alias(WRITTEN))
    for key, kind in keys.items():
        columns.append(pl.Series(key, folded.values[key], dtype=DTYPES[kind]))
    return RunFold(pl.DataFrame(columns), folded.latest)


def fold_values(fs: fsspec.AbstractFileSystem, segments: list[tuple[str, Footer]], keys: dict[str, str],
                rows: list[str]) -> dict[str, pa.Array]:
    """:func:`fold_run`'s key columns alone, as Arrow arrays: the values of ``keys`` (read
    types) for the nodes holding one of ``rows``, in seq order, null where a node lacks one.

    >>> import tempfile
    >>> from theseus.store import Store, Node
    >>> from theseus.store.footers import read_footer
    >>> from theseus.store.listing import list_segments
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     w.write(n, {"a": 1.0}); w.write(n.next(), {"b": "x"}); w.write(n.next().next(), {"a": 3})
    >>> paths = list_segments(store.fs, store.path())
    >>> values = fold_values(store.fs, [(p, read_footer(store.fs, p)) for p in paths], {"a": "float"}, ["a"])
    >>> values["a"].to_pylist()
    [1.0, 3.0]
    """
    return _fold_segments(fs, segments, keys, rows, False, False, ()).values


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


FOLD_BATCH_ROWS = 1 << 20  # a run with more rows to read is folded a batch of keys of about this many rows at a time


def key_batches(sizes: dict[str, int], limit: int) -> list[list[str]]:
    """``sizes``' keys (``{key: rows}``) in order, cut into batches of at most ``limit`` rows
    (a larger key alone), what a fold or a merge of a large run holds at once.

    >>> key_batches({"b": 2, "a": 2, "c": 5}, 4)
    [['a', 'b'], ['c']]
    """
    batches, size = [], limit
    for key in sorted(sizes):
        if size + sizes[key] > limit and size:
            batches.append([])
            size = 0
        batches[-1].append(key)
        size += sizes[key]
    return batches


class _Folded(NamedTuple):
    """What :func:`_fold_segments` gives: the nodes' seqs, each key's values at them, the per-node
    columns asked for (``parent``, ``stamp``) and the latest records asked for."""

    seqs: np.ndarray
    values: dict[str, pa.Array]
    per_node: dict[str, pl.Series]
    latest: dict[str, tuple]


def _fold_segments(fs, segments, keys, rows, parent, written, latest) -> _Folded:
    """Read what a fold needs from ``segments`` and fold each key.

    A run of more than ``FOLD_BATCH_ROWS`` rows to read is read a batch of keys at a time
    (:func:`_batches`): each batch's blocks are read, folded into per-key results and
    per-node reductions, and freed before the next, so memory holds one batch's rows and
    the per-node results, never the whole run."""
    wanted = list(dict.fromkeys([*keys, *latest, *(rows or [])]))
    folded_keys = list(dict.fromkeys([*keys, *(rows or [])]))
    # the parent, the write stamp and the list of nodes come from every block, not only the wanted keys'
    every = parent or written or rows is None
    folded, found_latest, ranges, seq_parts = {}, {}, set(), []
    per_node = {c: _PerNode(c) for c, asked in (("parent", parent), ("stamp", written)) if asked}
    for batch in _batches(segments, wanted, every):
        data = [_Segment(fs, path, footer) for path, footer in segments]
        blocks_of = {k: _blocks(data, k) for k in wanted if batch is None or k in batch}
        overlap = {k: _overlapping(b) for k, b in blocks_of.items()}
        for key, found in blocks_of.items():
            for seg, block in found:
                stamps = ("stamp", "writer") if overlap[key] or key in latest else ()
                seq = () if _seq_implied(block) and seg.footer.rows >= SMALL_SEGMENT_ROWS else ("seq",)
                seg.need(block, (*seq, *block.columns, *stamps))
        own = [[(k, b) for k, b in seg.footer.blocks.items() if batch is None or k in batch] for seg in data]
        for seg, blocks in zip(data, own):
            for _, block in blocks:
                if rows is None and not block.dense:
                    seg.need(block, ("seq",))
                if parent:
                    seg.need(block, ("seq", "parent"))
                if written:
                    seg.need(block, ("seq", "stamp"))
            seg.load()
        for key in folded_keys:
            if key in blocks_of:
                folded[key] = _fold_key(blocks_of[key], keys.get(key, "str"), overlap[key])
        found_latest.update({k: _latest(blocks_of[k]) for k in latest if blocks_of.get(k)})
        if rows is None:
            for seg, blocks in zip(data, own):
                for _, b in blocks:
                    if b.dense:
                        ranges.add((b.seq_min, b.seq_max))
                    else:
                        seq_parts.append(seg.column("seq", b).to_numpy())
        for reduction in per_node.values():
            reduction.add(data)
    for key in folded_keys:
        if key not in folded:  # in no segment, so in no batch
            folded[key] = _fold_key([], keys.get(key, "str"), False)
    seqs = _all_seqs(ranges, seq_parts) if rows is None else _union([folded[k][0] for k in rows])
    return _Folded(seqs, {key: _align(*folded[key], seqs, kind) for key, kind in keys.items()},
                   {c: r.result(seqs) for c, r in per_node.items()}, found_latest)


def _batches(segments: list[tuple[str, Footer]], wanted: list[str], every: bool) -> list[set[str] | None]:
    """The batches of keys a fold reads together: ``[None]`` (everything at once) for a run of at most
    ``FOLD_BATCH_ROWS`` rows to read or with a segment without a block index; else :func:`key_batches`
    of the ``wanted`` keys' blocks (of every key's, when ``every``)."""
    sizes: dict[str, int] = {}
    for _, footer in segments:
        if footer.blocks is None:
            return [None]
        for key, block in footer.blocks.items():
            if every or key in wanted:
                sizes[key] = sizes.get(key, 0) + block.stop - block.start
    if sum(sizes.values()) <= FOLD_BATCH_ROWS:
        return [None]
    return [set(batch) for batch in key_batches(sizes, FOLD_BATCH_ROWS)]


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

    def positions(self) -> np.ndarray:
        """The segment row number of each loaded row."""
        if not self.groups:
            return np.arange(self.table.num_rows, dtype=np.int64)
        return np.concatenate([np.arange(self.starts[g], self.starts[g + 1], dtype=np.int64)
                               for g in sorted(self.groups)])

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
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
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
        latest = latest_per_group(seq, pa.concat_arrays([s.column("stamp", b) for s, b in blocks]),
                                  pa.concat_arrays([s.column("writer", b) for s, b in blocks]))
        return seq[latest], value.take(pa.array(latest))
    if sum(b.distinct for _, b in blocks) == len(seq):
        return seq, value
    keep = last_of_each(seq)  # a block's rows are in (seq, stamp, writer) order
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


def _all_seqs(ranges: set[tuple[int, int]], parts: list[np.ndarray]) -> np.ndarray:
    """Every seq with a record in the run, from dense blocks' ``ranges`` (as the footer gives them)
    and the seqs of the other blocks (``parts``).

    >>> _all_seqs({(0, 2)}, []), _all_seqs({(0, 1), (3, 3)}, [np.array([5, 7])])
    (array([0, 1, 2]), array([0, 1, 3, 5, 7]))
    """
    if len(ranges) == 1 and not parts:
        lo, hi = next(iter(ranges))
        return np.arange(lo, hi + 1, dtype=np.int64)
    parts = [*parts, *(np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in ranges)]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)


class _PerNode:
    """Per node: its first non-null parent (in segment, then row order), or its highest write stamp,
    reduced a slice of rows at a time (a run's records are several per node: one per key), so only
    one slice and the per-node result are ever converted at once.

    A parent keeps its position in the run (``_ORDER``: segment number, row number) and the first
    position wins, so slices and batches of keys combine in any order, and rows loaded twice (a row
    group holding keys of two batches) change nothing, as they change no highest stamp. A slice of
    one key's block (seqs ascending, once each) is already one row per node."""

    def __init__(self, column: str):
        self.column = column
        self.per: pl.DataFrame | None = None

    def add(self, segments: list[_Segment]) -> None:
        """Fold in the rows loaded in ``segments``."""
        for number, s in enumerate(segments):
            if s.table is None:
                continue
            table = s.table.select(["seq", self.column])
            positions = s.positions() + (number << 40) if self.column == "parent" else None
            for start in range(0, table.num_rows, _PER_NODE_ROWS):
                part = pl.from_arrow(table.slice(start, _PER_NODE_ROWS))
                if positions is not None:
                    part = part.with_columns(pl.Series(_ORDER, positions[start:start + _PER_NODE_ROWS]))
                part = self._reduce(part)
                self.per = part if self.per is None else self._combine(self.per, part)

    def _reduce(self, frame: pl.DataFrame) -> pl.DataFrame:
        """One row per seq of ``frame`` (its rows in position order), seqs ascending."""
        if self.column == "parent":
            frame = frame.drop_nulls(self.column)
        seq = frame["seq"].to_numpy()
        if bool((seq[1:] > seq[:-1]).all()):
            return frame
        if self.column == "parent":  # seq order, so the next slice or batch of keys combines in place
            return frame.unique("seq", keep="first", maintain_order=True).sort("seq")
        return frame.group_by("seq").agg(pl.col(self.column).max()).sort("seq")

    def _combine(self, a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
        """Two reductions (seqs ascending) as one: per seq, the parent at the first position, or the highest
        stamp; a join only where their seqs differ."""
        column = self.column
        if a.height < b.height:
            a, b = b, a  # either order gives the same answer
        if b.height == 0:
            return a
        b = b.rename({column: "_b", **({_ORDER: "_b_order"} if column == "parent" else {})})
        a_seq, b_seq = a["seq"].to_numpy(), b["seq"].to_numpy()
        pos = np.minimum(np.searchsorted(b_seq, a_seq), len(b_seq) - 1)
        hit = b_seq[pos] == a_seq
        if np.count_nonzero(hit) == len(b_seq):  # b's seqs are among a's (the usual case): no join
            found = pl.Series(hit)
            both = a.with_columns(pl.when(found).then(c) for c in b.drop("seq")[pos].get_columns())
        else:
            both = a.join(b, on="seq", how="full", coalesce=True).sort("seq")
        if column != "parent":
            return both.select("seq", pl.max_horizontal(column, "_b").alias(column))
        take = (pl.col("_b_order") < pl.col(_ORDER)) | pl.col(_ORDER).is_null()
        return both.select("seq", pl.when(take).then(pl.col("_b")).otherwise(pl.col(column)).alias(column),
                           pl.when(take).then(pl.col("_b_order")).otherwise(pl.col(_ORDER)).alias(_ORDER))

    def result(self, seqs: np.ndarray) -> pl.Series:
        """The reduced column at ``seqs`` (null where no row gave a value)."""
        per = self.per
        if per is None:
            per = pl.DataFrame({"seq": [], self.column: []}, schema={"seq": pl.Int64, self.column: DTYPES[
                "str" if self.column == "parent" else "int"]})
        return pl.DataFrame({"seq": seqs}).join(per.select("seq", self.column), on="seq", how="left",
                                                maintain_order="left")[self.column]


_PER_NODE_ROWS = 1 << 20  # rows of a fold's segments converted to a frame at once by _PerNode
_ORDER = "_position"  # a row's place in the run: segment number << 40 | row number in the segment


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
        stamps, writers = seg.column("stamp", b), seg.column("writer", b)
        j = latest_index(stamps.to_numpy(), writers)
        value = next(v for c in b.columns if (v := seg.column(c, b)[j].as_py()) is not None)
        best = later(best, (value, stamps[j].as_py(), writers[j].as_py()))
    return best
