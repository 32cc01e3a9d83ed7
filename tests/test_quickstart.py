"""The README's first command: tokenize the embedded corpus, train a small GPT, print the query."""

import pytest

from theseus.quickstart import main
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
