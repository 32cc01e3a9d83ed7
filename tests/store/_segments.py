"""The published segments of a root, found by its documented layout, not through the store's caches."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from theseus.store import Store
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA


def segment_files(store: Store, name: str = "*", nonce: str = "*") -> list[str]:
    """Paths (for ``store.fs``) of the published segments under ``log/name=<name>/nonce=<nonce>/``
    (globs), sorted; the dot-named temporaries a publish leaves while it writes are not segments."""
    found = store.fs.glob(store.path("log", f"name={name}", f"nonce={nonce}", "*.parquet"))
    return sorted(p for p in found if not p.rsplit("/", 1)[-1].startswith("."))


def rewrite_footer(path: str, edit) -> None:
    """Rewrite a segment with its footer's ``{keys, index}`` (parsed JSON, or raw bytes) changed by ``edit``."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    keys, index = edit(json.loads(meta[KEYS_METADATA]), json.loads(meta[INDEX_METADATA]))
    meta[KEYS_METADATA] = keys if isinstance(keys, bytes) else json.dumps(keys).encode()
    if index is None:
        meta.pop(INDEX_METADATA)
    else:
        meta[INDEX_METADATA] = json.dumps(index).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
