import dataclasses

import pytest

from theseus.model.config import GPTConfig

SEED_ARCHITECTURE = {
    "dtype": {"param": "float32", "activation": "bfloat16"},
    "n_embd": 2048,
    "n_layers": 32,
    "bias": True,
    "dropout": 0.0,
    "n_head": 16,
    "block_size": 512,
    "rope": True,
    "vocab_size": 100288,
    "instrumentation": {"residual": False, "components": False},
    "layer_norm_eps": 1e-05,
    "intermediate_size": -1,
}


def test_defaults_are_the_seed_architecture():
    assert GPTConfig().to_mapping() == SEED_ARCHITECTURE
    assert GPTConfig.from_mapping(SEED_ARCHITECTURE) == GPTConfig()


def test_to_mapping_keeps_the_seed_key_order():
    assert list(GPTConfig().to_mapping()) == list(SEED_ARCHITECTURE)


def test_from_mapping_nested_and_flat_keys():
    cfg = GPTConfig.from_mapping(
        {"dtype": {"activation": "float32"}, "param_dtype": "bfloat16", "n_embd": 64, "n_head": 4,
         "instrumentation": {"residual": True}}
    )
    assert (cfg.activation_dtype, cfg.param_dtype, cfg.instrument_residual) == ("float32", "bfloat16", True)
    assert GPTConfig.from_mapping(cfg.to_mapping()) == cfg


def test_from_mapping_accepts_omegaconf():
    from omegaconf import OmegaConf

    cfg = GPTConfig.from_mapping(OmegaConf.create(SEED_ARCHITECTURE | {"n_embd": 128, "n_layers": 4}))
    assert (cfg.n_embd, cfg.n_layers, cfg.param_dtype) == (128, 4, "float32")


def test_derived_sizes():
    cfg = GPTConfig(n_embd=128, n_head=4)
    assert cfg.head_dim == 32
    assert cfg.mlp_dim == 512
    assert GPTConfig(n_embd=128, n_head=4, intermediate_size=300).mlp_dim == 300


def test_frozen_and_hashable():
    cfg = GPTConfig()
    hash(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_embd = 4


def test_n_head_must_divide_n_embd():
    with pytest.raises(ValueError, match=r"n_embd \(100\).*n_head \(16\)"):
        GPTConfig(n_embd=100, n_head=16)


def test_odd_head_dim_needs_rope_off():
    with pytest.raises(ValueError, match="rope.*head_dim"):
        GPTConfig(n_embd=36, n_head=12)
    assert GPTConfig(n_embd=36, n_head=12, rope=False).head_dim == 3


def test_unknown_dtype():
    with pytest.raises(ValueError, match="activation_dtype 'float8'"):
        GPTConfig(activation_dtype="float8")
    with pytest.raises(ValueError, match="param_dtype"):
        GPTConfig.from_mapping({"dtype": {"param": "fp32"}})


def test_unknown_keys_are_named():
    with pytest.raises(ValueError, match="n_embed"):
        GPTConfig.from_mapping({"n_embed": 64})
    with pytest.raises(ValueError, match="dtype.grad"):
        GPTConfig.from_mapping({"dtype": {"grad": "float32"}})


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"n_layers": 0}, "n_layers"),
        ({"vocab_size": -1}, "vocab_size"),
        ({"dropout": 1.0}, "dropout"),
        ({"intermediate_size": 0}, "intermediate_size"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"block_size": 2.5}, "block_size"),
    ],
)
def test_bad_values(kwargs, word):
    with pytest.raises(ValueError, match=word):
        GPTConfig(**kwargs)
