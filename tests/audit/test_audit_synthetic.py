"""audit() on a synthetic 1,000-node run with 20 checkpoints (the bench's root), and CLI bad input; no JAX, fast."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from tests.audit._synthetic import make_synthetic_root
from theseus.audit import audit
from theseus.cli import app
from theseus.store import Store

runner = CliRunner()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("synthetic"))
    return root, make_synthetic_root(root, nodes=1000, checkpoints=20, array_bytes=1024)


def test_a_thousand_nodes_and_twenty_checkpoints(synthetic):
    root, nonce = synthetic
    report = audit(root)
    assert report.ok and report.problems == ()
    [run] = report.runs
    assert (run.nonce, run.nodes, run.first_seq, run.last_seq, run.gaps, run.status) == (
        nonce, 1000, 0, 999, (), "finished")
    assert [c.seq for c in run.checkpoints] == list(range(49, 1000, 50))
    assert all(c.verified and c.changes == () for c in run.checkpoints)
    listed = sum(f["size"] for c in run.checkpoints
                 for f in json.load(open(os.path.join(root, c.path, "MANIFEST.json")))["files"])
    assert report.bytes_verified == listed  # every listed byte hashed, once


def test_a_flipped_byte_in_the_synthetic_root_is_named(synthetic, tmp_path):
    import shutil

    root = str(tmp_path / "copy")
    shutil.copytree(synthetic[0], root)
    store = Store(root)
    node = store.find().checkpoint().all()[7]
    chunk = os.path.join(store.objects(node), "checkpoint", "params", "w2", "c", "0")
    data = bytearray(open(chunk, "rb").read())
    data[0] ^= 1
    open(chunk, "wb").write(bytes(data))
    result = runner.invoke(app, ["audit", root, "--json"])
    assert result.exit_code == 1
    body = json.loads(result.output)
    assert body["ok"] is False
    assert [(p["kind"], p["path"]) for p in body["problems"]] == [("corrupt-file", os.path.relpath(chunk, root))]


def test_cli_bad_input_exits_2_with_a_clear_message(synthetic, tmp_path):
    root, _ = synthetic
    missing = runner.invoke(app, ["audit", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no root at" in missing.output
    unknown = runner.invoke(app, ["audit", root, "abcdef"])
    assert unknown.exit_code == 2 and "no run with nonce 'abcdef'" in unknown.output
    malformed = runner.invoke(app, ["audit", root, "nope"])
    assert malformed.exit_code == 2 and "6 lowercase hex" in malformed.output
    assert runner.invoke(app, ["gc", str(tmp_path / "nowhere")]).exit_code == 2
    assert runner.invoke(app, ["gc", root, "--min-age", "-1"]).exit_code == 2


@pytest.mark.gcs
def test_a_gcs_root_is_audited_through_fsspec(gcs_emulator, tmp_path):
    import fsspec

    from tests.conftest import gcs_bucket_root
    from theseus.audit import gc
    from theseus.store import Node

    local = str(tmp_path / "local")
    nonce = make_synthetic_root(local, nodes=40, checkpoints=4, arrays=1, array_bytes=5 << 20)  # > one read
    url = gcs_bucket_root(gcs_emulator)
    fs, path = fsspec.core.url_to_fs(url)
    fs.put(local + "/", path, recursive=True)
    report = audit(url)
    assert report.ok and report.root == url and len(report.runs[0].checkpoints) == 4
    assert report.bytes_verified == sum(c.hashed for c in report.runs[0].checkpoints) > 4 * (5 << 20)

    store = Store(url)
    chunk = f"{store.path()}/objects/{store.find().checkpoint().all()[1].id}/checkpoint/params/w0/c/0"
    data = bytearray(fs.cat_file(chunk))
    data[-1] ^= 1
    fs.pipe_file(chunk, bytes(data))
    segment = fs.glob(f"{path}/log/*/*/*.parquet")[0]
    whole = fs.cat_file(segment)
    fs.pipe_file(segment, whole[:50])
    garbage = f"{path}/objects/{Node('bench.audit.synthetic', nonce, 77).id}"
    fs.pipe_file(f"{garbage}/checkpoint/index.json", b"{}")
    report = audit(url)
    found = {p.kind: p.path for p in report.problems}
    assert found["corrupt-file"] == chunk[len(path) + 1:]
    assert found["unreadable-segment"] == segment[len(path) + 1:]
    assert found["unreferenced-object"] == garbage[len(path) + 1:]
    with pytest.raises(ValueError, match="cannot be read"):
        gc(url, min_age_s=0)
    fs.pipe_file(segment, whole)
    assert gc(url, min_age_s=0).deleted == (garbage[len(path) + 1:],) and not fs.exists(garbage)


def test_unfinished_runs_gaps_and_inconsistent_parents(tmp_path):
    from theseus.store import Node

    store = Store(str(tmp_path))
    start = Node.start("proj.grp.killed")
    with store.writer() as w:
        w.job(start, "doc/job", "a: 1\n")
        w.write(Node(start.name, start.nonce, 4, Node(start.name, start.nonce, 3).id), {"train/loss": 1.0})
        w.write(Node(start.name, start.nonce, 6, start.id), {"train/loss": 0.5})  # parent is not seq 5
    report = audit(str(tmp_path))
    [run] = report.runs
    assert run.status == "running" and run.gaps == ((1, 3), (5, 5)) and run.last_seq == 6
    found = {p.kind: p for p in report.problems}
    assert found["unfinished-run"].severity == "warning" and "never finished" in found["unfinished-run"].message
    assert found["lineage"].severity == "error" and "seq 6" in found["lineage"].message
    assert not report.ok
    result = runner.invoke(app, ["audit", str(tmp_path)])
    assert "1 integrity failure (1 warning)" in result.output
    assert result.exit_code == 1 and "2 gaps in seq (1-3, 5)" in result.output
