"""The README's first command: tokenize the embedded corpus, train a small GPT, print the query, a sample and
the `theseus sample` command that draws it again."""

import ast
import re
import shlex

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.quickstart import main, sample_command
from theseus.store import Store


@pytest.mark.slow
def test_quickstart_trains_and_prints_the_query(tmp_path, capsys):
    first = main(str(tmp_path), steps=120)
    out = capsys.readouterr().out
    assert first.nonce in out and "q.find().nonce(" in out
    store = Store(tmp_path)
    losses = [r["train/loss"] for r in store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss"])]
    assert len(losses) == 12
    assert losses[-1] < losses[0] - 3.0, losses  # from ~11 (uniform over 100k tokens) to well below
    assert store.find().nonce(first.nonce).finished().checkpoint().all()
    assert store.find().job("data/tokenize/pydoc").finished().all()

    command = sample_command(store.root, first.nonce)
    lines = out.splitlines()
    assert lines[-1].strip() == command
    printed = ast.literal_eval(lines[-3].strip())  # the sample, printed as a Python string literal
    assert printed.startswith("The") and len(printed) > len("The")
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    drawn = rf"--- sample 0 \((length|eot), \d+ tokens\)\n{re.escape(printed)}\n$"
    assert re.search(drawn, result.output), result.output  # the command draws the same text
