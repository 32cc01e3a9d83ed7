"""The ui's data layer without a browser: the follower reads only new segments and folds as the
cursor does, rows and conditions agree with Store.runs() and the cursor, the API refuses bad input,
serves only files of the root, and never writes to it."""

from __future__ import annotations

import os

import pytest
from starlette.testclient import TestClient

from theseus.store import Node, Store
from theseus.store.cursor import UnknownKey
from theseus.ui import create_app
from theseus.ui.follow import Follower
from theseus.ui.series import series
from theseus.ui.table import matching, parse_condition, rows


def _write(store: Store, name: str, steps: int, start: int = 0, node: Node | None = None, **extra) -> Node:
    node = node or Node.start(name)
    with store.writer() as w:
        if start == 0:
            w.job(node, "doc/job", "optimization:\n  lr: 0.001\ntraining:\n  tokens: 100\n")
        for k in range(start, start + steps):
            w.write(node, {"train/loss": 5.0 / (k + 1), "train/tokens": 64 * k, **extra})
            if k < start + steps - 1:
                node = node.next()
    return node


def test_follower_reads_only_new_segments_and_folds_like_the_cursor(tmp_path):
    store = Store(tmp_path / "root")
    a = _write(store, "p.g.a", 5)
    follower = Follower(store)
    assert {r.nonce for r in follower.poll()} == {a.nonce}
    first = follower.segments_read
    assert follower.poll() == [] and follower.segments_read == first  # nothing new: nothing read
    b = _write(store, "p.g.b", 3)
    a = _write(store, "p.g.a", 4, start=5, node=a.next())
    changed = {r.nonce for r in follower.poll()}
    assert changed == {a.nonce, b.nonce}
    assert follower.segments_read == len(store.fs.glob(store.path("log", "*", "*", "*.parquet")))
    for nonce in (a.nonce, b.nonce):
        cursor = store.find().nonce(nonce).frame(keys=["train/loss"]).collect()
        assert follower.run(nonce).values("train/loss") == dict(zip(cursor["seq"], cursor["train/loss"]))
    store.compact()  # merged segments are read once more and fold to the same values; retired ones forgotten
    before = follower.run(a.nonce).values("train/loss")
    follower.poll()
    assert follower.run(a.nonce).values("train/loss") == before
    assert follower.run(a.nonce).segments == set(store.fs.glob(store.path("log", "*", f"nonce={a.nonce}", "*.parquet")))


def test_rows_agree_with_store_runs_and_status_rules(tmp_path):
    store = Store(tmp_path / "root")
    a, b = _write(store, "p.g.a", 4), _write(store, "p.h.b", 2)
    with store.writer() as w:
        w.failed(b, "RuntimeError: boom")
    follower = Follower(store)
    follower.poll()
    table = {r["nonce"]: r for r in rows(follower.runs.values(), extra=["config.optimization.lr", "train/tokens"])}
    for expected in Store(store.root).runs().iter_rows(named=True):
        got = table[expected["nonce"]]
        assert (got["name"], got["nodes"], got["written"], got["train/loss"]) == (
            expected["name"], expected["nodes"], expected["_written"], expected["train/loss"])
    assert table[b.nonce]["status"] == "failed" and table[b.nonce]["error"] == "RuntimeError: boom"
    assert table[a.nonce]["status"] == "running" and table[a.nonce]["config.optimization.lr"] == 0.001
    assert table[a.nonce]["project"] == "p" and table[a.nonce]["group"] == "g"
    stale = rows(follower.runs.values(), stale_after_s=1e-9)
    assert {r["nonce"]: r["status"] for r in stale}[a.nonce] == "stale"
    with pytest.raises(ValueError, match="invalid key"):
        rows(follower.runs.values(), extra=["_secret"])


