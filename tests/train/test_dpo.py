"""DPO steps and jobs: a jitted step built from the objective (log 2 at step 0, a margin that grows, the same
step with accumulation), and the ``<family>/train/dpo`` jobs through the store (metrics queryable, bitwise resume)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from theseus.errors import BadInput
from theseus.model import GPT, GPTConfig
from theseus.train.dpo import DPOObjective
from theseus.train.step import make_train_step

VOCAB, T = 32, 8


def _pairs(n: int) -> dict[str, jnp.ndarray]:
    """``n`` pairs over one prompt pattern: chosen continues it with 5 6 7, rejected with 9 9 9; the batch is
    the chosen rows, then the rejected rows (a `PairLoader` batch's layout)."""
    prompt = [[1 + (i % 4), 2, 3, 4] for i in range(n)]
    rows = [p + [5, 6, 7, 0] for p in prompt] + [p + [9, 9, 9, 0] for p in prompt]
    tokens = jnp.asarray(rows, jnp.int32)
    x, y = tokens, jnp.concatenate([tokens[:, 1:], jnp.zeros((2 * n, 1), jnp.int32)], axis=1)
    mask = jnp.zeros((2 * n, T), bool).at[:, 3:7].set(True)  # y[3:7] is the response and its end
    return {"x": x, "y": y, "padding_mask": mask}


def _model_and_params(**dtypes):
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=VOCAB, block_size=T, **dtypes))
    return model, model.init(jax.random.PRNGKey(0), jnp.zeros((1, T), jnp.int32))["params"]


@pytest.mark.slow
def test_a_step_starts_at_log_2_and_the_margin_grows_on_a_toy_preference_set():
    model, params = _model_and_params()
    optimizer = optax.adam(3e-3)
    step = jax.jit(make_train_step(model, optimizer, objective=DPOObjective(beta=0.1)))
    state = {"params": params, "opt_state": optimizer.init(params), "step": jnp.zeros((), jnp.int32)}
    reference = jax.tree.map(jnp.copy, params)
    batch, margins = _pairs(4), []
    for k in range(30):
        state, metrics = step(state, batch, jax.random.PRNGKey(1), reference)
        if k == 0:
            assert abs(float(metrics["dpo/loss"]) - math.log(2)) < 1e-6
            assert float(metrics["loss"]) == float(metrics["dpo/loss"]) and int(metrics["tokens"]) == 4
        margins.append(float(metrics["dpo/reward_margin"]))
    assert margins[0] == 0.0 and margins[-1] > 1.0 and float(metrics["dpo/accuracy"]) == 1.0
    assert float(metrics["dpo/loss"]) < 0.4


@pytest.mark.slow
def test_accumulation_keeps_pairs_whole_and_the_step_the_same():
    model, params = _model_and_params(activation_dtype="float32")  # sums in another order: equal within fp32
    optimizer = optax.sgd(0.1)
    state = {"params": params, "opt_state": optimizer.init(params), "step": jnp.zeros((), jnp.int32)}
    shifted = jax.tree.map(lambda a: a + 0.01, params)  # a policy away from the reference: margins differ
    batch = _pairs(4)
    out = {}
    for accum in (1, 2, 4):
        step = jax.jit(make_train_step(model, optimizer, accum, objective=DPOObjective(beta=0.5)))
        new, metrics = step({**state, "params": shifted}, batch, jax.random.PRNGKey(1), params)
        out[accum] = (metrics, new["params"])
    for accum in (2, 4):
        for name in ("loss", "dpo/reward_margin", "dpo/accuracy"):
            assert abs(float(out[accum][0][name]) - float(out[1][0][name])) < 1e-6, (accum, name)
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(jax.tree.leaves(out[accum][1]),
                                                                jax.tree.leaves(out[1][1])))


# -- the jobs, through the store ------------------------------------------------------------------------------


def write_pairs(root, name="prefs", pairs=64, width=32, seed=0):
    """A preference dataset of ``pairs`` pairs of the test vocabulary: a random prompt, chosen 5 6 7 8 and
    rejected 9 9 9 9 (each closed by eot), as `data/tokenize/preference` writes them."""
    from tests.train._helpers import VOCAB
    from theseus.data.store import DatasetWriter

    rng = np.random.default_rng(seed)
    eot = VOCAB - 1
    rows = np.full((2 * pairs, width), eot, np.uint32)
    mask = np.zeros(rows.shape, bool)
    for i in range(pairs):
        n = int(rng.integers(6, 16))
        prompt = rng.integers(0, VOCAB - 1, n)
        for j, response in enumerate(([5, 6, 7, 8], [9, 9, 9, 9])):
            row = [*prompt, *response, eot]
            rows[2 * i + j, :len(row)] = row
            mask[2 * i + j, n:len(row)] = True
    cut = pairs * 2 * 7 // 8
    with DatasetWriter(str(root), name, "padded") as w:
        w.set_tokenizer({"backend": "tiktoken", "name": "toy", "vocab_size": VOCAB, "eot": eot})
        w.append("train", rows[:cut], mask[:cut])
        w.append("val", rows[cut:], mask[cut:])
        w.update(pairs=True)


