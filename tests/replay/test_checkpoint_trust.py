"""Every reader of a checkpoint checks what it reads against the MANIFEST: ``sample``, ``eval``, ``verify``,
``analyze`` and resume refuse a deleted chunk, a flipped bit or a FIFO in the folder with one line naming the file
and the node (exit status 2, no traceback), and ``eval`` then records nothing."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.audit._trained_root import built, copy_root  # noqa: F401  (session and per-test fixtures)
from theseus.cli import app
from theseus.store import Store

pytestmark = pytest.mark.slow  # the session fixture trains three tiny runs

#: seconds a command may take before it counts as hung (it imports JAX and builds a tiny trainer)
HUNG = 180


def checkpoint(root: str, nonce: str, seq: int | None = None):
    """A checkpoint node of run ``nonce``: at ``seq``, or its last."""
    found = Store(root).find().nonce(nonce).checkpoint()
    return found.seq(seq).last() if seq is not None else found.last()


def a_chunk(root: str, node) -> str:
    """The largest chunk file of the node's parameters (an embedding: not all zeros)."""
    chunks = [c for c in glob.glob(f"{Store(root).objects(node)}/checkpoint/params/**/c/**", recursive=True)
              if os.path.isfile(c)]
    return max(chunks, key=os.path.getsize)


def flip_a_bit(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x04
    with open(path, "wb") as f:
        f.write(data)


def commands(root: str, node) -> dict[str, list[str]]:
    """The readers of a checkpoint, each as a CLI call on ``node``."""
    return {
        "sample": ["sample", root, node.id, "1+2=", "--max-new-tokens", "2"],
        "eval": ["eval", root, node.id, "--tasks", "bits-per-byte", "--limit", "1"],
        "verify": ["verify", root, node.id, "--steps", "1"],
        "analyze": ["analyze", root, node.id, "--analysis", "norms"],
    }


def evaluations(root: str) -> list:
    return Store(root).find().job("gpt/evaluate").all()


def assert_one_error_line(output: str, *words: str) -> None:
    """No traceback; the output ends with the one ``error:`` line, which names every word."""
    assert "Traceback" not in output, output
    lines = [line for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], output
    for word in words:
        assert word in errors[0], (word, output)


@pytest.mark.parametrize("command", ["sample", "eval", "verify", "analyze"])
def test_a_flipped_bit_is_refused_naming_the_file_and_the_node(built, copy_root, command):  # noqa: F811
    root = copy_root()
    node = checkpoint(root, built.main, 3)
    chunk = a_chunk(root, node)
    flip_a_bit(chunk)
    result = CliRunner().invoke(app, commands(root, node)[command])
    assert result.exit_code == 2, result.output
    assert_one_error_line(result.output, "corrupt file", os.path.relpath(chunk, Store(root).objects(node)), node.id)
    assert evaluations(root) == []


@pytest.mark.parametrize("command", ["sample", "eval"])
def test_a_deleted_chunk_is_refused_and_eval_records_nothing(built, copy_root, command):  # noqa: F811
    root = copy_root()
    node = checkpoint(root, built.main, 3)
    chunk = a_chunk(root, node)
    os.remove(chunk)  # TensorStore would read it as zeros
    result = CliRunner().invoke(app, commands(root, node)[command])
    assert result.exit_code == 2, result.output
    assert_one_error_line(result.output, "missing file", os.path.relpath(chunk, Store(root).objects(node)), node.id)
    assert evaluations(root) == []


def test_a_flipped_bit_fails_resume_and_branch_too(built, copy_root):  # noqa: F811
    from theseus.quick import quick

    root = copy_root()
    node = checkpoint(root, built.main, 3)
    flip_a_bit(a_chunk(root, node))
    with quick(root) as q:
        q.find().node(node).branch()
        with pytest.raises(ValueError, match=f"checkpoint of node {node.id} .*corrupt file .*sha256"):
            q.create()


RESUME = """
import sys
from theseus.quick import quick
with quick(sys.argv[1]) as q:
    q.find().nonce(sys.argv[2]).checkpoint().resume()
    try:
        q.create()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
"""


@pytest.mark.parametrize("command", ["sample", "eval", "verify", "resume"])
def test_a_fifo_config_is_refused_not_waited_on(built, copy_root, command):  # noqa: F811
    root = copy_root()
    node = checkpoint(root, built.main, 3 if command == "verify" else None)  # verify replays a step after it
    config = f"{Store(root).objects(node)}/config.yaml"
    os.remove(config)
    os.mkfifo(config)  # opening it for reading would wait for a writer forever
    if command == "resume":
        args = [sys.executable, "-c", RESUME, root, built.main]
    else:
        args = [sys.executable, "-m", "theseus.cli", *commands(root, node)[command]]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=HUNG, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} hung on a FIFO config.yaml")
    assert done.returncode == 2, done.stderr
    assert_one_error_line(done.stderr, "config.yaml", "FIFO", node.id)
    assert evaluations(root) == []