def test_conditions_use_the_cursor_where(tmp_path):
    store = Store(tmp_path / "root")
    a, b = _write(store, "p.g.a", 6), _write(store, "p.g.b", 2)
    follower = Follower(store)
    follower.poll()
    cursor = store.find().where("train/loss", "<", 1.5).frame(keys=["train/loss"]).collect()
    assert matching(store, follower.runs, [parse_condition("train/loss < 1.5")]) == set(cursor["nonce"]) == {a.nonce}
    assert matching(store, follower.runs, [parse_condition("config.optimization.lr == 0.001")]) == {a.nonce, b.nonce}
    assert matching(store, follower.runs, [parse_condition("config.optimization.lr in [0.1]")]) == set()
    with pytest.raises(UnknownKey, match="train/loss"):
        matching(store, follower.runs, [parse_condition("train/los < 1")])
    with pytest.raises(ValueError, match="holds float values"):
        matching(store, follower.runs, [parse_condition("train/loss < abc")])
    with pytest.raises(ValueError, match="cannot read the condition"):
        parse_condition("train/loss")


def test_series_equal_the_cursor_and_follow_new_points(tmp_path):
    store = Store(tmp_path / "root")
    a = _write(store, "p.g.a", 5)
    with store.writer() as w:
        w.checkpoint(a, f"objects/{a.id}")
    follower = Follower(store)
    follower.poll()
    s = series(follower.run(a.nonce), "train/loss", x="train/tokens")
    cursor = store.find().nonce(a.nonce).columns(keys=["train/loss", "train/tokens"])
    assert s["y"] == cursor["train/loss"] and s["x"] == [float(t) for t in cursor["train/tokens"]]
    assert s["checkpoints"] == [64.0 * 4]
    _write(store, "p.g.a", 2, start=5, node=a.next())
    follower.poll()
    assert series(follower.run(a.nonce), "train/loss", since=4)["seq"] == [5, 6]
    assert len(series(follower.run(a.nonce), "train/loss", x="time")["x"]) == 7
    with pytest.raises(ValueError, match="invalid key"):
        series(follower.run(a.nonce), "train/loss", x="../etc")


def _snapshot(root: str) -> dict[str, float]:
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
            for d, _, files in os.walk(root) for f in files} | {d: 0 for d, _, _ in os.walk(root)}


def test_api_answers_refuses_bad_input_and_never_writes(tmp_path):
    root = str(tmp_path / "root")
    store = Store(root)
    a = _write(store, "p.g.a", 3)
    b = _write(store, "p.g.b", 3)
    folder = store.path("objects", a.id)
    os.makedirs(folder + "/analysis")
    with open(folder + "/analysis/map.png", "wb") as f:
        f.write(b"\x89PNG fake")
    os.symlink("/etc/hostname", folder + "/link.txt")
    with store.writer() as w:
        w.artifacts(a, f"objects/{a.id}")
    before = _snapshot(root)
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    assert {r["nonce"] for r in client.get("/api/runs").json()["rows"]} == {a.nonce, b.nonce}
    assert client.get("/api/run/abcdef").status_code == 404
    assert "6 lowercase hex" in client.get("/api/run/ABC").json()["error"]
    assert client.post("/api/filter", json={"conditions": ["train/loss ~ 1"]}).status_code == 400
    assert client.post("/api/filter", json=[1]).status_code == 400
    assert client.post("/api/filter", json={"conditions": ["train/loss < 2"]}).json()["nonces"] == sorted(
        {a.nonce, b.nonce})
    csv = client.post("/api/csv", json={"nonces": [b.nonce, a.nonce], "columns": ["nonce", "train/loss"]}).text
    assert csv.splitlines() == ["nonce,train/loss", f"{b.nonce},{5.0 / 3}", f"{a.nonce},{5.0 / 3}"]
    page = client.get(f"/api/node/{a.id}").json()
    assert {f["path"] for f in page["artifacts"]} == {"analysis/map.png"}  # the link is not listed
    assert client.get(f"/api/file/{a.id}/analysis/map.png").content == b"\x89PNG fake"
    assert client.get(f"/api/file/{a.id}/link.txt").status_code == 400  # a link: not followed
    assert client.get(f"/api/file/{a.id}/..%2F..%2Flog").status_code in (400, 404)
    assert client.get(f"/api/series?runs={a.nonce}&keys=nope").status_code == 400
    assert client.get("/api/diff", params={"run": a.nonce, "other": b.nonce}).json()["diff"] == []
    assert client.get(f"/api/run/{a.nonce}").json()["row"]["nodes"] == 3
    assert _snapshot(root) == before  # read-only: no file added, removed or changed


