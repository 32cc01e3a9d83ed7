"""Every request of the app is bounded: the runs API pages (offset, limit, total), chart series and CSV
exports cap what one request asks for (a 400 naming the limit), and where-conditions are answered as the
cursor answers them."""

import pytest
from starlette.testclient import TestClient

from tests.ui._synthetic_runs import make_runs
from theseus.store import Store
from theseus.ui import api as api_module
from theseus.ui.server import create_app


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("scale"))
    make_runs(root, runs=30, nodes=6)
    return root


def client_of(root) -> TestClient:
    return TestClient(create_app(root), base_url="http://127.0.0.1")


def test_the_runs_api_pages_with_a_total(root):
    client = client_of(root)
    whole = client.get("/api/runs").json()
    assert whole["total"] == len(whole["rows"]) == 30
    pages = [client.get(f"/api/runs?offset={o}&limit=7").json() for o in range(0, 30, 7)]
    assert all(p["total"] == 30 and p["limit"] == 7 for p in pages)
    assert [r["nonce"] for p in pages for r in p["rows"]] == [r["nonce"] for r in whole["rows"]]
    too_many = client.get(f"/api/runs?limit={api_module.MAX_PAGE + 1}")
    assert too_many.status_code == 400 and str(api_module.MAX_PAGE) in too_many.json()["error"]
    assert client.get("/api/runs?offset=-1").status_code == 400


def test_series_and_csv_cap_one_request(root, monkeypatch):
    client = client_of(root)
    nonces = [r["nonce"] for r in client.get("/api/runs").json()["rows"]]
    monkeypatch.setattr(api_module, "MAX_SERIES", 4)
    ok = client.get(f"/api/series?runs={','.join(nonces[:2])}&keys=train/loss,val/loss")
    assert ok.status_code == 200 and len(ok.json()["series"]) == 4
    over = client.get(f"/api/series?runs={','.join(nonces[:3])}&keys=train/loss,val/loss")
    assert over.status_code == 400 and "at most 4 series" in over.json()["error"]
    monkeypatch.setattr(api_module, "MAX_CSV_RUNS", 5)
    assert client.post("/api/csv", json={"nonces": nonces[:5]}).text.count("\n") == 6
    over = client.post("/api/csv", json={"nonces": nonces[:6]})
    assert over.status_code == 400 and "at most 5 runs" in over.json()["error"]


@pytest.mark.parametrize("condition, key, op, value", [
    ("train/loss < 0.3", "train/loss", "<", 0.3), ("val/loss >= 1.0", "val/loss", ">=", 1.0),
    ("train/tokens == 3000", "train/tokens", "==", 3000),
    ("train/tokens in [0, 5000]", "train/tokens", "in", (0, 5000)), ("train/tokens != 0", "train/tokens", "!=", 0),
    ("val/loss > 1.5", "val/loss", ">", 1.5), ("train/loss <= 0.25", "train/loss", "<=", 0.25),
])
def test_filter_answers_as_the_cursor(root, condition, key, op, value):
    client = client_of(root)
    found = client.post("/api/filter", json={"conditions": [condition]}).json()["nonces"]
    cursor = Store(root).find().where(key, op, value).frame(keys=[key]).collect()
    assert found == sorted(set(cursor["nonce"].to_list()))
    unknown = client.post("/api/filter", json={"conditions": ["train/los < 1"]})
    assert unknown.status_code == 400 and "train/loss" in unknown.json()["error"]
    wrong = client.post("/api/filter", json={"conditions": ["train/loss < abc"]})
    assert wrong.status_code == 400 and "holds float values" in wrong.json()["error"]


def test_server_start_costs_a_fixed_number_of_polars_passes_whatever_the_run_count(tmp_path, monkeypatch):
    """The runs are folded together and their table facts worked out in one pass: no Polars query, and no
    config parsed, per run at start (at 100,000 runs each would cost minutes)."""
    import polars as pl
    import yaml

    counts = {"collect": 0, "yaml": 0}
    collect, load = pl.LazyFrame.collect, yaml.load

    def counted_collect(self, *args, **kwargs):
        counts["collect"] += 1
        return collect(self, *args, **kwargs)

    def counted_load(*args, **kwargs):
        counts["yaml"] += 1
        return load(*args, **kwargs)

    monkeypatch.setattr(pl.LazyFrame, "collect", counted_collect)
    monkeypatch.setattr(yaml, "load", counted_load)
    monkeypatch.setattr(yaml, "safe_load", counted_load)
    found = {}
    for runs in (5, 20):
        root = str(tmp_path / f"r{runs}")
        make_runs(root, runs=runs, nodes=3, compact=False)
        counts.update(collect=0, yaml=0)
        create_app(root)
        found[runs] = dict(counts)
    assert found[5] == found[20] and found[20]["yaml"] == 0, found


def test_polls_are_spaced_by_their_own_cost(tmp_path, monkeypatch):
    """A poll that takes long (listing a root of many runs) is not started again right away, however
    many pages ask: polls start at least POLL_SPACING times their duration apart."""
    import time

    from theseus.ui.api import MIN_POLL_S, POLL_SPACING, Api

    api, calls = Api(Store(tmp_path)), []

    def slow_poll():
        calls.append(time.monotonic())
        time.sleep(0.3)
        return []

    monkeypatch.setattr(api.follower, "poll", slow_poll)
    api.refresh()
    time.sleep(MIN_POLL_S + 0.05)
    api.refresh()
    assert len(calls) == 1
    time.sleep(POLL_SPACING * 0.3 + 0.5)
    api.refresh()
    assert len(calls) == 2
