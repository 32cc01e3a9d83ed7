"""Models: each a part that builds a flax module from the ``architecture`` section.

A model part's ``Config`` has at least ``block_size`` and ``vocab_size`` (the trainer
reads them to shape batches and check datasets); ``build(config)`` returns a module
called as ``module.apply({"params": p}, idx [B, T], deterministic=...) -> logits [B, T, V]``;
``check(config)`` raises on a config no module can be built from (before any device
work); ``flops_per_token(config, params)`` is the training FLOPs per token MFU divides by.

>>> import jax, jax.numpy as jnp
>>> from omegaconf import OmegaConf
>>> config = OmegaConf.structured(GPT.Config(n_embd=32, n_layers=1, n_head=2, block_size=8, vocab_size=64))
>>> module = GPT.build(config)
>>> params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
>>> module.apply({"params": params}, jnp.zeros((2, 8), jnp.int32)).shape
(2, 8, 64)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
from omegaconf import DictConfig, OmegaConf

from theseus.model import decoder, gpt
from theseus.model.config import GPTConfig
from theseus.model.decoder_config import FAMILIES, DecoderConfig
from theseus.train import mfu
from theseus.train.config import ArchitectureConfig, DtypeConfig, InstrumentationConfig
from theseus.train.parts import Part, part

__all__ = ["GPT", "DecoderFamily", "Model", "decoder_config", "gpt_config"]


def gpt_config(architecture: Any) -> GPTConfig:
    """The `GPTConfig` of an ``architecture`` section (a DictConfig, dict or dataclass); bad shapes raise.

    >>> gpt_config({"n_embd": 64, "n_head": 4, "n_layers": 1, "block_size": 8, "vocab_size": 32}).head_dim
    16
    """
    if isinstance(architecture, DictConfig):
        architecture = OmegaConf.to_container(architecture, resolve=True)
    elif not isinstance(architecture, dict):
        architecture = OmegaConf.to_container(OmegaConf.structured(architecture), resolve=True)
    return GPTConfig.from_mapping(architecture)


class Model(Part):
    """Base of the model parts (see the module doc).

    >>> Model.section
    'architecture'
    """

    section = "architecture"

    @classmethod
    def check(cls, config: Any) -> None:
        """Raise on an ``architecture`` section no module can be built from."""

    @classmethod
    def build(cls, config: Any) -> nn.Module:
        """The flax module for the ``architecture`` section ``config``."""
        raise NotImplementedError(f"{cls.__name__} must implement build()")

    @classmethod
    def flops_per_token(cls, config: Any, params: Any) -> float:
        """Training FLOPs per token of the module with parameters ``params`` (abstract is fine)."""
        raise NotImplementedError(f"{cls.__name__} must implement flops_per_token()")


@part("model", "gpt", "GPT-2-style decoder-only transformer (LayerNorm, RoPE or learned positions, tied unembedding).")
class GPT(Model):
    """`theseus.model.gpt.GPT` built from `ArchitectureConfig`.

    >>> GPT.check({"n_embd": 30, "n_head": 4})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: n_embd (30) must be divisible by n_head (4)
    """

    Config = ArchitectureConfig

    @classmethod
    def check(cls, config: Any) -> None:
        """`gpt_config` raises on a bad shape or dtype."""
        gpt_config(config)

    @classmethod
    def build(cls, config: Any) -> nn.Module:
        """``theseus.model.gpt.GPT(gpt_config(config))``."""
        return gpt.GPT(gpt_config(config))

    @classmethod
    def flops_per_token(cls, config: Any, params: Any) -> float:
        """6N + attention (`theseus.train.mfu.flops_per_token`), N without position embeddings."""
        return mfu.flops_per_token(gpt_config(config), gpt.count_params(params, non_embedding=True))


def _plain(architecture: Any) -> dict[str, Any]:
    if isinstance(architecture, DictConfig):
        return OmegaConf.to_container(architecture, resolve=True)
    if not isinstance(architecture, dict):
        return OmegaConf.to_container(OmegaConf.structured(architecture), resolve=True)
    return dict(architecture)


def decoder_config(family: str, architecture: Any) -> DecoderConfig:
    """The `DecoderConfig` of ``family`` with an ``architecture`` section's values; bad values raise.

    >>> decoder_config("qwen3", {"n_embd": 64, "n_head": 4, "n_kv_head": 2}).qk_norm
    True
    """
    return DecoderConfig.from_mapping({**_plain(architecture), "family": family})


def _section(family: str) -> type:
    """The ``architecture`` dataclass of ``family``'s part: DecoderConfig's fields (but ``family``, which the part
    fixes) with the family's switches as defaults, the GPT's vocabulary and block size, the nested ``dtype`` and
    the norms analysis's ``instrumentation``."""
    defaults = {**dataclasses.asdict(DecoderConfig()), "vocab_size": 100288, "block_size": 512, **FAMILIES[family]}
    fields: list[tuple[str, Any, Any]] = [
        ("dtype", DtypeConfig, dataclasses.field(default_factory=DtypeConfig)),
        ("instrumentation", InstrumentationConfig, dataclasses.field(default_factory=InstrumentationConfig))]
    for f in dataclasses.fields(DecoderConfig):
        if f.name not in ("family", "param_dtype", "activation_dtype"):
            fields.append((f.name, type(defaults[f.name]), dataclasses.field(default=defaults[f.name])))
    return dataclasses.make_dataclass(f"{family.title().replace('_', '')}ArchitectureConfig", fields)