def test_a_missing_root_and_bad_options_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        create_app(str(tmp_path / "nowhere"))
    os.makedirs(tmp_path / "root")
    with pytest.raises(ValueError, match="stale_after_s"):
        create_app(str(tmp_path / "root"), stale_after_s=0)


def test_the_log_panel_says_why_a_run_has_no_process_output(tmp_path):
    from theseus.dispatch.bootstrap import publish_log
    from theseus.dispatch.spec import LaunchSpec
    from theseus.ui.run import NO_JOB, NOT_LAUNCHED

    root = str(tmp_path / "root")
    store = Store(root)
    script = Node.start("p.g.script")
    with store.writer() as w:  # no reserved record: `theseus logs` used to call it an unknown run
        w.write(script, {"train/loss": 1.0})
    job = _write(store, "p.g.job", 2)
    spec = LaunchSpec("data/tokenize/pydoc", "launched", "", root, nonce="abcdef")
    with store.writer() as w:
        w.job(spec.first_node(), spec.job_key, "")
    publish_log(spec, 0, b"hello from process 0\n")
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    assert client.get(f"/api/run/{script.nonce}/logs").json() == {"logs": [], "note": NO_JOB}
    assert client.get(f"/api/run/{job.nonce}/logs").json() == {"logs": [], "note": NOT_LAUNCHED}
    launched = client.get("/api/run/abcdef/logs").json()
    assert launched["note"] is None and [log["text"] for log in launched["logs"]] == ["hello from process 0\n"]
    assert client.get("/api/run/123456/logs").status_code == 404


def test_retired_checkpoints_are_neither_listed_nor_marked(tmp_path):
    """A checkpoint retention retired (its folder deleted) is no longer offered on the run page or the charts."""
    from theseus.ui.run import checkpoints

    store = Store(tmp_path / "root")
    last = _write(store, "p.g.r", 4)
    first, second = Node(last.name, last.nonce, 1), Node(last.name, last.nonce, 2)
    with store.writer() as w:
        for node in (first, second, last):
            w.checkpoint(node, f"objects/{node.id}")
        w.retire(first, "keep_checkpoints=2")
    follower = Follower(store)
    follower.poll()
    run = follower.run(last.nonce)
    assert [c["seq"] for c in checkpoints(run)] == [2, 3]
    assert series(run, "train/loss")["checkpoints"] == [2.0, 3.0]
    assert series(run, "train/loss", x="train/tokens")["checkpoints"] == [128.0, 192.0]


def test_an_internal_key_error_is_a_server_error_not_a_missing_run(tmp_path, monkeypatch):
    """Only the error family's kinds become 404 / 400: a KeyError from a bug answers 500, not 'not found'."""
    from theseus.ui import run as run_data

    store = Store(tmp_path / "root")
    a = _write(store, "p.g.a", 3)
    client = TestClient(create_app(str(tmp_path / "root")), base_url="http://127.0.0.1",
                        raise_server_exceptions=False)
    assert client.get("/api/run/abcdef").status_code == 404  # a run the root does not hold
    assert client.get(f"/api/run/{a.nonce}?audit=0").status_code == 200

    def broken(*args, **kwargs):
        return {}["a key the code forgot"]

    monkeypatch.setattr(run_data, "run_page", broken)
    assert client.get(f"/api/run/{a.nonce}?audit=0").status_code == 500
