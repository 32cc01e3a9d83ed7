"""`theseus ls --columns` with config keys as the UI names them, the nonce always kept, an unknown column
a warning rather than the end of the listing; the example in `ls --help` runs; `ls --watch` into a pipe."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

from typer.testing import CliRunner

from tests.cli.test_cli_ls import make_root
from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()


def ls(root, *options):
    result = runner.invoke(app, ["ls", str(root), *options], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def header(out: str) -> list[str]:
    return next(line for line in out.splitlines() if line.startswith("name ")).split()


def test_config_columns_read_each_runs_config(tmp_path):
    store = Store(str(tmp_path))
    for name, lr in (("p.g.small", 0.001), ("p.g.large", 0.01)):
        node = Node.start(name)
        with store.writer() as w:
            w.job(node, "gpt/train/pretrain", f"optimization:\n  lr: {lr}\n  schedule: wsd\n")
            w.write(node, {"train/loss": 1.0})
    code, out = ls(tmp_path, "--columns", "config.optimization.lr,config.optimization.schedule")
    assert code == 0, out
    assert header(out) == ["name", "nonce", "config.optimization.lr", "config.optimization.schedule"]
    small = next(line for line in out.splitlines() if line.startswith("p.g.small"))
    large = next(line for line in out.splitlines() if line.startswith("p.g.large"))
    assert "0.001" in small and "0.01" in large and "wsd" in small


def test_an_unknown_column_is_a_warning_naming_it_and_the_rest_is_listed(tmp_path):
    nodes = make_root(tmp_path)
    code, out = ls(tmp_path, "--columns", "status,config.optimization.nope,no/such/key,train/loss")
    assert code == 0, out
    assert "warning: no run listed has column 'config.optimization.nope'" in out
    assert "warning: no run listed has column 'no/such/key'" in out
    assert header(out) == ["name", "nonce", "status", "train/loss"]
    assert all(n.nonce in out for n in nodes)


def test_the_example_in_ls_help_runs(tmp_path):
    make_root(tmp_path)
    store, tagged = Store(str(tmp_path)), Node.start("p.g.tagged")  # the example's root: one tagged run
    with store.writer() as w:
        w.job(tagged, "gpt/train/pretrain", "optimization:\n  lr: 0.001\n")
        w.write(tagged, {"train/loss": 1.5})
    help_text = runner.invoke(app, ["ls", "--help"], env={"COLUMNS": "300"}).output
    example = re.findall(r"theseus ls /tmp/root [^`\n]+", help_text)
    assert example, help_text
    assert runner.invoke(app, ["tag", str(tmp_path), tagged.nonce, "baseline"]).exit_code == 0
    for line in example:
        args = line.split()[2:]
        args[0] = str(tmp_path)
        code, out = ls(*args)
        assert code == 0 and "warning" not in out, (line, out)
        assert "p.g.tagged" in out and "0.001" in out


def test_watch_into_a_pipe_writes_one_table_per_refresh(tmp_path):
    """Each refresh is written as it comes (read here before the command ends; it is killed, not stopped)."""
    make_root(tmp_path, names=("general.default.piped",))
    process = subprocess.Popen([sys.executable, "-m", "theseus.cli", "ls", str(tmp_path), "--watch", "--interval",
                                "0.3"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = threading.Timer(60, process.kill)  # a command that never writes fails the test, never hangs it
    deadline.start()
    seen = []
    try:
        for line in process.stdout:
            seen.append(line)
            if sum("general.default.piped" in s for s in seen) >= 2:
                break
    finally:
        deadline.cancel()
        process.kill()
        process.wait()
    assert sum("runs in " in s for s in seen) >= 2, "".join(seen)
