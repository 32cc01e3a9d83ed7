"""The event store: nodes, the writer, the cursor DSL, compaction. Imports no JAX."""

from theseus.store.cursor import Cursor, EmptyResult, UnknownKey
from theseus.store.node import Node
from theseus.store.segments import CorruptSegment
from theseus.store.store import Store
from theseus.store.writer import Writer

__all__ = ["Store", "Node", "Writer", "Cursor", "EmptyResult", "UnknownKey", "CorruptSegment"]
