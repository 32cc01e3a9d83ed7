"""What the forward trace needs from each kind of model: its module types, where its attention's queries,
keys and values and its heads' mixed output appear, its attention window, and how its final norm and
unembedding read a point of the residual stream out.

One `Adapter` per model class (`ADAPTERS`: the theseus GPT and the open-model `Decoder`, whose configs
cover Llama, Mistral, Qwen, Gemma and GPT-NeoX); `adapter_for` picks the one a module is. Each one
rebuilds the model's own layers on its own parameters, so a read-out of the last point is the model's
logits.

>>> from theseus.model import GPT, GPTConfig
>>> adapter_for(GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))).name
'gpt'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model.config import GPTConfig
from theseus.model.decoder import Decoder, Unembedding
from theseus.model.decoder_config import DecoderConfig
from theseus.model.gpt import GPT
from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.block import Block
from theseus.model.layers.decoder_block import DecoderBlock
from theseus.model.layers.dense import layer_norm
from theseus.model.layers.feedforward import DecoderMLP
from theseus.model.layers.gqa import GroupedQueryAttention
from theseus.model.layers.mlp import MLP
from theseus.model.layers.norms import decoder_norm
from theseus.model.layers.rope import apply_rope

__all__ = ["ADAPTERS", "Adapter", "DecoderAdapter", "GPTAdapter", "adapter_for"]

Path = tuple[str, ...]
Heads = tuple[jax.Array, jax.Array, jax.Array]


class Adapter:
    """How the trace reads one model class (subclasses set the types and override the methods).

    - ``model``, ``block``, ``attention``, ``mlp``: the module classes of the model, its blocks, their
      attention and their MLP (a block's call carries the residual stream in and out);
    - `capture`: of one intercepted module call, what the attention computed with, if anything;
    - `heads`: the stacked captures as queries, keys and values, one per query head;
    - `read_out`: the final norm and unembedding as a function of one stream point.

    >>> sorted(a.name for a in ADAPTERS)
    ['decoder', 'gpt']
    """

    name: str
    model: type
    block: type
    attention: type
    mlp: type

    def capture(self, module: nn.Module, method: str, path: Path, args: tuple,
                out: Any) -> tuple[Path, str, Any] | None:
        """``(attention path, "qkv" or "mixed", value)`` for a call that carries the attention's projected
        heads or its mixed output, else None."""
        raise NotImplementedError

    def heads(self, config: Any, qkv: list[Any]) -> Heads:
        """Queries, keys and values ``[L, S, T, n_head, head_dim]`` (positions applied, key/value heads
        repeated per query head) from each layer's ``qkv`` capture."""
        raise NotImplementedError

    def n_head(self, config: Any) -> int:
        """Query heads per attention."""
        return int(config.n_head)

    def window(self, config: Any) -> int:
        """How many positions a query sees, itself included (0: every earlier one)."""
        return 0

    def read_out(self, config: Any, params: Any) -> Callable[[jax.Array], jax.Array]:
        """The final norm then the unembedding: a stream point ``[S, T, C]`` -> float32 logits ``[S, T, V]``."""
        raise NotImplementedError


class GPTAdapter(Adapter):
    """The theseus GPT: a fused ``c_attn`` projection (queries, keys, values side by side), RoPE when the
    config asks, ``ln_f`` and the tied embedding.

    >>> import jax, jax.numpy as jnp
    >>> cfg = GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4, activation_dtype="float32")
    >>> q, k, v = GPTAdapter().heads(cfg, [jnp.ones((1, 3, 48))])
    >>> q.shape, bool(jnp.all(v == 1))
    ((1, 1, 3, 2, 8), True)
    """

    name, model, block, attention, mlp = "gpt", GPT, Block, CausalSelfAttention, MLP

    def capture(self, module, method, path, args, out):
        if method != "__call__" or len(path) < 2:
            return None
        if path[-1] == "c_attn":
            return path[:-1], "qkv", out
        if path[-1] == "c_proj":
            return path[:-1], "mixed", args[0]
        return None

    def heads(self, config: GPTConfig, qkv):
        fused = jnp.stack(qkv)
        layers, samples, T, _ = fused.shape
        split = jnp.split(fused.reshape(layers * samples, T, -1), 3, axis=-1)
        q, k, v = (x.reshape(layers * samples, T, config.n_head, config.head_dim) for x in split)
        if config.rope:
            q, k = apply_rope(q, jnp.arange(T)), apply_rope(k, jnp.arange(T))
        return tuple(x.reshape(layers, samples, T, config.n_head, config.head_dim) for x in (q, k, v))

    def read_out(self, config: GPTConfig, params):
        dtype = config.activation_jnp_dtype
        norm = layer_norm(config)
        embedding = jnp.asarray(params["wte"]["embedding"]).astype(dtype)

        def logits(point: jax.Array) -> jax.Array:
            x = norm.apply({"params": params["ln_f"]}, point.astype(dtype))
            return jnp.einsum("btc,vc->btv", x, embedding, preferred_element_type=jnp.float32)

        return logits


class DecoderAdapter(Adapter):
    """The open-model `Decoder`: queries and keys as its attention computed with (normed when ``qk_norm``,
    rotated), each key/value head shared by ``group_size`` query heads, a sliding window when set; the final
    norm (RMSNorm, Gemma's 1 + w, or NeoX's LayerNorm) and a tied or untied unembedding.

    >>> import jax.numpy as jnp
    >>> cfg = DecoderConfig(n_embd=32, n_head=4, n_kv_head=2, sliding_window=3)
    >>> kv = jnp.ones((1, 5, 2, 8))
    >>> q, k, v = DecoderAdapter().heads(cfg, [(jnp.ones((1, 5, 4, 8)), kv, kv)])
    >>> k.shape, DecoderAdapter().window(cfg)
    ((1, 1, 5, 4, 8), 3)
    """

    name, model, block, attention, mlp = "decoder", Decoder, DecoderBlock, GroupedQueryAttention, DecoderMLP

    def capture(self, module, method, path, args, out):
        if method == "_qkv" and isinstance(module, GroupedQueryAttention):
            return path, "qkv", out
        if method == "__call__" and len(path) >= 2 and path[-1] == "o_proj":
            return path[:-1], "mixed", args[0]
        return None

    def heads(self, config: DecoderConfig, qkv):
        q, k, v = (jnp.stack([layer[i] for layer in qkv]) for i in range(3))
        return q, jnp.repeat(k, config.group_size, axis=3), jnp.repeat(v, config.group_size, axis=3)

    def window(self, config: DecoderConfig) -> int:
        return int(config.sliding_window)

    def read_out(self, config: DecoderConfig, params):
        dtype = config.activation_jnp_dtype
        norm = decoder_norm(config)
        unembed = Unembedding(config.vocab_size, dtype, config.param_jnp_dtype)

        def logits(point: jax.Array) -> jax.Array:
            x = norm.apply({"params": params["final_norm"]}, point.astype(dtype))
            if config.tie_embeddings:
                embedding = jnp.asarray(params["embed"]["embedding"]).astype(dtype)
                return jnp.einsum("btc,vc->btv", x, embedding, preferred_element_type=jnp.float32)
            return unembed.apply({"params": params["lm_head"]}, x)

        return logits


ADAPTERS: tuple[Adapter, ...] = (GPTAdapter(), DecoderAdapter())


def adapter_for(module: nn.Module) -> Adapter | None:
    """The adapter of ``module``'s class (a GPT or a Decoder), else None.

    >>> import flax.linen as nn
    >>> adapter_for(nn.Dense(3)) is None
    True
    """
    return next((a for a in ADAPTERS if isinstance(module, a.model)), None)
