"""A query's plan is public and printable: tests read what a query does from it, not from the store's caches."""

import pytest

from theseus.store import Node, Store, UnknownKey, schema, topk
from theseus.store.predicates import Finished, Has, Job, Lacks, NodeId, Seq, Tagged, Where


def write_runs(store: Store, names: list[str], steps: int = 3) -> list[Node]:
    starts = [Node.start(name) for name in names]
    with store.writer() as w:
        for first in starts:
            node = first
            for i in range(steps):
                w.write(node, {"loss": 2.0 - i / 10, "tokens": 10 * i})
                node = node.next()
    return starts


def test_a_plan_holds_the_querys_predicates_as_typed_objects(tmp_path):
    store = Store(tmp_path)
    [a] = write_runs(store, ["proj.plan.a"])
    query = (store.find().job("gpt/train/pretrain").finished(False).tag("best").has("tokens")
             .where("loss", "<", 1.95).seq(1).node(a.next()).sort("loss", ascending=False).limit(3))
    plan = query.plan()
    assert plan.run_filters == (Job("gpt/train/pretrain"), Finished(False), Tagged("best"))
    assert plan.node_filters == (Has("tokens"), Where("loss", "<", 1.95), Seq(1), NodeId(a.next().id))
    assert plan.keys == {"tokens": "int", "loss": "float"} and plan.rows == "tokens"
    assert plan.sorts == (("loss", False),) and plan.order == ("name", "nonce", "seq") and plan.limit == 3
    text = plan.explain()
    assert "filter runs: 'job' 'gpt/train/pretrain'; 'finished' False; 'tag' 'best'" in text
    assert "sort: loss descending, then name, nonce, seq" in text and str(plan) == text


def test_checkpoint_is_a_checkpoint_that_is_not_retired(tmp_path):
    store = Store(tmp_path)
    write_runs(store, ["proj.plan.ckpt"])
    plan = store.find().checkpoint().plan()
    assert plan.node_filters == (Has(schema.CHECKPOINT), Lacks(schema.RETIRED))
    assert plan.rows == schema.CHECKPOINT  # only the nodes holding a checkpoint are folded


def test_a_plan_says_which_runs_the_view_answers_and_which_the_log(tmp_path):
    store = Store(tmp_path)
    write_runs(store, ["proj.plan.old1", "proj.plan.old2"])
    store.compact()
    [new] = write_runs(store, ["proj.plan.new"])
    plan = store.find().plan()
    assert [run.split(":")[0] for run in plan.from_view] == ["proj.plan.old1", "proj.plan.old2"]
    assert plan.from_log == (f"{new.name}:{new.nonce}",)
    assert plan.explain().startswith("runs: name '*', nonce '*': 2 from the view, 1 from the log")


@pytest.mark.slow
def test_a_top_k_query_over_many_runs_folds_only_the_runs_that_can_hold_its_answer(tmp_path):
    store = Store(tmp_path)
    write_runs(store, [f"proj.plan.run-{r:03d}" for r in range(topk.MIN_RUNS + 4)], steps=2)
    plan = store.find().sort("loss").limit(2).plan()
    assert len(plan.from_log) == topk.MIN_RUNS + 4 and plan.pruned is not None
    assert 0 < len(plan.pruned) < len(plan.from_log)
    assert store.find().plan().pruned is None  # no sort and limit: every run is folded


def test_contradicting_filters_plan_no_run(tmp_path):
    store = Store(tmp_path)
    write_runs(store, ["proj.plan.a"])
    plan = store.find().name("proj.plan.a").name("proj.plan.b").plan()
    assert plan.name is None and plan.runs == ()


def test_a_plan_on_a_key_no_run_logged_is_the_querys_error(tmp_path):
    store = Store(tmp_path)
    write_runs(store, ["proj.plan.a"])
    with pytest.raises(UnknownKey, match="'los'.*did you mean 'loss'"):
        store.find().sort("los").plan()
