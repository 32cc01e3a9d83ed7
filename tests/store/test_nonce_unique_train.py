"""A training run and a branch whose drawn nonce another run of the root holds draw again before their first
record: nothing is merged with the run holding it."""

from __future__ import annotations

from tests.store.test_nonce_unique import forced
from tests.train._helpers import config, write_dataset
from theseus.audit import audit
from theseus.quick import quick
from theseus.store import Node, Store

STEP_TOKENS = 8 * 32


def tiny(steps: int) -> dict:
    return config(training={"tokens": STEP_TOKENS * steps},
                  logging={"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 100})


def test_a_training_run_and_a_branch_draw_again_when_their_nonce_is_taken(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    write_dataset(root)
    store = Store(root)
    taken = [Node.start(f"proj.squat.s{i}") for i in range(2)]
    with store.writer() as w:
        for node in taken:
            w.write(node, {"loss": 1.0})
    forced(monkeypatch, taken[0].nonce)
    with quick(root) as q:
        q.build("gpt/train/pretrain", "drawn").config.merge_with(tiny(2))
        run = q.create()
        assert run.node.nonce == taken[0].nonce
        run()
    assert run.node.nonce not in {n.nonce for n in taken}
    forced(monkeypatch, taken[1].nonce)
    with quick(root) as q:
        q.find().nonce(run.node.nonce).checkpoint().branch()
        branch = q.create()
        assert branch.node.nonce == taken[1].nonce
        branch()
    assert branch.node.nonce not in {n.nonce for n in taken} | {run.node.nonce}
    assert Store(root).runs().height == 4
    for node in taken:
        assert store.find().nonce(node.nonce).all() == [node]
    assert not [p for p in audit(root, verify_checksums=False).problems if p.kind == "nonce-collision"]