def dpo_config(init_from, steps, **sections):
    from tests.train._helpers import config

    return config(data={"dataset": "prefs"}, training={"tokens": 8 * 32 * steps, "init_from": init_from},
                  logging={"report_interval": 1, "checkpoint_interval": 4, "validation_interval": 4}, **sections)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tests.train._helpers import pretrain

    root = str(tmp_path_factory.mktemp("dpo"))
    last = pretrain(root, "base", 2, checkpoint_interval=2)
    write_pairs(root)
    return root, last


def run_pinned(root, key, name, settings, source):
    """Run job ``key`` as ``name`` with ``settings``, whose ``training.init_from`` is ``source``'s nonce: the job
    pins it to ``source``'s node id before it starts. The run's last node."""
    from theseus.quick import quick

    with quick(root) as q:
        q.build(key, name).config.merge_with(settings)
        job = q.create()
        assert job.config.training.init_from == source.id  # the nonce pinned to the node it named
        return job()


@pytest.fixture(scope="module")
def straight(base):
    root, last = base
    return root, run_pinned(root, "gpt/train/dpo", "dpo", dpo_config(last.nonce, 30), last)


@pytest.mark.slow
def test_a_dpo_run_starts_at_log_2_and_its_margin_grows(straight):
    from theseus.store import Store

    root, end = straight
    store = Store(root)
    rows = store.find().nonce(end.nonce).has("dpo/loss").select(
        keys=["train/step", "dpo/loss", "dpo/reward_margin", "dpo/accuracy", "train/loss"])
    assert [r["train/step"] for r in rows] == list(range(1, 31))
    assert abs(rows[0]["dpo/loss"] - math.log(2)) < 1e-6 and rows[0]["dpo/reward_margin"] == 0.0
    margins = [r["dpo/reward_margin"] for r in rows]
    assert margins[-1] > 1.0 and margins[-1] > margins[10] > margins[1] > 0
    assert rows[-1]["dpo/loss"] < 0.5 and all(r["train/loss"] == r["dpo/loss"] for r in rows)
    confident = store.find().nonce(end.nonce).where("dpo/accuracy", ">=", 1.0).all()
    assert len(confident) >= 20
    assert store.record(end)["val/loss"] < math.log(2)  # the held-out pairs moved too


def assert_resume_replays(root, end, at_step):
    """Resume the DPO run of ``end`` (its last node) from its checkpoint at ``at_step``: the steps after it report
    the same DPO metrics and gradient norms, bit for bit."""
    from theseus.quick import quick
    from theseus.store import Store

    store = Store(root)
    keys = ["dpo/loss", "dpo/reward_margin", "dpo/accuracy", "train/grad_norm"]
    before = {r["train/step"]: r for r in store.find().nonce(end.nonce).has("dpo/loss")
              .select(keys=["train/step", *keys])}
    with quick(root) as q:
        q.find().nonce(end.nonce).checkpoint().where("train/step", "==", at_step).resume()
        branch = q.build().create()()
    after = store.find().nonce(branch.nonce).has("dpo/loss").select(keys=["train/step", *keys])
    assert [r["train/step"] for r in after] == list(range(at_step + 1, max(before) + 1))
    for r in after:
        assert all(r[k] == before[r["train/step"]][k] for k in keys), r["train/step"]


@pytest.mark.slow
def test_a_resumed_dpo_run_replays_the_same_steps_bit_for_bit(straight):
    root, end = straight
    assert_resume_replays(root, end, 24)


@pytest.mark.slow
def test_verify_replays_a_dpo_node_bitwise_with_its_reference(straight):
    from theseus.replay.verify import verify
    from theseus.store import Store

    root, end = straight
    node = Store(root).find().nonce(end.nonce).seq(24).first()
    assert verify(root, node.id, steps=2).verdict.status == "bitwise"


