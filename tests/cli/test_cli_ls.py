"""`theseus ls` in a terminal: fits 80 columns with the names whole, --wide / --columns for more, --json for scripts,
--watch refreshing in place."""

from __future__ import annotations

import json
import threading
import time

from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()
LONG = "ablations.lr-sweep.train-gpt-lr3e-4-wd0-1-long"  # 46 characters


def make_root(root, names=("general.default.tokenize-pydoc", "general.default.train-gpt", LONG)):
    store = Store(str(root))
    nodes = []
    for name in names:
        node = Node.start(name)
        with store.writer() as w:
            w.job(node, "gpt/train/pretrain", "lr: 0.1")
            for step in range(3):
                node = node.next()
                w.write(node, {"train/loss": 11.4 - step, "val/loss": 11.41, "train/tokens": 3072 * step,
                               "optimization/lr": 3e-4})
            w.finished(node)
        nodes.append(node)
    return nodes


def ls(root, *options, columns=80):
    result = runner.invoke(app, ["ls", str(root), *options], env={"COLUMNS": str(columns)})
    return result.exit_code, result.output


def test_ls_fits_80_columns_with_every_name_whole(tmp_path):
    nodes = make_root(tmp_path)
    code, out = ls(tmp_path)
    assert code == 0, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for node in nodes:
        row = next(line for line in lines if line.startswith(node.name + " "))
        assert node.nonce in row and "finished" in row and "…" not in row
    assert "ago" in out or "now" in out  # relative times, not 2026-12-01 06:11:53
    header = next(line for line in lines if line.startswith("name "))
    assert header.split()[:4] == ["name", "nonce", "status", "written"]
    assert "not shown:" in out  # what did not fit is named, not cut to ellipses
    wider = ls(tmp_path, columns=200)[1]
    assert "not shown" not in wider and "train/loss" in wider and "val/loss" in wider and "nodes" in wider


def test_a_narrow_terminal_drops_columns_before_cutting_a_name(tmp_path):
    make_root(tmp_path)
    code, out = ls(tmp_path, columns=50)
    assert code == 0, out
    assert LONG in out and "status" not in out.splitlines()[1]


def test_wide_shows_every_column_uncut(tmp_path):
    make_root(tmp_path)
    code, out = ls(tmp_path, "--wide")
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.startswith("name "))
    assert header.split() == ["name", "nonce", "status", "written", "train/loss", "val/loss", "nodes", "job",
                              "train/tokens", "last", "seq"]
    assert "gpt/train/pretrain" in out and "6144" in out and "…" not in out and "not shown" not in out


def test_columns_picks_built_in_and_logged_keys(tmp_path):
    make_root(tmp_path)
    code, out = ls(tmp_path, "--columns", "status,optimization/lr", columns=120)
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.startswith("name "))
    assert header.split() == ["name", "nonce", "status", "optimization/lr"] and "0.0003" in out
    code, out = ls(tmp_path, "--columns", "status,optimzation/lr")  # a typo: named, the listing still shown
    assert code == 0 and "'optimzation/lr'" in out and "did you mean 'optimization/lr'" in out
    assert LONG in out
    code, out = ls(tmp_path, "--columns", "status", "--wide")
    assert code == 2 and "exclusive" in out


def test_json_is_every_run_for_scripts(tmp_path):
    nodes = make_root(tmp_path)
    code, out = ls(tmp_path, "--json", "--columns", "optimization/lr")
    assert code == 0, out
    rows = json.loads(out)
    assert sorted(r["nonce"] for r in rows) == sorted(n.nonce for n in nodes)
    row = next(r for r in rows if r["name"] == LONG)
    assert row["status"] == "finished" and row["nodes"] == 4 and row["last_seq"] == 3
    assert row["train/loss"] == 9.4 and row["optimization/lr"] == 3e-4 and row["last_write"].endswith("Z")
    assert ls(tmp_path, "--json", "--watch")[0] == 2


def test_watch_refreshes_until_its_count_and_shows_a_new_run(tmp_path):
    make_root(tmp_path, names=("general.default.first",))
    later = threading.Timer(0.3, lambda: make_root(tmp_path, names=("general.default.appeared-later",)))
    later.start()
    start = time.perf_counter()
    code, out = ls(tmp_path, "--watch", "--interval", "0.2", "--count", "6")
    later.join()
    assert code == 0, out
    assert time.perf_counter() - start >= 1.0  # five waits of 0.2 s between six renders
    assert "general.default.first" in out and "general.default.appeared-later" in out
    assert ls(tmp_path, "--watch", "--interval", "0")[0] == 2
