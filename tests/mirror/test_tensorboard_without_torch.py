"""The TensorBoard sink and ``theseus export tensorboard`` write event files without importing torch (tensorboardX
imports it, which costs seconds at the start of every mirrored run and every export), and what they write is
what TensorBoard reads."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.mirror._mirror_helpers import tensorboard_scalars, tensorboard_texts

pytestmark = pytest.mark.usefixtures("remote_group")

#: a fresh interpreter: exports a one-run root, mirrors one scalar live, then names the heavy modules it imported
EXPORT_AND_MIRROR = """
import sys
from typer.testing import CliRunner
from theseus.cli import app
from theseus.mirror.sinks import MirrorRun, open_sink
from theseus.store import Node, Store

root, out, live = sys.argv[1:]
with Store(root).writer() as w:
    w.write(Node.start("exp.grp.light").next(), {"train/loss": 1.5})
result = CliRunner().invoke(app, ["export", "tensorboard", root, out])
assert result.exit_code == 0, result.output
sink = open_sink("tensorboard", MirrorRun("exp.grp.live", "abc123", {"lr": 0.5}, folder=live))
sink.log(2, {"train/loss": 0.75})
sink.close()
print(" ".join(m for m in ("torch", "tensorboardX", "jax") if m in sys.modules))
"""


def test_export_and_live_sink_import_no_torch(tmp_path):
    out, live = tmp_path / "out", tmp_path / "live"
    done = subprocess.run([sys.executable, "-c", EXPORT_AND_MIRROR, str(tmp_path / "root"), str(out), str(live)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [], f"imported {done.stdout.strip()}"
    (exported,) = (out / "exp.grp.light").iterdir()
    assert tensorboard_scalars(exported) == {1: {"train/loss": 1.5}}
    assert tensorboard_scalars(live / "exp.grp.live" / "abc123") == {2: {"train/loss": 0.75}}
    assert "lr: 0.5" in tensorboard_texts(live / "exp.grp.live" / "abc123")["theseus/config/text_summary"]


def test_a_sink_reopened_within_a_second_keeps_both_files(tmp_path, monkeypatch):
    from theseus.mirror import to_tensorboard
    from theseus.mirror.sinks import MirrorRun
    from theseus.mirror.to_tensorboard import TensorBoardSink, is_event_file

    monkeypatch.setattr(to_tensorboard, "time", SimpleNamespace(time=lambda: 1700000000.0))  # one second for both
    run = MirrorRun("exp.grp.again", "abc123", {}, folder=str(tmp_path))
    for step in (1, 2):
        sink = TensorBoardSink(run)
        sink.log(step, {"train/loss": float(step)})
        sink.close()
    assert sum(is_event_file(name) for name in (tmp_path / "exp.grp.again" / "abc123").iterdir()) == 2
    assert tensorboard_scalars(tmp_path / "exp.grp.again" / "abc123") == {1: {"train/loss": 1.0},
                                                                          2: {"train/loss": 2.0}}
