import functools

import jax
import jax.numpy as jnp
import optax
import pytest

from theseus.model import GPT, GPTConfig
from theseus.train.autobatch import (
    DEFAULT_CANDIDATES,
    ENV_VAR,
    abstract_batch,
    candidates_from_env,
    compiled_bytes,
    default_memory_budget,
    probe_batch_size,
)
from theseus.train.step import init_state, make_train_step


@pytest.mark.parametrize(
    "raw, expected",
    [("8 4 2 1", (8, 4, 2, 1)), ("8,4,2,1", (8, 4, 2, 1)), (" 16 ,  3 ", (16, 3)), ("", DEFAULT_CANDIDATES),
     ("  ", DEFAULT_CANDIDATES)],
)
def test_candidates_from_env(raw, expected):
    assert candidates_from_env({ENV_VAR: raw}) == expected


def test_candidates_default_and_process_env(monkeypatch):
    assert candidates_from_env({}) == (64, 32, 16, 8, 4, 2, 1)
    monkeypatch.setenv(ENV_VAR, "4 2")
    assert candidates_from_env() == (4, 2)


@pytest.mark.parametrize("raw, word", [("8 x 2", "integers"), ("8 0", "positive"), ("-2", "positive"),
                                       ("1 2 4", "descending"), ("4 4 2", "descending"), ("2.5", "integers")])
def test_bad_candidates(raw, word):
    with pytest.raises(ValueError, match=word):
        candidates_from_env({ENV_VAR: raw})


class FakeCompiled:
    def __init__(self, stats):
        self._stats = stats

    def memory_analysis(self):
        return self._stats


class Stats:
    def __init__(self, temp, arg, out, alias=0):
        self.temp_size_in_bytes = temp
        self.argument_size_in_bytes = arg
        self.output_size_in_bytes = out
        self.alias_size_in_bytes = alias


def test_compiled_bytes_handles_missing_analysis():
    assert compiled_bytes(object()) is None
    assert compiled_bytes(FakeCompiled(None)) is None
    assert compiled_bytes(FakeCompiled(Stats(10, 20, 30, alias=5))) == 55
    assert compiled_bytes(FakeCompiled([Stats(1, 1, 1), Stats(5, 5, 5)])) == 15

    class Raises:
        def memory_analysis(self):
            raise NotImplementedError

    assert compiled_bytes(Raises()) is None


def test_probe_rejects_large_and_oom_candidates():
    def compile_fn(n):
        if n == 64:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9 GiB")
        return FakeCompiled(Stats(temp=n * 100, arg=0, out=0))

    result = probe_batch_size([1, 64, 16, 4, 2], compile_fn, memory_budget_bytes=500)
    assert result.batch_size == 4
    assert result.trials == [(64, None, False), (16, 1600, False), (4, 400, True)]
    best, trials = result  # plain tuple unpacking works too
    assert best == 4


def test_probe_without_memory_analysis_takes_the_largest():
    assert probe_batch_size([2, 8], lambda n: FakeCompiled(None), memory_budget_bytes=1).batch_size == 8


def test_probe_propagates_other_errors():
    def compile_fn(n):
        raise TypeError("bad shapes")

    with pytest.raises(TypeError, match="bad shapes"):
        probe_batch_size([2], compile_fn, memory_budget_bytes=10)


def test_probe_no_fit_lists_sizes_and_budget():
    with pytest.raises(ValueError, match=r"budget of 50 bytes \(8: 800 bytes, 2: 200 bytes\)"):
        probe_batch_size([8, 2], lambda n: FakeCompiled(Stats(n * 100, 0, 0)), memory_budget_bytes=50)
    with pytest.raises(ValueError, match="positive"):
        probe_batch_size([4, 0], lambda n: None, memory_budget_bytes=50)
    with pytest.raises(ValueError, match="positive"):
        probe_batch_size([], lambda n: None, memory_budget_bytes=50)


def test_default_budget_is_positive():
    assert default_memory_budget() > 0

    class Device:
        def memory_stats(self):
            return {"bytes_limit": 1000}

    assert default_memory_budget(Device(), device_fraction=0.5) == 500


def test_probe_real_train_step_without_allocating():
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=256, block_size=16)
    model = GPT(cfg)
    opt = optax.adamw(1e-3)
    abstract_state = jax.eval_shape(lambda: init_state(model, opt, jax.random.PRNGKey(0), cfg.block_size))
    global_batch = 64

    @functools.cache
    def compile_fn(micro):
        step = make_train_step(model, opt, accum_steps=global_batch // micro)
        rng = jax.ShapeDtypeStruct((2,), jnp.uint32)
        return (
            jax.jit(step, donate_argnums=0)
            .lower(abstract_state, abstract_batch(global_batch, cfg.block_size), rng)
            .compile()
        )

    roomy = probe_batch_size([64, 4], compile_fn, memory_budget_bytes=10**12)
    assert roomy.batch_size == 64
    big_bytes = roomy.trials[0][1]
    assert big_bytes is not None and big_bytes > 0

    tight = probe_batch_size([64, 4], compile_fn, memory_budget_bytes=big_bytes - 1)
    assert tight.batch_size == 4
    assert [fits for _, _, fits in tight.trials] == [False, True]
    assert tight.trials[1][1] < big_bytes


def test_docstring_examples_run():
    import doctest

    import theseus.train.autobatch as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
