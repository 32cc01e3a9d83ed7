"""The ``theseus`` command: ``app`` (the ``theseus = "theseus.cli:app"`` entry point) and its command groups.

One module per group of commands, each with a ``register(app)``: ``store`` (ls, show,
compact), ``audit`` (audit, gc), ``replay`` (verify, plot), ``dispatch`` (submit, launch,
logs), ``parts`` (the parts of training jobs), ``analyze`` (an analysis of a checkpoint),
``sample`` (text from a checkpoint); ``app`` holds the root command and ``jobs`` / ``run``;
``errors`` is how every command reports bad input; ``lazy`` is the group that imports a
command's module only when that command runs (its table lists them for the help).

>>> from typer.testing import CliRunner
>>> result = CliRunner().invoke(app, ["--help"])
>>> result.exit_code, all(name in result.output for name in ("audit", "compact", "parts", "plot", "sample"))
(0, True)
"""

from theseus.cli.app import app

__all__ = ["app"]
