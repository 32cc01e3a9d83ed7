"""`theseus audit` and `theseus gc` through the CLI on a root with real training runs."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import Node, Store

pytestmark = pytest.mark.slow  # the session fixture trains three tiny runs

runner = CliRunner()


def test_human_report_of_a_clean_root(built):
    result = runner.invoke(app, ["audit", built.root])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "OK: no integrity failures" in out
    assert f"general.default.train-gpt:{built.main}" in out and "lineage: seq 0..8, 9 nodes, no gaps" in out
    assert "resumed at seq 7 from seq 6 (checkpoint ok)" in out
    assert f"branched from general.default.train-gpt:{built.main} seq 3" in out
    assert "training.tokens: 768 -> 1024" in out and "optimization.lr: 0.0003 -> 0.001" in out
    assert "failed-run" in out and "RuntimeError: boom" in out
    assert "checksums ok" in out


def test_corrupt_checkpoint_fails_with_the_file_named(copy_root, built):
    root = copy_root()
    store = Store(root)
    folder = store.objects(store.find().nonce(built.branch).checkpoint().first())
    index = os.path.join(folder, "checkpoint", "index.json")
    data = bytearray(open(index, "rb").read())
    data[3] = ord("X") if data[3] != ord("X") else ord("Y")
    open(index, "wb").write(bytes(data))
    result = runner.invoke(app, ["audit", root])
    assert result.exit_code == 1
    assert os.path.relpath(index, root) in result.output and "FAILED: 1 integrity failure" in result.output
    as_json = runner.invoke(app, ["audit", root, built.branch, "--json"])
    assert as_json.exit_code == 1
    body = json.loads(as_json.output)
    assert body["ok"] is False and [r["nonce"] for r in body["runs"]] == [built.branch]
    assert body["problems"][0]["path"] == os.path.relpath(index, root)


def test_json_report_parses(built):
    result = runner.invoke(app, ["audit", built.root, "--json"])
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert body["ok"] is True and len(body["runs"]) == 3
    main = next(r for r in body["runs"] if r["nonce"] == built.main)
    assert [c["seq"] for c in main["checkpoints"]] == [3, 6, 8]
    assert main["checkpoints"][2]["changes"] == [{"key": "training.tokens", "before": 768, "after": 1024}]
    assert main["checkpoints"][0]["config"]["architecture"]["n_embd"] == 16


def test_gc_dry_run_then_delete(copy_root, built):
    root = copy_root()
    garbage = Store(root).objects(Node("general.default.train-gpt", built.main, 42))
    os.makedirs(os.path.join(garbage, "checkpoint"))
    open(os.path.join(garbage, "config.yaml"), "w").write("a: 1\n")
    rel = os.path.relpath(garbage, root)
    audited = runner.invoke(app, ["audit", root])
    assert audited.exit_code == 0 and rel in audited.output and "unreferenced-object" in audited.output
    kept = runner.invoke(app, ["gc", root])
    assert kept.exit_code == 0 and f"kept {rel}: written" in kept.output and os.path.exists(garbage)
    dry = runner.invoke(app, ["gc", root, "--dry-run", "--min-age", "0"])
    assert dry.exit_code == 0 and f"would delete {rel}" in dry.output and os.path.exists(garbage)
    done = runner.invoke(app, ["gc", root, "--min-age", "0"])
    assert done.exit_code == 0 and f"deleted {rel}" in done.output and "deleted 1 folder " in done.output
    assert not os.path.exists(garbage)
    assert runner.invoke(app, ["audit", root]).exit_code == 0
