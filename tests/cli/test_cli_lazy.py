"""The ``theseus`` group's table of lazily imported commands says what their modules register."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from theseus.cli import app
from theseus.cli.lazy import COMMANDS, load


def test_the_table_matches_the_modules():
    """Every module of the table registers exactly the commands the table gives it, with the table's help."""
    modules = {entry.module for entry in COMMANDS.values()}
    registered = {name: command for module in modules for name, command in load(module).items()}
    assert sorted(registered) == sorted(COMMANDS)
    for name, command in registered.items():
        assert command.get_short_help_str(10**6) == COMMANDS[name].help, name
        assert name in load(COMMANDS[name].module)


def test_help_lists_every_command_without_importing_their_modules():
    """``theseus --help`` in a fresh interpreter lists each command and imports none of their modules."""
    program = ("import sys; from theseus.cli import app\n"
               "try: app(['--help'], prog_name='theseus')\n"
               "except SystemExit: pass\n"
               f"print(sorted(m for m in {sorted({e.module for e in COMMANDS.values()})!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "200"}).stdout
    assert out.rstrip().endswith("[]"), out
    for name, entry in COMMANDS.items():
        assert f"  {name}  " in out and entry.help.split(" ")[0] in out, name


def test_a_command_runs_and_an_unknown_one_gets_a_suggestion(tmp_path):
    """A lazily listed command runs (its module imported then); a near miss names the command it resembles."""
    result = CliRunner().invoke(app, ["ls", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "no root" in result.output
    result = CliRunner().invoke(app, ["aduit"])
    assert result.exit_code == 2 and "Did you mean 'audit'" in result.output


def test_ls_imports_its_module_only(tmp_path):
    """``theseus ls ROOT`` in a fresh interpreter imports ``theseus.cli.store`` and no other command's module,
    nor pyarrow's compute kernels (the store imports them where it sorts or merges, which listing never does)."""
    from theseus.store import Node, Store

    node = Node.start("lazy.ls.one")
    with Store(str(tmp_path / "root")).writer() as w:
        w.job(node, "gpt/train/pretrain", "lr: 0.1")
        w.write(node.next(), {"train/loss": 1.0})
        w.finished(node.next())
    watched = sorted({e.module for e in COMMANDS.values()} | {"pyarrow.compute"})
    program = ("import sys; from theseus.cli import app\n"
               f"try: app(['ls', {str(tmp_path / 'root')!r}], prog_name='theseus')\n"
               "except SystemExit as e: assert not e.code, e.code\n"
               f"print(sorted(m for m in {watched!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.stdout.rstrip().endswith("['theseus.cli.store']"), done.stdout + done.stderr
