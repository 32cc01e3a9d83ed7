"""``theseus export tensorboard`` publishes each run's event file whole: an export interrupted part way (an
exception, Ctrl-C, a killed process) leaves no event file TensorBoard would read for the run it was writing, and
running it again exports that run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.mirror._mirror_helpers import tensorboard_scalars
from theseus.cli import app
from theseus.mirror import export
from theseus.mirror.to_tensorboard import is_event_file
from theseus.store import Node, Store

pytestmark = pytest.mark.usefixtures("remote_group")

STEPS = 6


@pytest.fixture
def root(tmp_path):
    """A root with one run of ``STEPS`` reported steps; returns (root, out, the run's folder under out)."""
    node = Node.start("exp.grp.atomic")
    with Store(str(tmp_path / "root")).writer() as w:
        for step in range(1, STEPS + 1):
            node = node.next()
            w.write(node, {"train/loss": 10.0 - step})
    out = tmp_path / "out"
    return str(tmp_path / "root"), out, out / "exp.grp.atomic" / node.nonce


def files_under(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(top, n), folder) for top, _, names in os.walk(folder) for n in names)


def interrupting(after: int, error: BaseException):
    """``scalars`` of the export raising ``error`` on the row after ``after`` rows were converted."""
    calls = []
    real = export.scalars

    def scalars(values):
        calls.append(1)
        if len(calls) > after:
            raise error
        return real(values)

    return scalars


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(28, "No space left on device")],
                         ids=["ctrl-c", "disk-full"])
def test_an_interrupted_export_leaves_no_event_file(root, monkeypatch, error):
    root, out, folder = root
    monkeypatch.setattr(export, "scalars", interrupting(3, error))
    result = CliRunner().invoke(app, ["export", "tensorboard", root, str(out)])
    assert result.exit_code != 0
    assert not [f for f in files_under(out) if is_event_file(f)], files_under(out)  # nothing TensorBoard reads
    assert files_under(out) == []  # nor a temporary left behind
    assert tensorboard_scalars(folder) == {}

    monkeypatch.undo()
    again = CliRunner().invoke(app, ["export", "tensorboard", root, str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(tensorboard_scalars(folder)) == list(range(1, STEPS + 1))


def test_a_killed_export_leaves_only_a_temporary_tensorboard_skips(root):
    root, out, folder = root
    script = (
        "import os, signal, sys\n"
        "from theseus.mirror import export\n"
        "real, seen = export.scalars, []\n"
        "def scalars(values):\n"
        "    seen.append(1)\n"
        "    if len(seen) > 3:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(values)\n"
        "export.scalars = scalars\n"
        "export.export_tensorboard(sys.argv[1], [], sys.argv[2])\n")
    killed = subprocess.run([sys.executable, "-c", script, root, str(out)], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = files_under(out)
    assert left and not [f for f in left if is_event_file(f)], left  # the partial events sit under a skipped name
    assert tensorboard_scalars(folder) == {}

    again = CliRunner().invoke(app, ["export", "tensorboard", root, str(out)])
    assert again.exit_code == 0, again.output  # the temporary does not make the folder count as exported
    assert sorted(tensorboard_scalars(folder)) == list(range(1, STEPS + 1))
