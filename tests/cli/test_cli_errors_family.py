"""Only the error family's kinds are the caller's mistake: in the CLI (exit 2, one line) and in the UI
(404 for what the root does not hold, 400 for the other kinds); any other error is a bug (a traceback
and exit 70, or a 500), whichever command or route it escapes from."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from theseus.cli.app import app
from theseus.errors import EXIT_BUG, BadInput, NotFound, TheseusError
from theseus.store import Node, Store
from theseus.ui.api import Api, routes_app


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def _broken(*args, **kwargs):
    raise KeyError("step")  # no check raises this: a bug inside the command


def _one_run(root) -> Node:
    node = Node.start("errors.family.run")
    with Store(root).writer() as w:
        w.write(node, {"train/loss": 1.0})
    return node


@pytest.mark.parametrize("command, target", [
    (["show", "{root}", "abcdef"], "theseus.store.Store.run_record"),  # a reported() command
    (["logs", "{root}", "abcdef"], "theseus.cli.dispatch.find_logs"),  # a command with its own catch
    (["parts", "optimizer"], "theseus.catalog.parts"),  # one that catches its bad input itself
    (["ls", "{root}"], "theseus.cli.store.Store"),  # the store the command opens
])
def test_an_internal_key_error_is_a_bug_with_its_traceback(tmp_path, monkeypatch, command, target):
    monkeypatch.setattr(target, _broken)
    result = invoke(*(part.format(root=tmp_path) for part in command))
    assert result.exit_code == EXIT_BUG == 70, result.output
    assert "Traceback" in result.output and "KeyError: 'step'" in result.output
    assert "is a bug in theseus, not bad input" in result.output


@pytest.mark.parametrize("args, says", [
    (["ls", "nosuch://root"], "root 'nosuch://root': Protocol not known: nosuch"),  # fsspec's ValueError, wrapped
    (["parts", "optimiser"], "unknown part kind 'optimiser'"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and says in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_not_found_is_one_line_naming_what_is_missing(tmp_path):
    _one_run(tmp_path)
    result = invoke("show", str(tmp_path), "abcdef")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.startswith("error: ") and "abcdef" in result.output
    missing = invoke("ls", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and f"no root at {tmp_path}/nowhere" in missing.output


def test_an_unknown_cluster_is_not_found_printed_unquoted(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"clusters: [{{name: lab, root: {tmp_path}/r, work_dir: {tmp_path}/w}}]\nhosts: []\n")
    result = invoke("submit", "gpt/train/pretrain", "r", "--inventory", str(inventory), "--cluster", "lba")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: no cluster 'lba' in the inventory (clusters: lab)"), result.output


def test_the_ui_answers_404_400_and_500_by_kind(tmp_path, monkeypatch):
    node = _one_run(tmp_path)
    client = TestClient(routes_app(Api(Store(tmp_path))), raise_server_exceptions=False)
    assert client.get(f"/api/run/{node.nonce}").status_code == 200
    missing = client.get("/api/run/abcdef")
    assert missing.status_code == 404 and "abcdef" in missing.json()["error"]
    bad = client.get("/api/run/ABCDEF")
    assert bad.status_code == 400 and "6 lowercase hex" in bad.json()["error"]
    assert client.post("/api/filter", content=b"{not json").status_code == 400
    assert client.post("/api/filter", json={"conditions": "train/loss < 1"}).status_code == 400  # not a list
    assert client.get("/api/poll?since=yesterday").status_code == 400
    assert client.get(f"/api/series?runs={node.nonce}&keys=train/loss&since={node.nonce}:x").status_code == 400
    monkeypatch.setattr("theseus.ui.run.run_page", _broken)
    assert client.get(f"/api/run/{node.nonce}").status_code == 500  # a bug, not a missing run


def test_an_unreadable_config_json_is_bad_input_and_writes_nothing(tmp_path):
    folder, root = tmp_path / "model", tmp_path / "root"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    result = invoke("import", "hf", str(folder), str(root))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.startswith(f"error: {folder}/config.json is not JSON") and not root.exists()


def test_tags_rewritten_by_others_are_a_failure_of_the_outside_world(tmp_path, monkeypatch):
    """Tags other taggers keep overwriting (here: no attempt left) end in one line and exit 1: no bug, no bad input."""
    node = _one_run(tmp_path)
    monkeypatch.setattr("theseus.store.marks.ATTEMPTS", 0)
    result = invoke("tag", str(tmp_path), node.nonce, "best")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.startswith(f"error: Contended: run {node.nonce}: other processes kept rewriting its tags")


def test_the_kinds_keep_the_builtin_bases_callers_catch():
    from theseus.store.cursor import EmptyResult, UnknownKey
    from theseus.store.segments import CorruptSegment

    assert issubclass(EmptyResult, NotFound) and issubclass(EmptyResult, LookupError)
    assert issubclass(UnknownKey, BadInput) and issubclass(UnknownKey, ValueError)
    assert issubclass(CorruptSegment, TheseusError) and issubclass(CorruptSegment, ValueError)


def test_a_refused_flush_is_a_failure_of_the_outside_world(tmp_path, monkeypatch):
    """An error of the family that is no kind of bad input (a flush the disk refused) is neither exit 2
    nor a bug: one line and exit 1."""
    from theseus.store.writer import FlushError

    def refused(*args, **kwargs):
        raise FlushError("no space left on the device")

    monkeypatch.setattr("theseus.cli.store.Store", refused)
    result = invoke("ls", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "FlushError: no space left" in result.output and "Traceback" not in result.output
