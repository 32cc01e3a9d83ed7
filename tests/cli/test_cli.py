"""`theseus ls`, `show` and `compact` through the CLI."""

from typer.testing import CliRunner

from tests.store._segments import segment_files
from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()


def make_root(tmp_path):
    store = Store(tmp_path)
    node = first = Node.start("proj.grp.cli-run")
    for step in range(4):
        with store.writer() as w:
            w.write(node, {"train/loss": 5.0 - step, "train/tokens": 100 * step})
            node = node.next()
    with store.writer() as w:
        w.finished(node)
    return store, first


def test_ls_lists_runs_with_metrics(tmp_path):
    _, first = make_root(tmp_path)
    result = runner.invoke(app, ["ls", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert first.nonce in result.output and "cli-run" in result.output
    assert "finished" in result.output and "2" in result.output  # last loss 2.0


def test_show_node_and_run(tmp_path):
    _, first = make_root(tmp_path)
    result = runner.invoke(app, ["show", str(tmp_path), first.id], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "train/loss" in result.output and "5" in result.output
    result = runner.invoke(app, ["show", str(tmp_path), first.nonce], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "status" in result.output and "finished" in result.output
    bad = runner.invoke(app, ["show", str(tmp_path), "not-an-id!"])
    assert bad.exit_code != 0 and "malformed node id" in bad.output


def test_compact_command(tmp_path):
    store, first = make_root(tmp_path)
    before = store.find().nonce(first.nonce).select()
    assert len(segment_files(store)) == 5
    result = runner.invoke(app, ["compact", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "5 segments -> 1" in result.output and "view v-" in result.output
    assert len(segment_files(store)) == 1
    assert Store(tmp_path).find().nonce(first.nonce).select() == before
