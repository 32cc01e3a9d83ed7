"""The TensorBoard sink: a run's reports as scalar events (tensorboardX), under ``<folder>/<name>/<nonce>``.

Each key is a scalar tag at the report's step; the run's name, nonce and config are
text summaries (``theseus/run``, ``theseus/config``). ``tensorboard --logdir <folder>``
shows every mirrored or exported run, labelled ``<name>/<nonce>``. The folder defaults
to ``runs`` in the working directory, as tensorboardX's own.

>>> import tempfile
>>> from theseus.mirror.sinks import MirrorRun
>>> sink = open_run(MirrorRun("p.g.r", "abc123", {"lr": 0.1}, folder=tempfile.mkdtemp()))
>>> sink.log(3, {"train/loss": 2.5}); sink.close()
>>> sink.folder.endswith("p.g.r/abc123")
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import yaml

from theseus.mirror.sinks import MirrorRun

#: where event files go when ``logging.remote_dir`` is empty (tensorboardX's default folder)
DEFAULT_FOLDER = "runs"


def run_folder(run: MirrorRun) -> str:
    """The folder of ``run``'s event files: ``<folder or runs>/<name>/<nonce>``.

    >>> run_folder(MirrorRun("p.g.r", "abc123", {}, folder="/tmp/tb"))
    '/tmp/tb/p.g.r/abc123'
    """
    return os.path.join(run.folder or DEFAULT_FOLDER, run.name, run.nonce)


class TensorBoardSink:
    """A run's event file: ``log`` adds one scalar per key at ``step``; ``close`` flushes it.

    >>> import tempfile
    >>> sink = TensorBoardSink(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp()))
    >>> sink.log(1, {"a": 1.0}); sink.close(); len(os.listdir(sink.folder))
    1
    """

    def __init__(self, run: MirrorRun):
        from tensorboardX import SummaryWriter  # the optional `remote` group: imported only when a run mirrors

        self.folder = run_folder(run)
        self.writer = SummaryWriter(logdir=self.folder)
        self.writer.add_text("theseus/run", json.dumps({"name": run.name, "nonce": run.nonce}), 0)
        config = yaml.safe_dump(dict(run.config), sort_keys=False)
        self.writer.add_text("theseus/config", "    " + config.replace("\n", "\n    "), 0)  # a markdown code block

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        self.writer.close()


def open_run(run: MirrorRun) -> TensorBoardSink:
    """The sink of ``run`` (`BACKENDS`'s opener for ``tensorboard``).

    >>> import tempfile
    >>> open_run(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp())).close()
    """
    return TensorBoardSink(run)
