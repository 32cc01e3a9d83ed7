"""The optimizer parts: defaults, one update's direction and size, weight-decay masks, Muon's split, bad values."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from omegaconf import OmegaConf
from optax.contrib import MuonDimensionNumbers

from tests.train._helpers import config, write_dataset
from theseus.jobs import job
from theseus.model import GPT, GPTConfig
from theseus.quick import quick
from theseus.store import Store, schema
from theseus.train import Pretrain
from theseus.train.config import load_config
from theseus.train.optimizers import (
    SGD,
    AdamW,
    Lion,
    Muon,
    Optimizer,
    decay_mask,
    muon_dimension_numbers,
)
from theseus.train.parts import parts, section_fields
from theseus.train.recipe import Recipe
from theseus.train.schedules import WSD

OPTIMIZERS = [AdamW, Lion, Muon, SGD]
CFG = GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8)


@pytest.fixture(scope="module")
def gpt_params():
    init = jax.jit(GPT(CFG).init)  # one compiled program instead of many eager ops
    return init(jax.random.PRNGKey(0), jnp.zeros((1, CFG.block_size), jnp.int32))["params"]


def constant(lr):
    return lambda step: jnp.float32(lr)


def paths(tree, keep):
    """'/'-joined paths of the leaves of ``tree`` for which ``keep(leaf)`` holds."""
    leaf = lambda x: x is None or isinstance(x, MuonDimensionNumbers)  # noqa: E731  (a NamedTuple: a node, else)
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=leaf)[0]
    return sorted("/".join(str(getattr(k, "key", k)) for k in path) for path, leaf in flat if keep(leaf))


def test_the_registry_holds_every_optimizer_of_the_module():
    registered = {name: cls for name, cls in parts("optimizer").items() if cls.__module__ == Optimizer.__module__}
    assert registered == {"adamw": AdamW, "lion": Lion, "muon": Muon, "sgd": SGD}


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.name)
def test_default_config_round_trips_and_builds(cls):
    config = OmegaConf.structured(cls.Config())
    assert OmegaConf.to_object(config) == cls.Config()
    assert OmegaConf.to_object(OmegaConf.create(OmegaConf.to_yaml(config))) == dataclasses.asdict(cls.Config())
    assert cls.section == "optimization" and cls.description
    names = [f.name for f in dataclasses.fields(cls.Config)]
    assert "lr" in names and "weight_decay" in names
    params = {"kernel": jnp.ones((3, 3)), "bias": jnp.ones(3)}
    opt = cls.build(config, constant(cls.Config().lr))
    updates, _ = opt.update(jax.tree.map(jnp.ones_like, params), opt.init(params), params)
    assert all(np.all(np.isfinite(u)) for u in jax.tree.leaves(updates))


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.name)
def test_defaults_decay_matrices_as_much_as_adamw_per_step(cls):
    assert cls.Config().lr * cls.Config().weight_decay == pytest.approx(3e-4 * 0.1)


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.name)
def test_every_optimizer_shares_the_section_with_every_schedule(cls):
    for schedule in parts("schedule").values():
        if schedule.Config is not None:
            names = [n for n, _, _ in section_fields([cls, schedule], "optimization")]
            assert names[: len(dataclasses.fields(cls.Config))] == [f.name for f in dataclasses.fields(cls.Config)]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.name)
def test_weight_decay_only_on_matrices(cls, gpt_params):
    """A zero gradient leaves only the decay: -lr * weight_decay * p on the kernels, nothing on embeddings,
    norms and biases."""
    lr, decay = 0.01, 0.5
    config = OmegaConf.structured(cls.Config(lr=lr, weight_decay=decay))
    opt = cls.build(config, constant(lr))
    zeros = jax.tree.map(jnp.zeros_like, gpt_params)
    updates, _ = jax.jit(opt.update)(zeros, jax.jit(opt.init)(gpt_params), gpt_params)
    decayed = paths(jax.tree.map(lambda u: bool(np.any(u)), updates), bool)
    assert decayed == ["blocks_0/attn/c_attn/kernel", "blocks_0/attn/c_proj/kernel", "blocks_0/mlp/c_fc/kernel",
                       "blocks_0/mlp/c_proj/kernel"]
    kernel = gpt_params["blocks_0"]["mlp"]["c_fc"]["kernel"]
    np.testing.assert_allclose(updates["blocks_0"]["mlp"]["c_fc"]["kernel"], -lr * decay * kernel, rtol=1e-5, atol=1e-9)


def test_decay_mask_excludes_embeddings_norms_and_biases(gpt_params):
    mask = decay_mask(gpt_params)
    assert paths(mask, lambda m: not m) == ["blocks_0/attn/c_attn/bias", "blocks_0/attn/c_proj/bias",
                                            "blocks_0/ln_1/bias", "blocks_0/ln_1/scale", "blocks_0/ln_2/bias",
                                            "blocks_0/ln_2/scale", "blocks_0/mlp/c_fc/bias",
                                            "blocks_0/mlp/c_proj/bias", "ln_f/bias", "ln_f/scale", "wte/embedding"]


def test_decay_mask_excludes_learned_position_embeddings():
    cfg = dataclasses.replace(CFG, rope=False)
    params = jax.eval_shape(lambda: GPT(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32)))["params"]
    assert decay_mask(params)["wpe"] == {"embedding": False}


def test_adamw_first_update_is_lr_times_sign():
    opt = AdamW.build(AdamW.Config(weight_decay=0.0), constant(1e-3))
    params = {"w": jnp.zeros((2, 2))}
    grads = {"w": jnp.array([[5.0, -0.01], [2.0, -300.0]])}
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(updates["w"], -1e-3 * np.sign(grads["w"]), rtol=1e-4)


def test_lion_update_is_sign_valued_times_lr():
    lr = 3e-5
    opt = Lion.build(Lion.Config(weight_decay=0.0, lr=lr), constant(lr))
    params = {"w": jnp.zeros((3, 4))}
    grads = {"w": jax.random.normal(jax.random.PRNGKey(0), (3, 4)) * jnp.logspace(-3, 3, 4)}
    state = opt.init(params)
    for _ in range(3):
        updates, state = opt.update(grads, state, params)
        np.testing.assert_allclose(np.abs(updates["w"]), lr, rtol=1e-6)
        np.testing.assert_array_equal(np.sign(updates["w"]), -np.sign(grads["w"]))


def test_lion_momentum_interpolates_with_beta1():
    """After a gradient g then -g/2, Lion's step follows sign(beta1 * m + (1 - beta1) * g'), m = (1 - beta2) * g."""
    opt = Lion.build(Lion.Config(weight_decay=0.0, beta1=0.9, beta2=0.99), constant(1.0))
    params = {"w": jnp.zeros(2)}
    state = opt.init(params)
    _, state = opt.update({"w": jnp.array([1.0, 1.0])}, state, params)
    updates, _ = opt.update({"w": jnp.array([-0.5, -0.0001])}, state, params)
    # m = 0.01; then 0.9 * 0.01 + 0.1 * -0.5 < 0 but 0.9 * 0.01 + 0.1 * -0.0001 > 0
    assert updates["w"].tolist() == [1.0, -1.0]


def test_sgd_momentum_and_nesterov():
    params = {"w": jnp.zeros(1)}
    grad = {"w": jnp.ones(1)}
    for nesterov, second in ((False, 1.0 + 0.9), (True, 0.9 * (1.0 + 0.9) + 1.0)):
        opt = SGD.build(SGD.Config(weight_decay=0.0, momentum=0.9, nesterov=nesterov), constant(0.1))
        state = opt.init(params)
        _, state = opt.update(grad, state, params)
        updates, _ = opt.update(grad, state, params)
        assert float(updates["w"][0]) == pytest.approx(-0.1 * second)


def test_sgd_decay_does_not_enter_the_momentum():
    opt = SGD.build(SGD.Config(weight_decay=1.0, momentum=0.9), constant(0.1))
    params = {"kernel": jnp.ones((1, 1))}
    state = opt.init(params)
    zero = {"kernel": jnp.zeros((1, 1))}
    for _ in range(3):
        updates, state = opt.update(zero, state, params)
        assert float(updates["kernel"][0, 0]) == pytest.approx(-0.1)  # -lr * wd * p, never accumulated


def test_muon_orthogonalises_kernels_not_the_embedding(gpt_params):
    numbers = muon_dimension_numbers(gpt_params)
    assert paths(numbers, lambda n: n is not None) == [
        "blocks_0/attn/c_attn/kernel", "blocks_0/attn/c_proj/kernel", "blocks_0/mlp/c_fc/kernel",
        "blocks_0/mlp/c_proj/kernel"]
    opt = Muon.build(Muon.Config(weight_decay=0.0, lr=0.02, adam_lr=1e-3), constant(0.02))
    keys = iter(jax.random.split(jax.random.PRNGKey(1), 100))
    # gradients whose singular values spread widely: the embedding's is rank one, scaled per row
    grads = jax.tree.map(lambda p: jax.random.normal(next(keys), p.shape), gpt_params)
    rows = jnp.logspace(-2, 2, CFG.vocab_size)[:, None] * jnp.ones((1, CFG.n_embd))
    grads["wte"]["embedding"] = rows * jnp.sign(jax.random.normal(next(keys), rows.shape))
    updates, _ = jax.jit(opt.update)(grads, jax.jit(opt.init)(gpt_params), gpt_params)

    embedding = np.asarray(updates["wte"]["embedding"])
    # Adam's (Nesterov) first step: the same size everywhere, against the gradient's sign
    np.testing.assert_allclose(np.abs(embedding), np.abs(embedding[0, 0]), rtol=1e-5)
    np.testing.assert_array_equal(np.sign(embedding), -np.sign(grads["wte"]["embedding"]))
    assert 1e-3 < abs(embedding[0, 0]) < 2e-3
    singular = np.linalg.svd(embedding, compute_uv=False)
    assert singular[0] / singular[CFG.n_embd - 1] > 2  # not orthogonalised: it keeps the sign pattern's spectrum

    kernel = np.asarray(updates["blocks_0"]["mlp"]["c_fc"]["kernel"])
    singular = np.linalg.svd(kernel, compute_uv=False)
    assert singular.max() / singular.min() < 2  # orthogonalised: about equal singular values
    assert len(np.unique(np.round(np.abs(kernel), 6))) > 10  # not sign-like


def test_muon_adam_path_follows_the_schedule_scaled_to_adam_lr():
    schedule = WSD.build(WSD.Config(warmup_pct=0.5, decay_pct=0.0, final_lr_frac=0.0), lr=0.02, total_steps=4)
    opt = Muon.build(Muon.Config(weight_decay=0.0, lr=0.02, adam_lr=1e-3, nesterov=False), schedule)
    params = {"bias": jnp.zeros(2)}
    state = opt.init(params)
    sizes = []
    for _ in range(3):
        updates, state = opt.update({"bias": jnp.ones(2)}, state, params)
        sizes.append(float(-updates["bias"][0]))
    # a constant gradient keeps Adam's normalised step at 1: the step is the Adam path's rate
    assert sizes == pytest.approx([0.0, 0.5e-3, 1e-3], abs=1e-9)


BAD = [
    (AdamW, dict(lr=-1.0), "optimization.lr must be positive"),
    (AdamW, dict(weight_decay=-0.1), "optimization.weight_decay must be non-negative"),
    (AdamW, dict(beta2=1.0), r"optimization.beta2 must be in \[0, 1\)"),
    (Lion, dict(lr=0.0), "optimization.lr must be positive"),
    (Lion, dict(weight_decay=-1.0), "optimization.weight_decay"),
    (Lion, dict(beta1=-0.1), "optimization.beta1"),
    (Muon, dict(lr=float("nan")), "optimization.lr must be positive"),
    (Muon, dict(adam_lr=-1e-3), "optimization.adam_lr must be positive"),
    (Muon, dict(momentum=1.5), "optimization.momentum"),
    (Muon, dict(adam_beta2=1.0), "optimization.adam_beta2"),
    (Muon, dict(ns_steps=0), "optimization.ns_steps must be a positive int"),
    (Muon, dict(weight_decay=-1.0), "optimization.weight_decay"),
    (SGD, dict(lr=-0.1), "optimization.lr must be positive"),
    (SGD, dict(momentum=1.0), "optimization.momentum"),
    (SGD, dict(weight_decay=-0.5), "optimization.weight_decay"),
    (SGD, dict(nesterov="yes"), "optimization.nesterov must be a bool"),
]


@pytest.mark.parametrize("cls, change, message", BAD, ids=[f"{c.name}-{next(iter(d))}" for c, d, _ in BAD])
def test_bad_values_raise_naming_the_key(cls, change, message):
    with pytest.raises(ValueError, match=message):
        cls.build(dataclasses.replace(cls.Config(), **change), constant(1e-3))


LEARNED = 0.4  # nats of loss every optimizer's defaults take off a tiny model in STEPS steps
STEPS = 50


def _periodic_batch():
    """16 rows counting up by one from different starts: next token = this token + 1 (mod vocab)."""
    starts = np.arange(16)[:, None] * 4
    return jnp.asarray((starts + np.arange(CFG.block_size + 1)[None, :]) % CFG.vocab_size, jnp.int32)


@pytest.mark.slow
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.name)
def test_each_optimizers_default_rate_trains_a_small_model(cls):
    """A recipe of the optimizer whose config sets no rate: the composed ``optimization.lr`` is the part's
    default, and STEPS steps of the recipe's optimizer (clipping, default schedule) take LEARNED nats off."""
    recipe = type("OnlyOptimizer", (Recipe,), {"OPTIMIZER": cls})
    config = load_config(None, recipe.Config)
    assert config.optimization.lr == cls.Config().lr
    model, tokens = GPT(CFG), _periodic_batch()
    optimizer = recipe().optimizer(config, STEPS)

    def loss_of(params):
        logits = model.apply({"params": params}, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    params = model.init(jax.random.PRNGKey(0), tokens[:, :-1])["params"]
    state, losses = optimizer.init(params), []
    for _ in range(STEPS):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    assert losses[0] - losses[-1] > LEARNED, (cls.name, losses[0], losses[-1])


@job("tests/train/lion-defaults", "Pretrain with Lion, the README's example's optimizer.")
class LionPretrain(Pretrain):
    OPTIMIZER = Lion


@pytest.mark.slow
def test_the_rate_a_run_records_is_the_rate_it_trains_with(tmp_path):
    """No ``optimization.lr`` set: the run records Lion's default and its schedule peaks there; a rate set wins."""
    write_dataset(tmp_path, tokens=5000)
    for rate in (None, 1e-3):
        cfg = config(training={"tokens": 8 * 32 * 4}, logging={"report_interval": 1})
        cfg["optimization"].pop("lr")  # the tiny configs' own rate
        if rate:
            cfg["optimization"]["lr"] = rate
        with quick(str(tmp_path)) as q:
            q.build("tests/train/lion-defaults", "lion-set" if rate else "lion-default")
            q.config.merge_with(OmegaConf.create(cfg))
            job = q.create()
            first = job.node
            job()
        store = Store(str(tmp_path))
        recorded = OmegaConf.create(store.record(first)[schema.CONFIG]).optimization.lr
        used = [store.record(n)["train/lr"] for n in store.find().nonce(first.nonce).has("train/lr").all()]
        assert recorded == (rate or Lion.Config().lr) and used == [pytest.approx(recorded)] * 4


def test_muon_leaves_an_untied_output_layer_to_adam():
    from theseus.model.decoder import Decoder
    from theseus.model.decoder_config import DecoderConfig

    cfg = DecoderConfig.for_family("llama", n_embd=32, n_head=4, n_layers=1, vocab_size=64, intermediate_size=48,
                                   block_size=16)
    params = Decoder(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    orthogonalised = paths(muon_dimension_numbers(params), lambda n: n is not None)
    assert "lm_head/kernel" in paths(params, lambda p: p.ndim == 2) and "lm_head/kernel" not in orthogonalised
    assert orthogonalised == [f"blocks_0/{name}/kernel" for name in (
        "attn/k_proj", "attn/o_proj", "attn/q_proj", "attn/v_proj", "mlp/down_proj", "mlp/gate_proj", "mlp/up_proj")]
