"""The published segments of a root, found by its documented layout, not through the store's caches."""

from __future__ import annotations

from theseus.store import Store


def segment_files(store: Store, name: str = "*", nonce: str = "*") -> list[str]:
    """Paths (for ``store.fs``) of the published segments under ``log/name=<name>/nonce=<nonce>/``
    (globs), sorted; the dot-named temporaries a publish leaves while it writes are not segments."""
    found = store.fs.glob(store.path("log", f"name={name}", f"nonce={nonce}", "*.parquet"))
    return sorted(p for p in found if not p.rsplit("/", 1)[-1].startswith("."))
