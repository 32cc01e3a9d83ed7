import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from theseus.model import GPT, GPTConfig, loss_fn
from theseus.model.gpt import cross_entropy
from theseus.train.optimizers import AdamW
from theseus.train.schedules import wsd_schedule
from theseus.train.step import (
    init_state,
    make_eval_step,
    make_grad_fn,
    make_train_step,
    split_micro_batches,
)

CFG = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=16, activation_dtype="float32")
MODEL = GPT(CFG)


@pytest.fixture(scope="module")
def params():
    return jax.jit(MODEL.init)(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]


def fresh_state(model, opt):
    return jax.jit(lambda rng: init_state(model, opt, rng, 16))(jax.random.PRNGKey(0))


def make_batch(rows=8, T=16, seed=1, pad_from=None):
    x = jax.random.randint(jax.random.PRNGKey(seed), (rows, T), 0, 256)
    y = jnp.roll(x, -1, axis=1)
    mask = jnp.ones((rows, T), bool)
    if pad_from is not None:  # right padding, different length per row
        lengths = jnp.asarray(pad_from)
        mask = jnp.arange(T)[None, :] < lengths[:, None]
    return {"x": x, "y": y, "padding_mask": mask}


def reference(params, batch):
    def f(p):
        logits = MODEL.apply({"params": p}, batch["x"])
        return loss_fn(logits, batch["y"], batch["padding_mask"])

    return jax.value_and_grad(f)(params)


def assert_trees_close(a, b, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=atol)


def test_four_micro_batches_of_two_equal_one_batch_of_eight(params):
    batch = make_batch(pad_from=[16, 3, 16, 9, 1, 16, 12, 7])
    rng = jax.random.PRNGKey(5)
    loss1, grads1, tokens1 = jax.jit(make_grad_fn(MODEL, 1))(params, batch, rng)
    loss4, grads4, tokens4 = jax.jit(make_grad_fn(MODEL, 4))(params, batch, rng)
    ref_loss, ref_grads = jax.jit(reference)(params, batch)
    assert int(tokens1) == int(tokens4) == int(batch["padding_mask"].sum())
    assert float(loss4) == pytest.approx(float(loss1), abs=1e-6)
    assert float(loss4) == pytest.approx(float(ref_loss), abs=1e-6)
    assert_trees_close(grads4, grads1, atol=1e-6)
    assert_trees_close(grads4, ref_grads, atol=1e-6)


def test_pre_reshaped_batch_is_used_as_is(params):
    batch = make_batch()
    split = split_micro_batches(batch, 4)
    assert split["x"].shape == (4, 2, 16)
    np.testing.assert_array_equal(split["x"][1, 0], batch["x"][1])
    np.testing.assert_array_equal(split["x"][1, 1], batch["x"][5])
    rng = jax.random.PRNGKey(0)
    grad_fn = jax.jit(make_grad_fn(MODEL, 4))
    loss_flat, _, _ = grad_fn(params, batch, rng)
    loss_split, _, _ = grad_fn(params, split, rng)
    assert float(loss_flat) == float(loss_split)


def test_masked_tokens_do_not_change_loss(params):
    batch = make_batch(rows=4, pad_from=[16, 5, 10, 1])
    mask = batch["padding_mask"]
    noisy = dict(batch)
    noisy["y"] = jnp.where(mask, batch["y"], 7)
    noisy["x"] = jnp.where(mask, batch["x"], 3)  # right padding: only later positions see it
    grad_fn = jax.jit(make_grad_fn(MODEL, 2))
    loss_a, grads_a, _ = grad_fn(params, batch, jax.random.PRNGKey(0))
    loss_b, grads_b, _ = grad_fn(params, noisy, jax.random.PRNGKey(0))
    assert float(loss_a) == pytest.approx(float(loss_b), abs=1e-6)
    assert_trees_close(grads_a, grads_b, atol=1e-6)
    full, _, _ = grad_fn(params, dict(batch, padding_mask=jnp.ones_like(mask)), jax.random.PRNGKey(0))
    assert abs(float(full) - float(loss_a)) > 1e-4


def test_all_masked_batch_has_zero_loss_and_grads(params):
    batch = make_batch(rows=2)
    batch["padding_mask"] = jnp.zeros_like(batch["padding_mask"])
    loss, grads, tokens = jax.jit(make_grad_fn(MODEL, 1))(params, batch, jax.random.PRNGKey(0))
    assert (float(loss), int(tokens)) == (0.0, 0)
    assert all(not np.any(g) for g in jax.tree.leaves(grads))


