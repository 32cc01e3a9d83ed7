"""The app's start and memory follow what its pages show, not the root's records: the server starts on a
compacted root from the store's run summaries without reading a segment block, a run's records are read
when its page asks and held in a cache bounded by runs and bytes, and a where-condition on a logged key
is answered by the cursor."""

import polars as pl
import pytest
from starlette.testclient import TestClient

import theseus.store.fold
import theseus.ui.records
from tests.ui._synthetic_runs import make_runs
from theseus.store import Store
from theseus.ui.api import Api
from theseus.ui.run import run_page
from theseus.ui.server import create_app

RUNS = 24


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bounded"))
    make_runs(root, runs=RUNS, nodes=6)  # compacted: the view holds every run's summary
    return root


def test_the_server_starts_on_a_compacted_root_without_reading_a_segment_block(root, monkeypatch):
    reads = []

    def refused(*args, **kwargs):
        reads.append(args[:2])
        raise AssertionError(f"a segment read at start: {args[:2]}")

    scan_parquet = pl.scan_parquet

    def scan_outside_the_log(source, *args, **kwargs):
        if "/log/" in str(source):
            refused(source)
        return scan_parquet(source, *args, **kwargs)

    monkeypatch.setattr(theseus.store.fold, "_values", refused)  # a segment's block
    monkeypatch.setattr(theseus.ui.records, "scan", refused)  # the app's own reads of a run's records
    monkeypatch.setattr(pl, "scan_parquet", scan_outside_the_log)
    app = create_app(root)
    assert reads == []
    monkeypatch.undo()  # the rows' failure texts are read when a page asks for them
    client = TestClient(app, base_url="http://127.0.0.1")
    rows = client.get("/api/runs?all=1").json()["rows"]
    table = Store(root).runs()
    assert sorted(r["nonce"] for r in rows) == sorted(table["nonce"].to_list()) and len(rows) == RUNS
    by_nonce = {r["nonce"]: r for r in rows}
    for nonce, nodes, loss, status in table.select("nonce", "nodes", "train/loss", "status").iter_rows():
        assert (by_nonce[nonce]["nodes"], by_nonce[nonce]["train/loss"], by_nonce[nonce]["status"]) == (
            nodes, loss, status)
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["error"].startswith("RuntimeError: synthetic failure") for r in failed)


def test_records_held_are_bounded_however_many_run_pages_open(root):
    api = Api(Store(root))
    api.refresh()
    records = api.follower.records
    assert records.held() == (0, 0)  # the summaries alone
    records.max_runs = 3
    for nonce, run in api.follower.runs.items():
        page = run_page(api.store, api.follower, nonce, with_audit=False)
        assert page["row"]["nodes"] == run.facts.nodes == len(run.values("train/loss")) == 6
        assert records.held()[0] <= 3
    held_bytes = records.held()[1]
    records.max_bytes = held_bytes // 2  # the least recently read runs go first, the one asked for stays
    next(iter(api.follower.runs.values())).values("train/loss")
    assert records.held()[1] <= held_bytes // 2 or records.held()[0] == 1


@pytest.mark.parametrize("condition, key, op, value", [
    ("train/loss < 0.9", "train/loss", "<", 0.9), ("val/loss >= 1.0", "val/loss", ">=", 1.0),
    ("train/tokens in [0, 5000]", "train/tokens", "in", (0, 5000)),
])
def test_the_filter_answers_as_the_cursor(root, condition, key, op, value):
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    found = client.post("/api/filter", json={"conditions": [condition]}).json()["nonces"]
    cursor = Store(root).find().where(key, op, value).frame(keys=[key]).collect()
    assert found == sorted(set(cursor["nonce"].to_list()))
    both = client.post("/api/filter", json={"conditions": [condition, "config.optimization.lr == 0.001"]}).json()
    configs = {n for n in found if Store(root).run_record(n)["_config"].find("lr: 0.001") >= 0}
    assert both["nonces"] == sorted(configs)
