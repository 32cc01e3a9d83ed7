"""Errors that came late or not at all: each is raised where the mistake is made, naming it."""

import base64
import os
import shutil

import pytest
from typer.testing import CliRunner

from theseus.audit import audit
from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()


def make_run(root) -> Node:
    first = Node.start("late.errors.run")
    with Store(root).writer() as w:
        w.write(first, {"loss": 1.0})
        w.write(first.next(), {"loss": 0.5})
    return first


def test_a_seq_beyond_int64_is_refused():
    raw = f"general.default.run:abcdef:{10**30}".encode()
    with pytest.raises(ValueError, match="int64"):
        Node.from_id(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    with pytest.raises(ValueError, match="int64"):
        Node("run", "abcdef", 2**63)
    assert Node("run", "abcdef", 2**63 - 1).seq == 2**63 - 1


def test_a_root_that_is_a_file_says_so(tmp_path):
    path = tmp_path / "afile"
    path.write_text("not a root")
    with pytest.raises(NotADirectoryError, match=f"root {path} is a file"):
        Store(path).find().all()


def test_reading_a_missing_root_is_an_error_naming_it_and_a_writer_creates_it(tmp_path):
    missing = tmp_path / "typo"
    store = Store(missing)
    for read in (lambda: store.find().all(), lambda: store.find().select(), store.runs):
        with pytest.raises(FileNotFoundError, match=f"no root at {missing}"):
            read()
    result = runner.invoke(app, ["ls", str(missing)])
    assert result.exit_code == 2 and f"no root at {missing}" in result.output.replace("\n", "")
    assert not missing.exists()  # reading created nothing
    node = Node.start("late.errors.fresh")
    with store.writer() as w:  # the same Store writes the root into being
        w.write(node, {"loss": 1.0})
    assert store.find().all() == [node]


def test_sort_takes_a_bool():
    store = Store("/nonexistent-root-never-read")
    with pytest.raises(ValueError, match="ascending"):
        store.find().sort("loss", ascending="no")


def test_stray_log_folders_are_skipped_by_readers_and_reported_by_audit(tmp_path):
    first = make_run(tmp_path)
    run = tmp_path / "log" / f"name={first.name}" / f"nonce={first.nonce}"
    segment = sorted(os.listdir(run))[0]
    for stray in ("name=/nonce=", f"name={first.name}/nonce=NOTHEX", "name=run/nonce=abcdef"):
        os.makedirs(tmp_path / "log" / stray)
        shutil.copy(run / segment, tmp_path / "log" / stray / segment)
    store = Store(tmp_path)
    assert [n.seq for n in store.find().all()] == [0, 1]
    assert store.find().select(keys=["loss"]) == [{"loss": 1.0}, {"loss": 0.5}]
    assert store.runs().height == 1
    report = audit(str(tmp_path))
    strays = sorted(p.path for p in report.problems if p.kind == "stray-folder")
    assert strays == ["log/name=", f"log/name={first.name}/nonce=NOTHEX", "log/name=run"]
    assert report.ok  # readers skip them: nothing the log holds is lost or changed
