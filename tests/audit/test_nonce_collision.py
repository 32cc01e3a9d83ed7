"""A root that already holds a nonce collision (two names, or two lineages of one name, under one nonce:
two roots merged by copying, or records written by hand) is reported by `theseus audit`, listed as
separate runs, and refused with both names by the readers that take a nonce for one run."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from theseus.audit import audit
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Node, Store
from theseus.store.nonces import AmbiguousNonce

NONCE = "c0111d"
A, B = "proj.clash.alpha", "proj.clash.beta"
runner = CliRunner()


def merged(tmp_path, *lineages: tuple[str, float]) -> str:
    """A root holding each ``(name, loss)`` lineage under NONCE, each written in a root of its own (where
    the nonce is unique) and copied in, as merging two roots does."""
    root = tmp_path / "root"
    for i, (name, loss) in enumerate(lineages):
        scratch = Store(tmp_path / f"scratch{i}")
        node = Node(name, NONCE, 0)
        with scratch.writer() as w:
            w.job(node, "doc/job", f"lr: {loss}\n")
            w.write(node, {"train/loss": loss})
            w.write(node.next(), {"train/loss": loss / 2})
        shutil.copytree(scratch.path("log"), root / "log", dirs_exist_ok=True)
    return str(root)


def test_audit_reports_two_names_under_one_nonce_and_keeps_their_runs_apart(tmp_path):
    report = audit(merged(tmp_path, (A, 1.0), (B, 2.0)))
    clashes = [p for p in report.errors if p.kind == "nonce-collision"]
    assert sorted(p.path for p in clashes) == [f"{A}:{NONCE}", f"{B}:{NONCE}"]
    assert all(A in p.message and B in p.message for p in clashes)
    assert not report.ok
    assert sorted((r.name, r.nonce, r.nodes, r.job) for r in report.runs) == [
        (A, NONCE, 2, "doc/job"), (B, NONCE, 2, "doc/job")]


def test_audit_reports_two_lineages_of_one_name_under_one_nonce(tmp_path):
    report = audit(merged(tmp_path, (A, 1.0), (A, 2.0)))
    clashes = [p for p in report.errors if p.kind == "nonce-collision"]
    assert [p.path for p in clashes] == [f"{A}:{NONCE}"] and "2 lineages" in clashes[0].message


def test_the_cli_audit_fails_naming_the_collision(tmp_path):
    result = runner.invoke(app, ["audit", merged(tmp_path, (A, 1.0), (B, 2.0)), "--no-checksums"])
    assert result.exit_code != 0 and "nonce-collision" in result.output and B in result.output


def test_readers_of_one_run_by_nonce_refuse_it_naming_both_and_listings_keep_both(tmp_path):
    root = merged(tmp_path, (A, 1.0), (B, 2.0))
    store = Store(root)
    for read in (lambda: store.run_record(NONCE), lambda: store.find().nonce(NONCE).last(),
                 lambda: store.find().nonce(NONCE).first()):
        with pytest.raises(AmbiguousNonce, match=rf"{A}, {B} .*node id"):
            read()
    assert store.run_record(NONCE, name=B)["name"] == B
    assert store.find().name(A).nonce(NONCE).last().id == Node(A, NONCE, 1).id
    with quick(root) as q, pytest.raises(AmbiguousNonce, match=B):
        q.find().nonce(NONCE).resume()
    result = runner.invoke(app, ["show", root, NONCE])
    assert result.exit_code == 2 and A in result.output and B in result.output and "node id" in result.output
    node = runner.invoke(app, ["show", root, Node(B, NONCE, 1).id])
    assert node.exit_code == 0 and f"node {B} nonce={NONCE} seq=1" in node.output  # a node id names one run
    runs = Store(root).runs().sort("name")  # listings show them as separate runs
    assert runs.select("name", "nonce", "nodes").rows() == [(A, NONCE, 2), (B, NONCE, 2)]
    assert runs["train/loss"].to_list() == [0.5, 1.0]
    listed = runner.invoke(app, ["ls", root, "--json"])
    assert listed.exit_code == 0 and listed.output.count(NONCE) == 2
    with store.writer() as w:  # a run with records goes on by its nodes, whoever else shares its nonce
        w.write(Node(A, NONCE, 2, Node(A, NONCE, 1).id), {"train/loss": 0.25})
    assert store.find().name(A).nonce(NONCE).last().seq == 2


@pytest.mark.slow
def test_sample_and_eval_by_nonce_refuse_it(tmp_path):
    from theseus.replay.restore import checkpoint_for

    with pytest.raises(AmbiguousNonce, match=rf"{A}, {B}"):
        checkpoint_for(merged(tmp_path, (A, 1.0), (B, 2.0)), NONCE)


def test_the_ui_names_both_runs_instead_of_merging_them(tmp_path):
    from theseus.ui.follow import Follower
    from theseus.ui.run import run_page
    from theseus.ui.table import row

    store = Store(merged(tmp_path, (A, 1.0), (B, 2.0)))
    follower = Follower(store)
    follower.poll()
    with pytest.raises(AmbiguousNonce, match=rf"{A}, {B}"):
        run_page(store, follower, NONCE, with_audit=False)
    assert A in row(follower.runs[NONCE])["error"] and B in row(follower.runs[NONCE])["error"]
