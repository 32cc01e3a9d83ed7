"""One bad segment (a FIFO named like one, a published segment cut short) costs its own run at most:
the server starts, ``/api/runs``, ``/api/poll`` and the other runs' pages answer, and the bad run is
shown with the status ``unreadable`` and an error naming the file."""

import os
import time
import warnings

import pytest
from starlette.testclient import TestClient

from tests.store.test_bad_segments import root_with_bad_run, within
from theseus.store import Node, Store
from theseus.store.summary import UnreadableRun
from theseus.ui.api import MIN_POLL_S
from theseus.ui.server import create_app


def client_of(root) -> TestClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableRun)
        return TestClient(create_app(root), base_url="http://127.0.0.1")


@pytest.mark.parametrize("kind", ["fifo", "truncated"])
@pytest.mark.parametrize("when", ["at start", "while serving"])
def test_a_bad_segment_costs_its_own_run_only(tmp_path, kind, when):
    if when == "at start":
        good, bad, path = root_with_bad_run(tmp_path, kind)
        client = within(30, lambda: client_of(tmp_path))
    else:  # the bad file appears after the server read the run
        store, good, bad = Store(tmp_path), Node.start("proj.bad.good"), Node.start("proj.bad.bad")
        with store.writer() as w:
            w.write(good, {"train/loss": 1.0})
            w.write(bad, {"train/loss": 2.0})
        client = client_of(tmp_path)
        folder = f"{tmp_path}/log/name={bad.name}/nonce={bad.nonce}"
        path = f"{folder}/s-9999999999999999999-badfile0-000000.parquet"
        if kind == "fifo":
            os.mkfifo(path)
        else:
            with open(f"{folder}/{os.listdir(folder)[0]}", "rb") as f, open(path, "wb") as out:
                out.write(f.read(100))
        time.sleep(MIN_POLL_S)  # the next request polls the root again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableRun)
        polled = within(30, lambda: client.get("/api/poll?since=0"))
        runs = within(30, lambda: client.get("/api/runs"))
        good_page = within(30, lambda: client.get(f"/api/run/{good.nonce}?audit=0"))
        bad_page = within(30, lambda: client.get(f"/api/run/{bad.nonce}?audit=0"))
        found = within(30, lambda: client.post("/api/filter", json={"conditions": ["train/loss < 5"]}))
    assert polled.status_code == runs.status_code == good_page.status_code == bad_page.status_code == 200
    rows = {r["nonce"]: r for r in runs.json()["rows"]}
    assert rows[good.nonce]["status"] == "running" and rows[good.nonce]["train/loss"] == 1.0
    assert rows[bad.nonce]["status"] == "unreadable" and os.path.basename(path) in rows[bad.nonce]["error"]
    assert good_page.json()["row"]["train/loss"] == 1.0
    assert os.path.basename(path) in bad_page.json()["row"]["error"]
    assert found.status_code == 200 and good.nonce in found.json()["nonces"]
    if when == "while serving":
        assert bad.nonce in polled.json()["changed"]