@pytest.mark.parametrize("change, message", [
    ({"training": {"init_from": ""}}, "set training.init_from to its node id or nonce"),
    ({"data": {"dataset": "fineweb"}}, "dataset 'fineweb' holds no preference pairs: make it with "
                                       "data/tokenize/preference"),
    ({"loss": {"z_loss": 1e-4}}, "loss.z_loss=0.0001 is not implemented for DPO runs"),
    ({"training": {"per_device_batch_size": 1}}, "a DPO step of 4 pairs cannot be split into 8 micro-batches"),
    ({"dpo": {"beta": -1.0}}, "dpo.beta must be a positive number, got -1.0"),
])
def test_what_a_dpo_run_cannot_do_is_refused_before_it_starts(base, change, message):
    root, last = base
    assert_refused(root, "gpt/train/dpo", dpo_config(last.id, 4), change, message)


def assert_refused(root, key, cfg, change, message):
    """A run of job ``key`` with ``cfg`` updated by ``change`` (sections of settings) is a BadInput matching
    ``message`` before it starts: it leaves no record in ``root``."""
    from theseus.quick import quick
    from theseus.store import Store

    for section, values in change.items():
        cfg.setdefault(section, {}).update(values)
    with quick(root) as q:
        q.build(key, "refused").config.merge_with(cfg)
        with pytest.raises(BadInput, match=message):
            q.create()
    assert Store(root).find().name("general.default.refused").all() == []


def over_a_llama(root, key, name, settings):
    """A 2-step ``llama/train/pretrain`` run in ``root``, then a run ``name`` of job ``key`` over its last node with
    ``settings(node id)``: ``(that node, the run's last node, its dpo/loss and dpo/reward_margin rows)``."""
    from tests.train._helpers import config
    from theseus.quick import quick
    from theseus.store import Store

    llama = {"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 48, "block_size": 32,
             "vocab_size": 256, "dtype": {"activation": "float32"}}
    with quick(root) as q:
        q.build("llama/train/pretrain", f"{name}-base").config.merge_with(
            config(architecture=llama, training={"tokens": 8 * 32 * 2}, logging={"checkpoint_interval": 2}))
        source = q()
    with quick(root) as q:
        q.build(key, name).config.merge_with(settings(source.id))
        end = q()
    rows = Store(root).find().nonce(end.nonce).has("dpo/loss").select(keys=["dpo/loss", "dpo/reward_margin"])
    return source, end, rows


@pytest.mark.slow
def test_a_decoder_family_runs_dpo_too(base):
    _, _, rows = over_a_llama(base[0], "llama/train/dpo", "llama-dpo", lambda source: dpo_config(source, 3))
    assert abs(rows[0]["dpo/loss"] - math.log(2)) < 1e-6 and rows[-1]["dpo/reward_margin"] > 0


@pytest.mark.slow
def test_a_restored_dpo_node_holds_its_reference_beside_its_policy(straight, base):
    from theseus.replay.restore import restored_trainer

    root, end = straight
    tuned, source = restored_trainer(root, end.id), restored_trainer(root, base[1].id)
    try:
        reference, start = (np.asarray(t["wte"]["embedding"]) for t in (tuned.frozen, source.params))
        assert np.array_equal(reference, start)
        assert not np.array_equal(np.asarray(tuned.params["wte"]["embedding"]), start)
    finally:
        tuned.close()
        source.close()


@pytest.mark.slow
def test_audit_finds_a_dpo_run_whose_reference_is_gone(straight, base, tmp_path):
    import shutil

    from theseus.audit import audit
    from theseus.store import Store

    root, end = straight
    _, reference = base
    assert not [p for p in audit(root).problems if p.kind == "missing-base"]
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    with Store(copy).writer() as w:  # the reference's checkpoint retired, as retention would
        w.retire(reference, "a test")
    found = [p for p in audit(copy).problems if p.kind == "missing-base"]
    assert found and reference.id in found[0].message and "reference" in found[0].message
    assert end.nonce in found[0].path


@pytest.mark.parametrize("key", ["gpt/train/pretrain", "gpt/train/sft"])
def test_a_job_of_single_rows_refuses_a_preference_dataset(base, key):
    """Pretraining and SFT read rows one by one: on a preference dataset they would train on each pair's rejected
    row as on its chosen one, so they refuse it, naming the dataset and the DPO jobs."""
    from tests.train._helpers import config
    from theseus.quick import quick
    from theseus.store import Store

    root, last = base
    cfg = config(data={"dataset": "prefs"}, training={"init_from": last.id})
    cfg["optimization"].pop("decay_pct")  # a pretraining schedule's: SFT's cosine has no decay phase
    with quick(root) as q:
        q.build(key, "single-rows").config.merge_with(cfg)
        with pytest.raises(BadInput, match="dataset 'prefs' holds preference pairs .* tune on it with a DPO job"):
            q.create()
    assert Store(root).find().name("general.default.single-rows").all() == []
