import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from theseus.train.optimizer import decay_mask, make_optimizer, wsd_schedule


def values(schedule, steps):
    return [float(schedule(s)) for s in steps]


def test_wsd_boundaries():
    f = wsd_schedule(1.0, 100, warmup_pct=0.1, decay_pct=0.2, final_lr_frac=0.1)
    assert values(f, [0, 10, 79, 80, 100, 1000]) == pytest.approx([0.1, 1.0, 1.0, 1.0, 0.1, 0.1])
    assert float(f(5)) == pytest.approx(0.55)
    assert float(f(9)) == pytest.approx(0.1 + 0.9 * 0.9)
    assert float(f(90)) == pytest.approx(0.55)
    assert float(f(99)) == pytest.approx(1.0 - 0.9 * 19 / 20)


def test_wsd_matches_the_seed_log():
    # seed: lr 3e-4, final_lr_frac 0.01, warmup_pct 0.005 of 3814 steps;
    # logged train/lr 1.8631602870300412e-05 then 3.4263182897120714e-05
    f = wsd_schedule(3e-4, 3814, warmup_pct=0.005, decay_pct=0.01, final_lr_frac=0.01)
    assert float(f(1)) == pytest.approx(1.8631602870300412e-05, rel=1e-5)
    assert float(f(2)) == pytest.approx(3.4263182897120714e-05, rel=1e-5)


def test_wsd_without_warmup_or_decay():
    f = wsd_schedule(2.0, 10, warmup_pct=0.0, decay_pct=0.0, final_lr_frac=0.5)
    assert values(f, [0, 5, 9, 10, 20]) == pytest.approx([2.0] * 5)


def test_wsd_is_traceable_and_monotone_in_phases():
    f = wsd_schedule(1.0, 50, warmup_pct=0.2, decay_pct=0.4, final_lr_frac=0.0)
    lrs = np.asarray(jax.jit(jax.vmap(f))(jnp.arange(60)))
    assert lrs.dtype == np.float32
    assert np.all(np.diff(lrs[:10]) > 0)
    assert np.all(lrs[10:30] == 1.0)
    assert np.all(np.diff(lrs[30:51]) < 0)
    assert lrs[50] == 0.0


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(lr=0.0), "lr"),
        (dict(total_steps=0), "total_steps"),
        (dict(warmup_pct=-0.1), "warmup_pct"),
        (dict(decay_pct=1.5), "decay_pct"),
        (dict(final_lr_frac=2.0), "final_lr_frac"),
        (dict(warmup_pct=0.6, decay_pct=0.6), "warmup_pct \\+ decay_pct"),
    ],
)
def test_wsd_rejects_bad_args(kwargs, word):
    args = dict(lr=1.0, total_steps=10, warmup_pct=0.1, decay_pct=0.1, final_lr_frac=0.1) | kwargs
    with pytest.raises(ValueError, match=word):
        wsd_schedule(**args)


def test_decay_mask_is_two_dims_and_up():
    params = {"wte": {"embedding": jnp.ones((4, 2))}, "ln": {"scale": jnp.ones(2), "bias": jnp.ones(2)}}
    assert decay_mask(params) == {"wte": {"embedding": True}, "ln": {"scale": False, "bias": False}}


def _opt(**kw):
    args = dict(lr=0.1, weight_decay=0.5, beta1=0.9, beta2=0.95, total_steps=10,
                warmup_pct=0.0, decay_pct=0.0, final_lr_frac=1.0) | kw
    return make_optimizer(**args)


def test_weight_decay_skips_vectors():
    params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}
    opt = _opt()
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = opt.update(zeros, opt.init(params), params)
    np.testing.assert_allclose(updates["kernel"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
    np.testing.assert_array_equal(updates["bias"], 0.0)


def _first_moment_norm(opt, grads, params):
    _, state = opt.update(grads, opt.init(params), params)
    mu = optax.tree_utils.tree_get(state, "mu")
    return float(np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(mu))))


def test_gradients_are_clipped_before_adam():
    params = {"w": jnp.zeros(4)}
    grads = {"w": jnp.full(4, 10.0)}  # global norm 20
    assert _first_moment_norm(_opt(clip_norm=1.0), grads, params) == pytest.approx(0.1 * 1.0)
    assert _first_moment_norm(_opt(clip_norm=None), grads, params) == pytest.approx(0.1 * 20.0)


def test_state_layout_does_not_depend_on_clipping():
    params = {"w": jnp.zeros((3, 3))}
    a = jax.tree.structure(_opt(clip_norm=None).init(params))
    b = jax.tree.structure(_opt().init(params))
    assert a == b


def test_bad_optimizer_args():
    with pytest.raises(ValueError, match="weight_decay"):
        _opt(weight_decay=-1.0)
    with pytest.raises(ValueError, match="clip_norm"):
        _opt(clip_norm=-1.0)


def test_docstring_examples_run():
    import doctest

    import theseus.train.optimizer as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
