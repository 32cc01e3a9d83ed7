"""``theseus export tensorboard`` on synthetic roots: steps of branches, every run, refusals before writing."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from tests.mirror._mirror_helpers import tensorboard_scalars, tensorboard_texts
from theseus.cli import app
from theseus.mirror.export import export_tensorboard
from theseus.store import Node, Store

pytestmark = pytest.mark.usefixtures("remote_group")


def test_export_of_every_run_steps_a_branch_from_its_base(tmp_path):
    root, out = str(tmp_path / "root"), str(tmp_path / "out")
    base = Node.start("exp.grp.base")
    branch = Node.start("exp.grp.branch", parent=base.next().next().id)  # branched after step 2
    with Store(root).writer() as w:
        w.job(base, "doc/job", "lr: 0.5")
        w.job(branch, "doc/job", "lr: 0.25")
        for node, loss in [(base.next(), 3.0), (base.next().next(), 2.0), (branch.next(), 1.5)]:
            w.write(node, {"train/loss": loss, "train/flag": True, "note": "text is not mirrored"})
    folders = export_tensorboard(root, [], out)
    assert sorted(os.path.relpath(f, out) for f in folders) == sorted(
        [f"exp.grp.base/{base.nonce}", f"exp.grp.branch/{branch.nonce}"])
    assert tensorboard_scalars(f"{out}/exp.grp.base/{base.nonce}") == {1: {"train/loss": 3.0, "train/flag": 1.0},
                                                                      2: {"train/loss": 2.0, "train/flag": 1.0}}
    assert tensorboard_scalars(f"{out}/exp.grp.branch/{branch.nonce}") == {3: {"train/loss": 1.5, "train/flag": 1.0}}
    assert "lr: 0.25" in tensorboard_texts(f"{out}/exp.grp.branch/{branch.nonce}")["theseus/config/text_summary"]


def test_export_refuses_bad_input_before_writing(tmp_path):
    root, out = str(tmp_path / "root"), tmp_path / "out"
    node = Node.start("r")
    with Store(root).writer() as w:
        w.write(node, {"x": 1.0})
    result = CliRunner().invoke(app, ["export", "tensorboard", root, node.nonce, "abc999", str(out)])
    assert result.exit_code == 2 and "no run with nonce 'abc999'" in result.output
    assert not out.exists()
    missing = CliRunner().invoke(app, ["export", "tensorboard", root])
    assert missing.exit_code == 2 and "OUT_DIR" in missing.output
    wrong = CliRunner().invoke(app, ["export", "mlflow", root, str(out)])
    assert wrong.exit_code == 2 and "tensorboard" in wrong.output
    assert not out.exists()
