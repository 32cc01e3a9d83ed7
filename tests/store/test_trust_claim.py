"""Issue 15, items 6, 11 and 15 on the store side: what audit and resume refuse from a root
(checkpoint paths leaving it, configs that are not plain data), and the claim that lets at
most one resume continue a lineage. No JAX here; the training side is tests/train/test_resume_safety.py."""

from __future__ import annotations

import os
import threading
import time

import pytest

from theseus.audit import audit
from theseus.quick import quick
from theseus.store import Node, Store
from theseus.store import writer as writer_module
from theseus.store.claim import ResumeConflict, claim, claims

PRETRAIN = "gpt/train/pretrain"


def _run_with_config(root, config_yaml: str) -> Node:
    """A run of the pretrain job whose recorded config is ``config_yaml``; its tip."""
    node = Node.start("stranger")
    with Store(root).writer() as w:
        w.job(node, PRETRAIN, config_yaml)
        w.write(node, {"train/loss": 1.0})
    return node


TAGGED = "training: !!python/object/apply:os.getcwd []\n"
RESOLVER = "data:\n  dataset: ${oc.env:THESEUS_TEST_SECRET}\n"


@pytest.mark.parametrize("config_yaml, why", [(TAGGED, "YAML tag !!python/object/apply:os.getcwd"),
                                               (RESOLVER, "data.dataset = '${oc.env:THESEUS_TEST_SECRET}' "
                                                          "calls a resolver")])
def test_audit_and_resume_refuse_configs_that_are_not_plain_data(tmp_path, monkeypatch, config_yaml, why):
    monkeypatch.setenv("THESEUS_TEST_SECRET", "pydoc-secret")
    tip = _run_with_config(tmp_path, config_yaml)

    report = audit(tmp_path)
    unsafe = [p for p in report.errors if p.kind == "unsafe-config"]
    assert not report.ok and len(unsafe) == 1, report.problems
    assert why in unsafe[0].message and tip.id in unsafe[0].message

    with quick(tmp_path) as q, pytest.raises(ValueError) as e:
        q.find().nonce(tip.nonce).resume()
        assert q.config.data.dataset != "pydoc-secret", "the environment was read"
    assert why in str(e.value) and tip.id in str(e.value) and "not plain data" in str(e.value)


def test_a_plain_reference_inside_the_config_still_resumes(tmp_path):
    tip = _run_with_config(tmp_path, "data:\n  suffix: x\n  dataset: ${data.suffix}\n")
    assert audit(tmp_path).ok
    with quick(tmp_path) as q:
        q.find().nonce(tip.nonce).resume()
        assert q.config.data.dataset == "x"


@pytest.mark.parametrize("path", ["../outside_ckpt", "objects/../../outside_ckpt"])
def test_audit_reports_a_checkpoint_path_outside_the_root(tmp_path, path):
    root = tmp_path / "root"
    tip = _run_with_config(root, "{}\n")
    with Store(root).writer() as w:  # a record a stranger's root may hold (the public writer refuses it)
        w._commit(tip, writer_module._CHECKPOINT, (path,))
    report = audit(root)
    bad = [p for p in report.errors if p.kind == "bad-checkpoint-path"]
    assert bad and "not followed" in bad[0].message and path in bad[0].message


def test_audit_does_not_follow_a_linked_checkpoint_folder(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside_ckpt"
    tip = _run_with_config(root, "{}\n")
    outside.mkdir()
    (outside / "MANIFEST.json").write_text('{"format": "theseus.manifest/1", "files": []}')
    os.makedirs(root / "objects")
    os.symlink(outside, root / "objects" / tip.id)
    with Store(root).writer() as w:
        w.checkpoint(tip, f"objects/{tip.id}")
    bad = [p for p in audit(root).errors if p.kind == "bad-checkpoint-path"]
    assert bad and "through a link" in bad[0].message


# -- item 15: the claim ---------------------------------------------------------------


def test_a_second_resume_of_the_same_tip_is_refused_and_writes_nothing(tmp_path):
    store = Store(tmp_path)
    tip = _run_with_config(tmp_path, "{}\n")
    with store.writer() as first, store.writer() as second:
        claim(store, first, tip.next())
        first.write(tip.next(), {"train/loss": 0.5})
        first.flush()
        with pytest.raises(ResumeConflict, match="already continued"):
            claim(store, second, tip.next())
    assert claims(store, tip.next()) == [first.id]  # the late one wrote no claim


def test_concurrent_claims_never_let_two_resumes_continue(tmp_path):
    """Pairs of threads claim the same tip at once, 40 times: never two winners."""
    store = Store(tmp_path)
    outcomes = {0: 0, 1: 0, 2: 0}
    deadline = time.monotonic() + 20
    trials = 0
    while trials < 40 and time.monotonic() < deadline:
        tip = _run_with_config(tmp_path, "{}\n")
        start, won = threading.Barrier(2), []

        def resume():
            with store.writer() as w:
                start.wait()
                try:
                    claim(store, w, tip.next())
                    won.append(w.id)
                except ResumeConflict:
                    pass

        threads = [threading.Thread(target=resume) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes[len(won)] += 1
        trials += 1
        assert len(won) <= 1, f"trial {trials}: both resumes continued the lineage"
    print(f"\n{trials} trials of two concurrent claims: winners -> trials {outcomes}")
    assert trials >= 10
