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

from typing import Any

import flax.linen as nn
from omegaconf import DictConfig, OmegaConf

from theseus.model import gpt
from theseus.model.config import GPTConfig
from theseus.train import mfu
from theseus.train.config import ArchitectureConfig
from theseus.train.parts import Part, part

__all__ = ["GPT", "Model", "gpt_config"]


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


@part("model", "gpt", "Decoder-only transformer (RoPE or learned positions, tied unembedding): the seed's GPT.")
class GPT(Model):
    """`theseus.model.gpt.GPT` built from `ArchitectureConfig`.

    >>> GPT.check({"n_embd": 30, "n_head": 4})
    Traceback (most recent call last):
    ...
    ValueError: n_embd (30) must be divisible by n_head (4)
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
