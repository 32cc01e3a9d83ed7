"""The TensorBoard sink: a run's reports as scalar events (tensorboardX), under ``<folder>/<name>/<nonce>``.

Each key is a scalar tag at the report's step; the run's name, nonce and config are
text summaries (``theseus/run``, ``theseus/config``). ``tensorboard --logdir <folder>``
shows every mirrored or exported run, labelled ``<name>/<nonce>``. The folder defaults
to ``runs`` in the working directory, as tensorboardX's own. A live mirror's event file
grows as the run reports (TensorBoard reads a growing file); an export's `EventFile` is
published whole, so an interrupted export leaves no event file at all.

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
import socket
import time
import uuid
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


def run_texts(run: MirrorRun) -> dict[str, str]:
    """The text summaries of ``run`` at step 0: its name and nonce (JSON), its config (YAML as a markdown code block).

    >>> run_texts(MirrorRun("p.g.r", "abc123", {"lr": 0.1}))
    {'theseus/run': '{"name": "p.g.r", "nonce": "abc123"}', 'theseus/config': '    lr: 0.1\\n    '}
    """
    config = yaml.safe_dump(dict(run.config), sort_keys=False)
    return {"theseus/run": json.dumps({"name": run.name, "nonce": run.nonce}),
            "theseus/config": "    " + config.replace("\n", "\n    ")}


def is_event_file(name: str) -> bool:
    """Whether TensorBoard's loader reads the file ``name`` (it reads every name that holds ``tfevents``).

    >>> is_event_file("events.out.tfevents.1700000000.host"), is_event_file(".export.0123abcd.tmp")
    (True, False)
    """
    return "tfevents" in os.path.basename(name)


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
        for tag, text in run_texts(run).items():
            self.writer.add_text(tag, text, 0)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        self.writer.close()


class EventFile:
    """A run's event file published whole (what ``theseus export`` writes): ``log`` adds one scalar per key at
    ``step`` to a temporary file in the run's folder that TensorBoard's loader skips (``.export.<hex>.tmp``);
    ``close`` fsyncs it and links it to tensorboardX's name (``events.out.tfevents.<time>.<host>``); ``discard``
    removes it. A reader sees every event of the run or no event file.

    >>> import tempfile
    >>> events = EventFile(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp()))
    >>> events.log(1, {"a": 1.0}); [is_event_file(n) for n in os.listdir(events.folder)]
    [False]
    >>> [is_event_file(n) for n in os.listdir(os.path.dirname(events.close()))]
    [True]
    """

    def __init__(self, run: MirrorRun):
        from tensorboardX import summary  # the optional `remote` group: only when exporting
        from tensorboardX.record_writer import RecordWriter

        self.summary = summary
        self.folder = run_folder(run)
        os.makedirs(self.folder, exist_ok=True)
        self.temporary = os.path.join(self.folder, f".export.{uuid.uuid4().hex[:8]}.tmp")
        self.records = RecordWriter(self.temporary)
        try:
            self._write(file_version="brain.Event:2")  # the header event every event file starts with
            for tag, text in run_texts(run).items():
                self._write(step=0, summary=summary.text(tag, text))
        except BaseException:
            self.discard()
            raise

    def _write(self, **fields) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self.records.write(Event(wall_time=time.time(), **fields).SerializeToString())

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self._write(step=step, summary=self.summary.scalar(key, value))

    def close(self) -> str:
        """Publish the event file; returns its path."""
        self.records.flush()  # fsyncs the temporary
        self.records.close()
        final = os.path.join(self.folder, f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}")
        os.link(self.temporary, final)  # unlike rename, fails when the name exists
        os.unlink(self.temporary)
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)  # the new name is durable
        finally:
            os.close(folder)
        return final

    def discard(self) -> None:
        """Remove the temporary file: nothing of this run is left for a reader."""
        self.records.close()
        if os.path.exists(self.temporary):
            os.unlink(self.temporary)


def open_run(run: MirrorRun) -> TensorBoardSink:
    """The sink of ``run`` (`BACKENDS`'s opener for ``tensorboard``).

    >>> import tempfile
    >>> open_run(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp())).close()
    """
    return TensorBoardSink(run)
