"""The TensorBoard sink: a run's reports as scalar events, under ``<folder>/<name>/<nonce>``.

Each key is a scalar tag at the report's step; the run's name, nonce and config are
text summaries (``theseus/run``, ``theseus/config``). ``tensorboard --logdir <folder>``
shows every mirrored or exported run, labelled ``<name>/<nonce>``. The folder defaults
to ``runs`` in the working directory, as tensorboardX's own. Events are framed by the
``tensorboard`` package's record writer and protos, which import without torch (tensorboardX
imports it), so a mirror or an export starts at once. A live mirror's event file grows as
the run reports (TensorBoard reads a growing file); an export's `EventFile` is published
whole, so an interrupted export leaves no event file at all.

>>> import tempfile
>>> from theseus.mirror.sinks import MirrorRun
>>> sink = open_run(MirrorRun("p.g.r", "abc123", {"lr": 0.1}, folder=tempfile.mkdtemp()))
>>> sink.log(3, {"train/loss": 2.5}); sink.close()
>>> sink.folder.endswith("p.g.r/abc123")
True
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Mapping

import yaml

from theseus.mirror.sinks import MirrorRun

#: where event files go when ``logging.remote_dir`` is empty (tensorboardX's default folder)
DEFAULT_FOLDER = "runs"

#: characters a scalar tag may not hold (each becomes ``_``), as TensorBoard's summary ops clean them
NOT_IN_TAGS = re.compile(r"[^-/\w.]")


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


def event_file_name(folder: str, taken: int = 0) -> str:
    """The event file of ``folder`` opened now: ``events.out.tfevents.<time>.<host>`` (tensorboardX's name), with
    ``.<taken>`` after it when ``taken`` earlier names of that second exist.

    >>> name = event_file_name("/tmp/tb", taken=1)
    >>> name.startswith("/tmp/tb/events.out.tfevents."), name.endswith(f".{socket.gethostname()}.1")
    (True, True)
    """
    name = os.path.join(folder, f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}")
    return f"{name}.{taken}" if taken else name


def scalar_summary(tag: str, value: float):
    """A ``Summary`` of one scalar (a float32 ``simple_value``) at ``tag``, its characters TensorBoard disallows as
    ``_``.

    >>> scalar_summary("val/loss@1k", 2.5).value[0].tag, scalar_summary("a", 2.5).value[0].simple_value
    ('val/loss_1k', 2.5)
    """
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=NOT_IN_TAGS.sub("_", tag).lstrip("/"), simple_value=float(value))])


def text_summary(tag: str, text: str):
    """A ``Summary`` of ``text`` for TensorBoard's text plugin, at ``<tag>/text_summary`` (tensorboardX's tag).

    >>> value = text_summary("theseus/run", "hello").value[0]
    >>> value.tag, value.metadata.plugin_data.plugin_name, value.tensor.string_val
    ('theseus/run/text_summary', 'text', [b'hello'])
    """
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

    plugin = SummaryMetadata.PluginData(plugin_name="text", content=TextPluginData(version=0).SerializeToString())
    tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode()],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=SummaryMetadata(plugin_data=plugin),
                                        tensor=tensor)])


class EventStream:
    """A run's events framed as TFRecords into a new file ``path`` (never one that exists): the header event and
    the run's texts at once, ``log`` one scalar per key at ``step``, ``sync_close`` fsyncs and closes the file.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "events.out.tfevents.0.doc")
    >>> stream = EventStream(MirrorRun("p.g.r", "abc123", {}), path)
    >>> stream.log(1, {"a": 1.0}); stream.sync_close(); os.path.getsize(path) > 0
    True
    """

    def __init__(self, run: MirrorRun, path: str):
        from tensorboard.summary.writer.record_writer import RecordWriter  # the optional `remote` group

        self.path = path
        self.file = open(path, "xb")  # noqa: SIM115 - held open for the run's reports, closed by sync_close
        self.records = RecordWriter(self.file)
        try:
            self._write(file_version="brain.Event:2")  # the header event every event file starts with
            for tag, text in run_texts(run).items():
                self._write(step=0, summary=text_summary(tag, text))
        except BaseException:
            self.file.close()
            os.unlink(path)
            raise

    def _write(self, **fields) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.records.write(Event(wall_time=time.time(), **fields).SerializeToString())

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self._write(step=step, summary=scalar_summary(key, value))

    def sync_close(self) -> None:
        """Write the file's events to disk (fsync) and close it; closing again does nothing."""
        if self.file.closed:
            return
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


class TensorBoardSink(EventStream):
    """A run's live event file, ``events.out.tfevents.<time>.<host>`` in its folder: ``log`` adds one scalar per
    key at ``step`` and hands them to the file, so TensorBoard sees the run grow; ``close`` fsyncs it.

    >>> import tempfile
    >>> sink = TensorBoardSink(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp()))
    >>> sink.log(1, {"a": 1.0}); sink.close(); [is_event_file(n) for n in os.listdir(sink.folder)]
    [True]
    """

    def __init__(self, run: MirrorRun):
        self.folder = run_folder(run)
        os.makedirs(self.folder, exist_ok=True)
        for taken in itertools.count():  # a run reopened within the second keeps its first file whole
            try:
                super().__init__(run, event_file_name(self.folder, taken))
                return
            except FileExistsError:
                continue

    def log(self, step: int, values: Mapping[str, float]) -> None:
        super().log(step, values)
        self.file.flush()  # to the OS, not the disk: a reader sees the report, the run does not wait on the disk

    def close(self) -> None:
        self.sync_close()


class EventFile(EventStream):
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
        self.folder = run_folder(run)
        os.makedirs(self.folder, exist_ok=True)
        super().__init__(run, os.path.join(self.folder, f".export.{uuid.uuid4().hex[:8]}.tmp"))

    def close(self) -> str:
        """Publish the event file; returns its path."""
        self.sync_close()
        final = event_file_name(self.folder)
        os.link(self.path, final)  # unlike rename, fails when the name exists
        os.unlink(self.path)
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)  # the new name is durable
        finally:
            os.close(folder)
        return final

    def discard(self) -> None:
        """Remove the temporary file: nothing of this run is left for a reader."""
        self.file.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def open_run(run: MirrorRun) -> TensorBoardSink:
    """The sink of ``run`` (`BACKENDS`'s opener for ``tensorboard``).

    >>> import tempfile
    >>> open_run(MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp())).close()
    """
    return TensorBoardSink(run)