def test_loss_decreases_on_a_repetitive_dataset():
    total = 30
    schedule = wsd_schedule(1e-2, total, 0.1, 0.2, 0.1)
    opt = optax.chain(optax.clip_by_global_norm(1.0), AdamW.build(AdamW.Config(lr=1e-2, weight_decay=0.0), schedule))
    state = fresh_state(MODEL, opt)
    step = jax.jit(make_train_step(MODEL, opt, accum_steps=2, schedule=schedule), donate_argnums=0)
    seq = jnp.tile(jnp.arange(17) % 5, (4, 1))
    batch = {"x": seq[:, :-1], "y": seq[:, 1:], "padding_mask": jnp.ones((4, 16), bool)}
    rng = jax.random.PRNGKey(1)
    losses, lrs = [], []
    for _ in range(total):
        state, metrics = step(state, batch, rng)
        losses.append(float(metrics["loss"]))
        lrs.append(float(metrics["lr"]))
        assert np.isfinite(float(metrics["grad_norm"]))
    assert int(state["step"]) == total
    assert losses[-1] < 0.2 * losses[0]
    assert lrs[0] == pytest.approx(1e-3)
    assert lrs[3] == pytest.approx(1e-2)
    assert lrs[-1] == pytest.approx(float(schedule(total - 1)))


def test_state_layout_and_donation(params):
    opt = optax.adamw(1e-3)
    state = fresh_state(MODEL, opt)
    assert sorted(state) == ["opt_state", "params", "step"]
    assert state["step"].dtype == jnp.int32 and state["step"].shape == ()
    old_params = state["params"]
    step = jax.jit(make_train_step(MODEL, opt), donate_argnums=0)
    new_state, metrics = step(state, make_batch(rows=2), jax.random.PRNGKey(0))
    assert sorted(metrics) == ["grad_norm", "loss", "tokens"]
    assert int(new_state["step"]) == 1
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert old_params["wte"]["embedding"].is_deleted()  # the state was donated


def test_dropout_key_is_derived_from_rng_and_step():
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=16, dropout=0.2,
                    activation_dtype="float32")
    model = GPT(cfg)
    opt = optax.sgd(0.0)
    state = fresh_state(model, opt)
    step = jax.jit(make_train_step(model, opt, accum_steps=2))
    batch = make_batch(rows=4)
    rng = jax.random.PRNGKey(3)
    _, m1 = step(state, batch, rng)
    _, m2 = step(state, batch, rng)
    _, m3 = step(dict(state, step=state["step"] + 1), batch, rng)
    assert float(m1["loss"]) == float(m2["loss"])
    assert float(m1["loss"]) != float(m3["loss"])
    direct, _, _ = jax.jit(make_grad_fn(model, 2))(state["params"], batch, jax.random.fold_in(rng, 0))
    assert float(direct) == float(m1["loss"])


def test_eval_step_is_the_masked_mean(params):
    batch = make_batch(rows=4, pad_from=[16, 2, 8, 16])
    out = jax.jit(make_eval_step(MODEL))(params, batch)
    ref_loss, _ = jax.jit(reference)(params, batch)
    assert float(out["loss"]) == pytest.approx(float(ref_loss), abs=1e-6)
    assert int(out["tokens"]) == 16 + 2 + 8 + 16
    shifted = jax.jit(make_eval_step(MODEL, token_loss=lambda logits, y: cross_entropy(logits, y) + 1.0))
    assert float(shifted(params, batch)["loss"]) == pytest.approx(float(ref_loss) + 1.0, abs=1e-6)


def test_bad_batches():
    grad_fn = make_grad_fn(MODEL, 3)
    params = jax.eval_shape(lambda: MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32)))["params"]
    with pytest.raises(ValueError, match="padding_mask"):
        jax.eval_shape(grad_fn, params, {"x": jnp.zeros((3, 16), jnp.int32), "y": jnp.zeros((3, 16), jnp.int32)},
                       jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="not divisible by accum_steps=3"):
        jax.eval_shape(grad_fn, params, make_batch(rows=4), jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="accum_steps=3"):
        split_micro_batches({"x": jnp.zeros((2, 2, 16))}, 3)
    with pytest.raises(ValueError, match="accum_steps"):
        make_train_step(MODEL, optax.sgd(0.1), accum_steps=0)
