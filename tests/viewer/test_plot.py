"""`theseus plot` / `theseus.viewer.plot.plot`: PNGs of runs' metrics, one line per (run, key)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import EmptyResult, Node, Store, UnknownKey
from theseus.viewer.plot import plot, series

PNG = b"\x89PNG\r\n\x1a\n"


def _log_runs(root, n_runs=2, steps=6):
    """Runs written through the store writer like the trainer does: train/loss and train/tokens per seq."""
    store = Store(root)
    nonces = []
    with store.writer() as w:
        for r in range(n_runs):
            node = Node.start(f"plot-run-{r}")
            nonces.append(node.nonce)
            for k in range(steps):
                values = {"train/loss": 5.0 - 0.5 * k - r, "train/tokens": 64 * k}
                if k % 3 == 0:
                    values["val/loss"] = 5.5 - 0.5 * k
                w.write(node, values)
                node = node.next()
    return nonces


def test_two_runs_two_lines_and_a_png(tmp_path):
    root = str(tmp_path / "root")
    a, b = _log_runs(root)
    out = tmp_path / "loss.png"
    fig = plot(root, [a, b], ["train/loss"], x="train/tokens", out=out)
    assert out.read_bytes()[:8] == PNG
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == [f"plot-run-0:{a} train/loss", f"plot-run-1:{b} train/loss"]
    assert list(lines[0].get_xdata()) == [64.0 * k for k in range(6)]
    assert list(lines[1].get_ydata()) == [4.0 - 0.5 * k for k in range(6)]
    assert fig.axes[0].get_xlabel() == "train/tokens"
    # two keys of one run, x = seq: a key logged at fewer nodes has fewer points
    fig = plot(Store(root), [a], ["train/loss", "val/loss"])
    assert [len(ln.get_xdata()) for ln in fig.axes[0].get_lines()] == [6, 2]
    assert list(fig.axes[0].get_lines()[1].get_xdata()) == [0.0, 3.0]


def test_cli_plot_as_the_issue_writes_it(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    a, b = _log_runs(root)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["plot", root, a, "train/loss", "--x", "train/tokens", "-o", "loss.png"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "loss.png").read_bytes()[:8] == PNG and "1 line(s)" in result.output
    result = CliRunner().invoke(app, ["plot", root, a, b, "train/loss", "val/loss", "-o", str(tmp_path / "all.png")])
    assert result.exit_code == 0, result.output
    assert "4 line(s)" in result.output and (tmp_path / "all.png").read_bytes()[:8] == PNG


def test_bad_input_is_named(tmp_path):
    root = str(tmp_path / "root")
    (a,) = _log_runs(root, n_runs=1)
    with pytest.raises(UnknownKey, match="'train/los'.*did you mean 'train/loss'"):
        plot(root, [a], ["train/los"])
    with pytest.raises(UnknownKey, match="train/tokns"):
        series(root, a, "train/loss", x="train/tokns")
    with pytest.raises(EmptyResult, match="no run with nonce 'abcdef'"):
        plot(root, ["abcdef"], ["train/loss"])
    with pytest.raises(ValueError, match="nonce must be 6 lowercase hex"):
        plot(root, ["nope"], ["train/loss"])
    with pytest.raises(ValueError, match="at least one run nonce and one key"):
        plot(root, [a], [])

    def cli(*args):
        return CliRunner().invoke(app, ["plot", root, *args, "-o", str(tmp_path / "x.png")])

    result = cli(a, "train/los")
    assert result.exit_code == 2 and "did you mean 'train/loss'" in result.output
    result = cli("abcdef", "train/loss")
    assert result.exit_code == 2 and "no run with nonce 'abcdef'" in result.output
    result = cli("train/loss")
    assert result.exit_code == 2 and "NONCE [NONCE...] KEY [KEY...]" in result.output
    result = cli(a, "train/loss", a)
    assert result.exit_code == 2 and "nonces must come before the keys" in result.output
    assert not os.path.exists(tmp_path / "x.png")