class DecoderFamily(Model):
    """Base of the open-model decoder parts: `theseus.model.decoder.Decoder` with the family's switches
    (`theseus.model.decoder_config.FAMILIES`) as the ``architecture`` defaults.

    >>> from theseus.train.parts import get_part
    >>> get_part("model", "gemma").check({"n_embd": 32, "n_head": 4, "n_kv_head": 3})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: n_head (4) must be a multiple of n_kv_head (3)
    """

    @classmethod
    def check(cls, config: Any) -> None:
        """`decoder_config` raises on a bad shape, dtype or switch."""
        decoder_config(cls.name, config)

    @classmethod
    def build(cls, config: Any) -> nn.Module:
        """``theseus.model.decoder.Decoder(decoder_config(family, config))``."""
        return decoder.Decoder(decoder_config(cls.name, config))

    @classmethod
    def flops_per_token(cls, config: Any, params: Any) -> float:
        """6N + attention (`theseus.train.mfu.flops_per_token`); N leaves out an untied embedding table (a
        lookup, not a matmul)."""
        cfg = decoder_config(cls.name, config)
        n = gpt.count_params(params)
        if not cfg.tie_embeddings:
            n -= int(params["embed"]["embedding"].size)
        return mfu.flops_per_token(cfg, n)


_DESCRIPTIONS = {
    "llama": "Llama 1/2/3: RMSNorm, SwiGLU, grouped-query attention, RoPE (linear or llama3 scaling).",
    "mistral": "Mistral: Llama's blocks with a sliding attention window (architecture.sliding_window).",
    "qwen2": "Qwen2 / Qwen2.5: Llama's blocks with biases on q, k and v.",
    "qwen3": "Qwen3: Llama's blocks with an RMSNorm on each query and key head.",
    "gemma": "Gemma: embedding scaled by sqrt(n_embd), RMSNorm as (1 + w), GeGLU, tied embeddings.",
    "gpt_neox": "GPT-NeoX: LayerNorm, parallel residual, partial rotary, plain GELU MLP, biases.",
}
#: the decoder part of each family, by name
DECODER_PARTS: dict[str, type[DecoderFamily]] = {
    family: part("model", family, _DESCRIPTIONS[family])(
        type(f"{_section(family).__name__.removesuffix('ArchitectureConfig')}", (DecoderFamily,),
             {"Config": _section(family), "__module__": __name__, "__doc__": _DESCRIPTIONS[family]}))
    for family in FAMILIES
}
