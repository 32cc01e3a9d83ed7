"""Every store command ends with one `error:` line and exit 2 on a root it cannot use, never a
traceback; and a view that cannot be read is ignored by readers and replaced by compaction."""

import errno
import os

import pytest
from loguru import logger
from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import Node, Store, listing
from theseus.store import fs as rootfs

runner = CliRunner()
COMMANDS = (["ls"], ["show", "abcdef"], ["compact"], ["audit"], ["gc"])


def make_runs(root, runs: int = 3, flushes: int = 2) -> list[Node]:
    store, firsts = Store(root), []
    for r in range(runs):
        node = Node.start(f"cli.errors.run{r}")
        firsts.append(node)
        for _ in range(flushes):
            with store.writer() as w:
                for _ in range(50):
                    w.write(node, {"loss": 1.0 / (1 + node.seq)})
                    node = node.next()
    return firsts


def invoke(command: list[str], root) -> tuple[int, str]:
    result = runner.invoke(app, [command[0], str(root), *command[1:]], env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (command, result.exception)
    return result.exit_code, result.output.replace("\n", "")


def test_a_missing_root(tmp_path):
    for command in COMMANDS:
        code, out = invoke(command, tmp_path / "nowhere")
        assert code == 2 and out.startswith("error: ") and f"{tmp_path}/nowhere" in out, (command, out)


def test_a_corrupt_segment(tmp_path):
    first = make_runs(tmp_path)[0]
    bad = (tmp_path / "log" / f"name={first.name}" / f"nonce={first.nonce}"
           / "s-9999999999999999999-bad00000-000000.parquet")
    bad.write_bytes(b"PAR1 not parquet PAR1")
    for command in (["show", first.nonce], ["compact"], ["gc"]):
        code, out = invoke(command, tmp_path)
        assert code == 2 and out.startswith("error: ") and bad.name in out, (command, out)
    # the listing costs the bad run only: the others are listed and the bad one is named with its file
    code, out = invoke(["ls"], tmp_path)
    assert code == 0 and "cli.errors.run1" in out and "cli.errors.run2" in out, out
    assert f"warning: run {first.name}:{first.nonce} left out" in out and bad.name in out, out
    code, out = invoke(["audit"], tmp_path)
    assert code == 1 and "unreadable-segment" in out and bad.name in out  # a finding, not a crash


def test_an_unwritable_root(tmp_path, monkeypatch):
    make_runs(tmp_path)

    # what a read-only root answers (root users are never refused by chmod)
    def refuse(fs, path, data, exclusive=False):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(rootfs, "publish", refuse)
    code, out = invoke(["compact"], tmp_path)
    assert code == 2 and out.startswith("error: PermissionError: [Errno 13] Permission denied") and str(tmp_path) in out


def test_an_unreadable_folder(tmp_path, monkeypatch):
    make_runs(tmp_path)

    def broken(path):
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr(listing, "_scandir", broken)
    for command in (["ls"], ["compact"]):
        code, out = invoke(command, tmp_path)
        assert code == 2 and out.startswith("error: OSError: [Errno 5] Input/output error") and str(tmp_path) in out


@pytest.fixture
def warnings():
    found = []
    sink = logger.add(lambda message: found.append(str(message)), level="WARNING")
    yield found
    logger.remove(sink)


@pytest.mark.parametrize("damage", ["garbage", "flipped"])
def test_an_unreadable_view_is_ignored_by_readers_and_replaced_by_compaction(tmp_path, warnings, damage):
    firsts = make_runs(tmp_path, runs=12)  # enough runs for whole-root queries to read the view
    Store(tmp_path).compact()
    expected = Store(tmp_path).find().where("loss", "<", 0.05).sort("loss").select(keys=["loss"])
    [view] = os.listdir(tmp_path / "view")
    if damage == "garbage":  # a newer view that is not Parquet at all
        bad = tmp_path / "view" / "v-9999999999999999999-forged00.parquet"
        bad.write_bytes(b"not a view")
    else:  # the newest view with its data pages damaged, its footer intact
        bad = tmp_path / "view" / view
        data = bytearray(bad.read_bytes())
        footer = int.from_bytes(data[-8:-4], "little") + 8
        for offset in range(4, len(data) - footer, 7):
            data[offset] ^= 0xFF
        bad.write_bytes(bytes(data))

    store = Store(tmp_path)
    assert store.find().where("loss", "<", 0.05).sort("loss").select(keys=["loss"]) == expected
    assert len(store.find().all()) == 12 * 100 and store.find().nonce(firsts[0].nonce).last().seq == 99
    assert any(bad.name in w and "ignoring an unreadable view" in w for w in warnings)
    code, out = invoke(["compact"], tmp_path)
    assert code == 0, out
    if damage == "garbage":  # a view that does not parse: the next compaction replaces it
        assert bad.name not in os.listdir(tmp_path / "view") and len(os.listdir(tmp_path / "view")) == 1
    warnings.clear()
    assert Store(tmp_path).find().where("loss", "<", 0.05).sort("loss").select(keys=["loss"]) == expected
    assert damage != "garbage" or not warnings


@pytest.mark.parametrize("command", [["run", "data/tokenize/pydoc", "tok", "{root}"],
                                     ["analyze", "{root}", "abcdef", "-a", "attention"], ["verify", "{root}", "abcdef"],
                                     ["sample", "{root}", "abcdef", "The"], ["eval", "{root}", "abcdef"]])
def test_an_unknown_log_level_is_one_error_line(tmp_path, command):
    args = [str(tmp_path) if arg == "{root}" else arg for arg in command]
    result = runner.invoke(app, [*args, "--log-level", "chatty"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --log-level: unknown log level 'CHATTY' (TRACE, DEBUG, INFO, SUCCESS, WARNING, ERROR, CRITICAL)"]
