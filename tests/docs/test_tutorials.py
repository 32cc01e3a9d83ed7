"""The tutorials run: every python / bash / console block of docs/tutorials/*.md, in order, on a fresh root.

Each tutorial runs in its own fresh interpreter (clean XLA flags and JAX state);
its python blocks share one namespace, like a reader's REPL. The tutorials share
one root, in the order of ``ORDER`` (the second reads the runs the first made).
The conventions are in docs/README.md and tests/docs/_tutorial_blocks.py.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import _tutorial_blocks as blocks

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "docs" / "tutorials"
RUNNER = Path(blocks.__file__).resolve()
ORDER = ["running-experiments.md", "inspecting-runs.md", "adding-an-experiment.md"]
# fence languages that look like code but would silently not run: write python / bash / console
SUSPICIOUS = {"py", "python3", "sh", "shell", "zsh", "ipython", "pycon"}
# a page needing an optional package says so: <!-- needs: transformers ... --> (skipped without it)
NEEDS = re.compile(r"<!-- needs: (\w+)")


def tutorials() -> list[Path]:
    """The tutorials in run order: ``ORDER``, then any other page alphabetically."""
    found = sorted(TUTORIALS.glob("*.md"))
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.name, len(ORDER)), p.name))


def child_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment for a tutorial's interpreter: CPU, no inherited XLA flags, a compilation cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env["JAX_PLATFORMS"] = "cpu"
    # the tutorials compile the same train step several times (resume, tick, copy): cache it
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "jax-cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_tutorial(path: Path, root: Path, work: Path, env: dict[str, str],
                 timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), str(path), str(root), str(work)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_runner_doctests():
    result = doctest.testmod(blocks)
    assert result.attempted > 0 and result.failed == 0


def test_tutorials_are_there_and_runnable():
    """Both seed walkthroughs exist, use the placeholder root, and almost every block runs."""
    pages = tutorials()
    assert [p.name for p in pages[: len(ORDER)]] == ORDER
    for page in pages:
        found = blocks.parse(page.read_text(encoding="utf-8"))
        runnable = [b for b in found if b.runs]
        skipped = [b for b in found if b.lang in blocks.RUN_LANGS and not b.runs]
        assert len(runnable) >= 8, f"{page.name}: only {len(runnable)} runnable blocks"
        assert len(skipped) <= 1, f"{page.name}: too many no-run blocks at lines {[b.line for b in skipped]}"
        assert not [b.line for b in found if b.lang in SUSPICIOUS or not b.lang], \
            f"{page.name}: fenced blocks without a language or with one the test does not run"
        for block in runnable:
            if blocks.PLACEHOLDER.rstrip("/") not in block.code and "quick(" in block.code:
                pytest.fail(f"{page.name}:{block.line} opens a root other than {blocks.PLACEHOLDER}")


def test_runner_runs_blocks_in_order_and_fails_on_the_first_failure(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# a page\n\n"
        "```bash\nmkdir /tmp/theseus-tutorial\n```\n\n"
        "```python\nimport os\nx = 41\nopen('/tmp/theseus-tutorial/a.txt', 'w').write('a')\n```\n\n"
        "```console\n$ uv run python -c \"print('from the console')\"\nfrom the console\n```\n\n"
        "```python no-run\nraise SystemExit('not run')\n```\n\n"
        "```text\nraise SystemExit('not run either')\n```\n\n"
        "```python\nx += 1\nprint('x is', x)\n```\n\n"
        "```bash\ntest -f /tmp/theseus-tutorial/a.txt\necho bash saw it\n```\n\n"
        "```python\nraise ValueError('boom at the end')\n```\n"
    )
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    done = run_tutorial(page, root, work, child_env(tmp_path), timeout=120)
    out = done.stdout
    assert done.returncode == 1, out
    assert (root / "a.txt").read_text() == "a"  # the placeholder was substituted
    assert "from the console" in out and "x is 42" in out and "bash saw it" in out
    assert "not run" not in out.replace("TUTORIAL BLOCK FAILED", "")
    # the failure names the tutorial's own line (traceback and summary)
    line = page.read_text().splitlines().index("raise ValueError('boom at the end')") + 1
    assert f"TUTORIAL BLOCK FAILED: {page}:{line} (python block 6/6)" in out, out
    assert f'File "{page}", line {line}' in out and "boom at the end" in out


def test_runner_fails_on_a_failing_shell_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```console\n$ uv run theseus no-such-command\n```\n\n```python\nprint('after')\n```\n")
    (tmp_path / "work").mkdir()
    done = run_tutorial(page, tmp_path / "root", tmp_path / "work", child_env(tmp_path), timeout=120)
    assert done.returncode == 1
    assert "TUTORIAL BLOCK FAILED" in done.stdout and "theseus no-such-command" in done.stdout
    assert "after" not in done.stdout


@pytest.mark.slow
def test_tutorials_run(tmp_path):
    """Every runnable block of every tutorial runs, in order, on one fresh root."""
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    env = child_env(tmp_path)
    for page in tutorials():
        if [m for m in NEEDS.findall(page.read_text()) if importlib.util.find_spec(m) is None]:
            continue  # a page needing an optional group that is not installed
        done = run_tutorial(page, root, work, env)
        tail = "\n".join(done.stdout.splitlines()[-80:])
        assert done.returncode == 0, f"{page.name} failed:\n{tail}"
        assert f"{page}: " in done.stdout and "blocks ran" in done.stdout
    assert (work / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # theseus plot's output
