"""A cold query of a compacted gs:// root makes as many storage requests for 40 runs as for 5."""

import collections
import contextlib

import gcsfs
import pytest

from tests.conftest import gcs_bucket_root
from theseus.store import Node, Store


@contextlib.contextmanager
def counted_requests():
    """Every HTTP request gcsfs makes meanwhile, as ``Counter({method: n})``."""
    counts = collections.Counter()
    original = gcsfs.GCSFileSystem._request

    async def request(self, method, path, *args, **kwargs):
        counts[method] += 1
        return await original(self, method, path, *args, **kwargs)

    gcsfs.GCSFileSystem._request = request
    try:
        yield counts
    finally:
        gcsfs.GCSFileSystem._request = original


def compacted_root(emulator: str, runs: int) -> tuple[str, list[Node]]:
    root = gcs_bucket_root(emulator)
    store = Store(root)
    nodes = [Node.start(f"proj.gcs.run{i:03d}") for i in range(runs)]
    with store.writer() as w:
        for i, node in enumerate(nodes):
            for step in range(3):
                w.write(Node(node.name, node.nonce, step), {"loss": float(i * 10 + step), "tokens": step})
    store.compact()
    return root, nodes


def cold_requests(root: str, query) -> collections.Counter:
    gcsfs.GCSFileSystem.clear_instance_cache()  # no listing or file cached from before
    with counted_requests() as counts:
        query(Store(root))
    return counts


QUERIES = {
    "top-3": lambda store: store.find().has("loss").sort("loss").limit(3).select(keys=["loss"]),
    "runs": lambda store: store.runs(),
    "unfinished runs": lambda store: store.find().finished(False).has("loss").select(keys=["tokens"]),
}


@pytest.mark.gcs
def test_cold_query_requests_do_not_grow_with_runs(gcs_emulator):
    roots = {n: compacted_root(gcs_emulator, n)[0] for n in (5, 40)}
    for name, query in QUERIES.items():
        counts = {n: cold_requests(root, query) for n, root in roots.items()}
        assert counts[40] == counts[5], (name, counts)
        assert sum(counts[40].values()) <= 8, (name, counts)
        assert len(query(Store(roots[40]))) >= 3
