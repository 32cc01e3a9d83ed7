"""The ui's data layer on a gs:// root (the GCS emulator on 127.0.0.1): runs rows, a series, the
run and node pages and an artifact, a run's new segment reaching the next poll, and nothing written."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from tests.conftest import gcs_bucket_root
from theseus.store import Node, Store
from theseus.ui import create_app
from theseus.ui.api import MIN_POLL_S

pytestmark = pytest.mark.gcs


def _write(store: Store, node: Node, seqs: range, checkpoint: bool = False) -> Node:
    with store.writer() as w:
        if seqs[0] == 0:
            w.job(node, "doc/job", "optimization:\n  lr: 0.001\n")
        for k in seqs:
            w.write(node, {"train/loss": 4.0 / (k + 1), "train/tokens": 64 * k})
            if k < seqs[-1]:
                node = node.next()
        if checkpoint:
            w.checkpoint(node, f"objects/{node.id}")
    return node


def _objects(store: Store) -> dict[str, int]:
    return {p: info["generation"] for p, info in store.fs.find(store.path(), detail=True).items()}


def test_the_data_layer_reads_a_gcs_root(gcs_emulator):
    url = gcs_bucket_root(gcs_emulator)
    store = Store(url)
    a = _write(store, Node.start("p.g.a"), range(4), checkpoint=True)
    b = _write(store, Node.start("p.g.b"), range(2))
    store.fs.pipe_file(f"{store.path('objects', a.id)}/analysis/map.png", b"\x89PNG fake")
    with store.writer() as w:
        w.artifacts(a, f"objects/{a.id}")
    before = _objects(store)
    client = TestClient(create_app(url), base_url="http://127.0.0.1")

    got = client.get("/api/runs").json()
    assert got["root"] == url
    rows = {r["nonce"]: r for r in got["rows"]}
    for expected in store.runs().iter_rows(named=True):
        row = rows[expected["nonce"]]
        assert (row["name"], row["nodes"], row["train/loss"], row["written"]) == (
            expected["name"], expected["nodes"], expected["train/loss"], expected["_written"])
    series = client.get("/api/series", params={"runs": a.nonce, "keys": "train/loss", "x": "train/tokens"}).json()
    cursor = store.find().nonce(a.nonce).columns(keys=["train/loss", "train/tokens"])
    [s] = series["series"]
    assert s["y"] == cursor["train/loss"] and s["x"] == [float(t) for t in cursor["train/tokens"]]
    assert s["checkpoints"] == [64.0 * 3]

    page = client.get(f"/api/node/{a.id}").json()
    assert page["record"]["train/loss"] == store.record(a)["train/loss"] and page["checkpoint"] == f"objects/{a.id}"
    assert [f["path"] for f in page["artifacts"]] == ["analysis/map.png"]
    assert client.get(f"/api/file/{a.id}/analysis/map.png").content == b"\x89PNG fake"
    run = client.get(f"/api/run/{a.nonce}").json()
    assert [c["seq"] for c in run["checkpoints"]] == [3] and run["config"].startswith("optimization:")
    assert client.get(f"/api/run/{b.nonce}/logs").json()["logs"] == []

    token = got["token"]
    _write(store, b.next(), range(2, 5))  # a new segment of one run: the next poll reads it
    after = _objects(store)
    time.sleep(MIN_POLL_S)  # polls closer together than this share one listing
    polled = client.get("/api/poll", params={"since": token}).json()
    assert polled["changed"] == [b.nonce] and polled["rows"][0]["nodes"] == 5
    more = client.get("/api/series", params={"runs": b.nonce, "keys": "train/loss", "since": f"{b.nonce}:1"}).json()
    assert more["series"][0]["seq"] == [2, 3, 4]
    assert _objects(store) == after and set(after) > set(before)  # the app itself wrote nothing
