"""The event store: nodes, the writer, the cursor DSL, compaction. Imports no JAX.

How a root is read and written (each module has the details):

- ``writer``: ``write()`` validates once per record shape and appends to a buffer; a flush
  turns each run's records into one immutable Parquet segment under
  ``log/name=<name>/nonce=<nonce>/`` in one vectorized pass (``segments``: key-major rows
  and a footer index of where each key's rows are), published atomically (``fs``).
- ``fold``: a run's nodes are folded from its segments' key blocks with pyarrow and numpy;
  records are merged by write stamp only where two segments hold the same seq of a key.
- ``compact``: merges a run's segments into one, then writes the **view**
  (``view/v-<stamp>-<writer>.parquet``): a derived, rebuildable folded copy of the whole log,
  one row per node, that records exactly which segments it covers. ``scope`` reads each run
  of a query from the newest view when the view covers it (folding any newer segments on
  top) and from the log otherwise, so a query over many runs scans one file. The log stays
  the source of truth: views are never rewritten, deleting them loses nothing, and
  raw readers (Polars, pandas, pyarrow, DuckDB) read the log without theseus, with
  ``name`` and ``nonce`` declared strings (``docs/reading-a-root.md``).
- ``cursor``: the immutable query DSL, planned as one Polars lazy frame over the scope.
- ``nonces``: a new lineage's nonce is unique in its root: a writer claims it before the
  lineage's first record and refuses one another run holds (``NonceTaken``); readers given a
  nonce that several runs share anyway refuse it (``AmbiguousNonce``).
- ``marks``: a person's tags, note and hidden flag on a run, as records (``theseus tag``).
"""

from theseus.store.cursor import Cursor, EmptyResult, UnknownKey
from theseus.store.node import Node
from theseus.store.nonces import AmbiguousNonce, NonceTaken
from theseus.store.segments import CorruptSegment
from theseus.store.store import Store
from theseus.store.writer import FlushError, Writer

__all__ = ["Store", "Node", "Writer", "Cursor", "EmptyResult", "UnknownKey", "CorruptSegment", "FlushError",
           "NonceTaken", "AmbiguousNonce"]
