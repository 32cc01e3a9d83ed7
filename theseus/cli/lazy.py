"""The ``theseus`` command group that imports a command's module only when that command runs.

Each command module imports what its commands need (the store, OmegaConf, Starlette,
matplotlib...), so importing them all to register every command would make ``theseus
--help`` and ``theseus ls`` pay for ``audit``, ``ui`` and ``dispatch``. ``COMMANDS`` names
each command's module and its one-line help: the group's help lists them from this table,
and a command's module is imported (its ``register(app)`` run) when the command is looked
up, to run or to print its own help. ``tests/cli/test_cli_lazy.py`` checks the table
against the modules' real commands. The app's help is click's plain text (``rich_markup_mode=None``):
typer's rich help would look every command up, importing them all, and loads a Markdown
renderer besides.

>>> from typer.testing import CliRunner
>>> app = typer.Typer(cls=LazyGroup, rich_markup_mode=None)
>>> app.callback()(lambda: None)  # a group, not one command
<function <lambda> at ...>
>>> @app.command()
... def hello() -> None:
...     '''Say hello.'''
>>> result = CliRunner().invoke(app, ["--help"])
>>> "Say hello." in result.output and "List the runs of a root" in result.output
True
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, NamedTuple

import typer
import typer.main
from typer._click.exceptions import UsageError  # click's, which typer vendors and does not re-export
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from theseus.cli.errors import report


class Lazy(NamedTuple):
    """Where a command is registered (a module with ``register(app)``) and its one-line help.

    >>> COMMANDS["ls"].module
    'theseus.cli.store'
    """

    module: str
    help: str


#: Command name -> its module and one-line help, in the order ``theseus --help`` lists them.
COMMANDS: dict[str, Lazy] = {
    "ls": Lazy("theseus.cli.store", "List the runs of a root: name, nonce, status, last write, latest metrics, tags; "
                                    "fits the terminal's width."),
    "show": Lazy("theseus.cli.store", "Show one node (folded) or one run (its reserved fields and last metrics)."),
    "compact": Lazy("theseus.cli.store", "Merge each run's small log segments into one and refresh the view (safe "
                                         "while others read and write)."),
    "tag": Lazy("theseus.cli.manage", "Add tags to a run (they add up across calls); ``theseus ls --tag TAG`` lists "
                                      "the runs tagged so."),
    "untag": Lazy("theseus.cli.manage", "Remove tags from a run (a new record of its tag set: nothing is deleted)."),
    "note": Lazy("theseus.cli.manage", "Set a run's note (the latest note is the run's; ``theseus show`` and the UI "
                                       "show it)."),
    "hide": Lazy("theseus.cli.manage", "Hide a run from ``theseus ls`` and the UI's runs page (``--all``, \"hidden "
                                       "too\" show it); nothing is deleted."),
    "unhide": Lazy("theseus.cli.manage", "List a hidden run again."),
    "audit": Lazy("theseus.cli.audit", "Check a root offline: lineages, checkpoints against their MANIFEST, configs, "
                                       "failed runs, garbage."),
    "gc": Lazy("theseus.cli.audit", "Delete object folders no checkpoint record references, retired checkpoints' "
                                    "files and temporary files."),
    "verify": Lazy("theseus.cli.replay", "Restore NODE_ID's checkpoint, replay N steps and compare with the logged "
                                         "train/loss."),
    "sample": Lazy("theseus.cli.sample", "Print N samples continuing PROMPT from the checkpoint of NODE_ID, or of a "
                                         "run's last one (its NONCE)."),
    "eval": Lazy("theseus.cli.evaluate", "Evaluate NODE_ID's checkpoint (or a run's last, by NONCE) on TASKS; write "
                                         "the results as a new lineage."),
    "plot": Lazy("theseus.cli.plot", "Plot runs' metrics to a PNG: one line per (run, key)."),
    "launch": Lazy("theseus.cli.dispatch", "Run JOB_KEY as RUN_NAME in ROOT as N local processes under "
                                           "jax.distributed."),
    "submit": Lazy("theseus.cli.dispatch", "Run JOB_KEY as RUN_NAME on a host of the inventory that has N x CHIP."),
    "logs": Lazy("theseus.cli.dispatch", "Print the output of every process of every launch of run NONCE."),
    "parts": Lazy("theseus.cli.parts", "List the parts training jobs are composed of: kind, name, config section and "
                                       "keys, description."),
    "analyze": Lazy("theseus.cli.analyze", "Run one analysis on NODE_ID's checkpoint: the picture to -o, the scalars "
                                           "printed; nothing written to ROOT."),
    "export": Lazy("theseus.cli.export", "Write runs of ROOT in another tool's format."),
    "import": Lazy("theseus.cli.importing", "Import another tool's model as a run of a root: hf (a Hugging Face "
                                            "folder), peft (a LoRA adapter over a model of the root)."),
    "ui": Lazy("theseus.cli.ui", "Serve a web app over ROOT: runs, charts, run and node pages, updated live."),
}


def load(module: str) -> dict[str, Any]:
    """The commands ``module`` registers (its ``register(app)`` run on an app of its own), by name.

    >>> sorted(load("theseus.cli.audit"))
    ['audit', 'gc']
    """
    app = typer.Typer()
    importlib.import_module(module).register(app)
    return dict(typer.main.get_group(app).commands)


class LazyGroup(TyperGroup):
    """A Typer group that also holds the commands of ``COMMANDS``, each module imported on first look-up.

    >>> group = typer.main.get_group(typer.Typer(cls=LazyGroup))
    >>> group.list_commands(None)[:2], "ls" in group.commands
    (['ls', 'show'], False)
    >>> group.get_command(None, "ls").name, "show" in group.commands  # its module's other commands came along
    ('ls', True)
    """

    def list_commands(self, ctx: Any) -> list[str]:
        """The group's own commands, then those of ``COMMANDS`` (none imported)."""
        return [*super().list_commands(ctx), *(name for name in COMMANDS if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, its module imported and registered first when it is one of ``COMMANDS``."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            for name, command in load(COMMANDS[cmd_name].module).items():
                self.commands.setdefault(name, command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; an error that reached here unreported is answered by ``report``: the error
        family's line and exit code, or, raised by no check, a bug's traceback and exit code 70."""
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):  # the command's own exit code, a usage error
            raise
        except Exception as e:  # noqa: BLE001 - report() tells a check's error from a bug
            report(e)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """The command ``args`` names; an unknown one's error suggests close names among all of them."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as e:
            close = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if close and "Did you mean" not in e.message:
                e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(map(repr, close))}?"
            raise

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands' section of the help: a command not imported yet shows its help from ``COMMANDS``."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = []
        for name in names:
            command = self.commands.get(name) or TyperCommand(name, help=COMMANDS[name].help)
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
