"""The README's `theseus submit ... --dry-run` example runs as written against the README's inventory, and
prints a script that holds the paths the real submit uses (no `~` that a quote keeps from expanding)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from theseus.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_example() -> tuple[str, list[str]]:
    """The inventory YAML of the README's "Running on other machines" and its `submit ... --dry-run` line."""
    text = README.read_text()
    [inventory] = re.findall(r"```yaml\n(clusters:.*?)```", text, re.S)
    [line] = [line for line in text.splitlines() if line.startswith("uv run theseus submit ") and "--dry-run" in line]
    return inventory, shlex.split(line.split("#")[0])[3:]  # past `uv run theseus`


def test_the_readme_submit_dry_run_runs_as_written(tmp_path):
    inventory, args = _readme_example()
    assert args[:2] == ["submit", "gpt/train/pretrain"] and "--dry-run" in args
    path = tmp_path / "theseus.yaml"  # the README's ~/.theseus.yaml
    path.write_text(inventory)
    # --allow-dirty: a working tree under edit ships as it is (the README's user has a clean checkout)
    result = CliRunner().invoke(app, [*args, "--inventory", str(path), "--allow-dirty"])
    assert result.exit_code == 0, result.output
    plan = result.stdout
    assert "-> slurm host hpc (cluster lab): 2 node(s), 2 process(es) x 8 h100" in plan
    script = plan[plan.index("#!/bin/bash"):]
    home = os.path.expanduser("~")
    assert f"#SBATCH --chdir={home}/theseus-work/launches/" in script and "~" not in script
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
