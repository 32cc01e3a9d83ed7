"""The schedule parts: shapes and boundaries, purity (a resume at any step gets the same rate), bad values."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from theseus.train.parts import parts
from theseus.train.schedules import (
    WSD,
    Constant,
    Cosine,
    Linear,
    Schedule,
    constant_schedule,
    cosine_schedule,
    linear_schedule,
    wsd_schedule,
)

SCHEDULES = [WSD, Cosine, Constant, Linear]
TOTAL = 40
SOME = {"warmup_pct": 0.1, "decay_pct": 0.3, "final_lr_frac": 0.2}  # every schedule takes the keys it has


def build(cls, lr=1.0, total=TOTAL, **change):
    names = {f.name for f in dataclasses.fields(cls.Config)}
    config = OmegaConf.structured(cls.Config(**({k: v for k, v in SOME.items() if k in names} | change)))
    return cls.build(config, lr=lr, total_steps=total)


def values(schedule, steps):
    return [float(schedule(s)) for s in steps]


def test_the_registry_holds_every_schedule_of_the_module():
    registered = {name: cls for name, cls in parts("schedule").items() if cls.__module__ == Schedule.__module__}
    assert registered == {"wsd": WSD, "cosine": Cosine, "constant": Constant, "linear": Linear}


@pytest.mark.parametrize("cls", SCHEDULES, ids=lambda c: c.name)
def test_default_config_round_trips(cls):
    config = OmegaConf.structured(cls.Config())
    assert OmegaConf.to_object(OmegaConf.create(OmegaConf.to_yaml(config))) == dataclasses.asdict(cls.Config())
    assert cls.section == "optimization" and cls.description
    assert config.warmup_pct == 0.005
    assert config.get("final_lr_frac", 0.01) == 0.01
    lrs = jax.vmap(cls.build(config, lr=3e-4, total_steps=1000))(jnp.arange(1001))
    assert lrs.dtype == jnp.float32 and float(lrs.max()) == pytest.approx(3e-4, rel=1e-6)


@pytest.mark.parametrize("cls", SCHEDULES, ids=lambda c: c.name)
def test_a_schedule_is_a_pure_function_of_the_step(cls):
    """The rate at step k is the same whether built fresh and asked eagerly, reached inside a jitted training
    loop that counts steps, or reached by a loop resumed at any k."""
    f = build(cls)

    @jax.jit
    def run(start):  # the trainer's shape: the step is carried state, the rate read from it
        def body(step, _):
            return step + 1, f(step)
        return jax.lax.scan(body, start, None, length=TOTAL + 10)[1]

    looped = np.asarray(run(jnp.int32(0)))
    fresh = np.array([float(build(cls)(k)) for k in range(TOTAL + 10)], np.float32)
    np.testing.assert_allclose(looped, fresh, rtol=1e-6)
    for k in (1, 4, 5, 17, TOTAL - 1, TOTAL):
        np.testing.assert_array_equal(np.asarray(run(jnp.int32(k)))[: TOTAL + 10 - k], looped[k:])


@pytest.mark.parametrize("cls", SCHEDULES, ids=lambda c: c.name)
def test_linear_in_the_peak_rate(cls):
    steps = jnp.arange(TOTAL + 2)
    np.testing.assert_allclose(jax.vmap(build(cls, lr=3.0))(steps), 3.0 * jax.vmap(build(cls, lr=1.0))(steps),
                               rtol=1e-6)


@pytest.mark.parametrize("cls", [WSD, Cosine, Linear], ids=lambda c: c.name)
def test_warmup_starts_at_the_floor_and_ends_at_the_floor(cls):
    f = build(cls, lr=1.0)
    assert float(f(0)) == pytest.approx(0.2)
    assert values(f, [4, TOTAL, TOTAL + 1, 10 * TOTAL]) == pytest.approx([1.0, 0.2, 0.2, 0.2])


def test_cosine_shape():
    f = cosine_schedule(1.0, 100, warmup_pct=0.2, final_lr_frac=0.0)
    assert values(f, [0, 10, 20, 40, 60, 80, 100]) == pytest.approx([0.0, 0.5, 1.0, 0.853553, 0.5, 0.146447, 0.0],
                                                                    abs=1e-6)
    lrs = np.asarray(jax.vmap(f)(jnp.arange(20, 101)))
    assert np.all(np.diff(lrs) < 0)


def test_linear_shape():
    f = linear_schedule(2.0, 10, warmup_pct=0.0, final_lr_frac=0.5)
    assert values(f, range(12)) == pytest.approx([2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 1.0])


def test_constant_warmup_never_starts_at_zero():
    f = constant_schedule(1.0, 100, warmup_pct=0.05)
    assert values(f, [0, 1, 4, 5, 99, 100, 1000]) == pytest.approx([0.2, 0.4, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert values(constant_schedule(2.0, 10, warmup_pct=0.0), [0, 9, 10]) == [2.0, 2.0, 2.0]


def test_a_whole_run_of_warmup_ends_at_the_floor():
    for fn in (cosine_schedule, linear_schedule):
        f = fn(1.0, 10, warmup_pct=1.0, final_lr_frac=0.0)
        assert values(f, [0, 5, 9, 10, 11]) == pytest.approx([0.0, 0.5, 0.9, 0.0, 0.0])


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
    f = WSD.build(WSD.Config(), lr=3e-4, total_steps=3814)
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


BAD = [
    (WSD, dict(warmup_pct=-0.1), {}, r"warmup_pct must be in \[0, 1\]"),
    (WSD, dict(decay_pct=1.5), {}, r"decay_pct must be in \[0, 1\]"),
    (WSD, dict(final_lr_frac=2.0), {}, r"final_lr_frac must be in \[0, 1\]"),
    (WSD, dict(warmup_pct=0.6, decay_pct=0.6), {}, r"warmup_pct \+ decay_pct must be at most 1"),
    (Cosine, dict(warmup_pct=1.1), {}, r"warmup_pct must be in \[0, 1\]"),
    (Cosine, dict(final_lr_frac=-0.01), {}, r"final_lr_frac must be in \[0, 1\]"),
    (Linear, dict(warmup_pct=float("nan")), {}, r"warmup_pct must be in \[0, 1\]"),
    (Linear, dict(final_lr_frac=1.01), {}, r"final_lr_frac must be in \[0, 1\]"),
    (Constant, dict(warmup_pct=-1.0), {}, r"warmup_pct must be in \[0, 1\]"),
    (Cosine, {}, dict(lr=-1.0), "lr must be positive"),
    (Linear, {}, dict(lr=0.0), "lr must be positive"),
    (Constant, {}, dict(total=0), "total_steps must be a positive int"),
    (WSD, {}, dict(total=-5), "total_steps must be a positive int"),
]


@pytest.mark.parametrize("cls, change, args, message", BAD, ids=[f"{c.name}-{i}" for i, (c, *_) in enumerate(BAD)])
def test_bad_values_raise_naming_the_key(cls, change, args, message):
    with pytest.raises(ValueError, match=message):
        build(cls, **args, **change)
