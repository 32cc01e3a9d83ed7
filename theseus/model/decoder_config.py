"""The open-model decoder's config: one frozen dataclass whose switches cover Llama, Mistral, Qwen2/3, Gemma and
GPT-NeoX (`FAMILIES` holds each family's switches; `DecoderConfig.for_family` starts from them).

The config file spells it like the GPT's `architecture` section: flat keys, plus the nested
``dtype: {param, activation}``.

>>> cfg = DecoderConfig.for_family("qwen3", n_embd=64, n_head=4, n_kv_head=2, n_layers=2, vocab_size=128)
>>> cfg.qk_norm, cfg.kv_heads, cfg.head_size, cfg.group_size
(True, 2, 16, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from theseus.errors import BadInput
from theseus.model.config import DTYPES, DtypePolicy

#: how each family departs from the defaults (Llama's): the switches `for_family` sets
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {},
    "qwen2": {"qkv_bias": True, "rope_theta": 1000000.0},
    "qwen3": {"qk_norm": True, "rope_theta": 1000000.0},
    "gemma": {"norm_unit_offset": True, "embed_scale": True, "tie_embeddings": True, "activation": "gelu_tanh"},
    "gpt_neox": {"norm": "layernorm", "norm_eps": 1e-5, "mlp": "plain", "activation": "gelu", "qkv_bias": True,
                 "o_bias": True, "mlp_bias": True, "norm_bias": True, "rotary_pct": 0.25, "parallel_residual": True},
}
NORMS = ("rmsnorm", "layernorm")
MLPS = ("gated", "plain")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
ROPE_SCALINGS = ("none", "linear", "llama3")
#: `remat` values: no activation checkpointing, or the `jax.checkpoint_policies` policy of that name
#: `attention` values: cuDNN's fused kernel where it applies (a GPU, bf16/fp16), or always XLA's
ATTENTION = ("auto", "xla")
REMAT_POLICIES = ("none", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
                  "everything_saveable")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise BadInput(f"{name} {value!r} is not one of {', '.join(allowed)}")


@dataclasses.dataclass(frozen=True)
class DecoderConfig(DtypePolicy):
    """Shape, switches and numerics of a decoder (see the module doc); every field changes the forward pass or,
    for ``family``, the Hugging Face names an export writes.

    ``n_kv_head=-1``: as many key/value heads as query heads; ``head_dim=-1``: n_embd // n_head.
    ``sliding_window``: each token sees itself and the window-1 tokens before it (0: all of them).
    ``rotary_pct``: the leading fraction of each head's dims RoPE rotates. ``remat``: activation
    checkpointing of every block under that `jax.checkpoint_policies` policy ("none": off). ``attention``: "auto"
    takes cuDNN's fused kernel on a GPU in bf16/fp16 (not over packed rows, given ``segment_ids`` or ``positions``:
    XLA's with their mask), "xla" always XLA's.

    >>> DecoderConfig(n_embd=64, n_head=4, n_kv_head=3)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: n_head (4) must be a multiple of n_kv_head (3)
    >>> DecoderConfig(rope_scaling="yarn")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: rope_scaling 'yarn' is not one of none, linear, llama3
    """

    family: str = "llama"
    param_dtype: str = "float32"
    activation_dtype: str = "bfloat16"
    vocab_size: int = 32000
    n_embd: int = 2048
    n_layers: int = 16
    n_head: int = 16
    n_kv_head: int = -1
    head_dim: int = -1
    intermediate_size: int = 5632
    block_size: int = 2048
    norm: str = "rmsnorm"
    norm_eps: float = 1e-6
    norm_unit_offset: bool = False
    norm_bias: bool = False
    mlp: str = "gated"
    activation: str = "silu"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    rope_theta: float = 10000.0
    rotary_pct: float = 1.0
    rope_scaling: str = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position: int = 8192
    sliding_window: int = 0
    parallel_residual: bool = False
    embed_scale: bool = False
    tie_embeddings: bool = False
    remat: str = "none"
    attention: str = "auto"

    def __post_init__(self):
        _choice("family", self.family, tuple(FAMILIES))
        _choice("norm", self.norm, NORMS)
        _choice("mlp", self.mlp, MLPS)
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("rope_scaling", self.rope_scaling, ROPE_SCALINGS)
        _choice("remat", self.remat, REMAT_POLICIES)
        _choice("attention", self.attention, ATTENTION)
        for name in ("param_dtype", "activation_dtype"):
            _choice(name, getattr(self, name), tuple(DTYPES))
        for name in ("vocab_size", "n_embd", "n_layers", "n_head", "intermediate_size", "block_size",
                     "rope_original_max_position"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BadInput(f"{name} must be a positive int, got {value!r}")
        for name in ("n_kv_head", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or (value != -1 and value <= 0):
                raise BadInput(f"{name} must be -1 or a positive int, got {value!r}")
        if self.head_dim == -1 and self.n_embd % self.n_head:
            raise BadInput(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}) "
                             "unless head_dim is set")
        if self.n_head % self.kv_heads:
            raise BadInput(f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.kv_heads})")
        if not 0 < self.rotary_pct <= 1 or self.rotary_dim < 2 or self.rotary_dim % 2:
            raise BadInput(f"rotary_pct {self.rotary_pct} must be in (0, 1] and rotate an even number (>= 2) of dims "
                             f"(here {self.rotary_dim} of head_dim {self.head_size})")
        if isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int) or self.sliding_window < 0:
            raise BadInput(f"sliding_window must be an int >= 0 (0: no window), got {self.sliding_window!r}")
        for name in ("norm_eps", "rope_theta", "rope_factor"):
            if not getattr(self, name) > 0:
                raise BadInput(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.rope_scaling == "llama3" and not self.rope_high_freq_factor > self.rope_low_freq_factor > 0:
            raise BadInput("llama3 rope scaling needs rope_high_freq_factor > rope_low_freq_factor > 0, got "
                             f"{self.rope_high_freq_factor} and {self.rope_low_freq_factor}")
        if self.norm == "rmsnorm" and self.norm_bias:
            raise BadInput("norm_bias needs norm='layernorm' (an RMSNorm has no bias)")

    @classmethod
    def for_family(cls, family: str, **fields: Any) -> DecoderConfig:
        """A config with ``family``'s switches (`FAMILIES`), then ``fields`` on top.

        >>> DecoderConfig.for_family("gemma", n_embd=32, n_head=4).embed_scale
        True
        """
        if family not in FAMILIES:
            raise BadInput(f"unknown decoder family {family!r}; known: {', '.join(FAMILIES)}")
        return cls(**{"family": family, **FAMILIES[family], **fields})

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (n_kv_head, or n_head when it is -1)."""
        return self.n_head if self.n_kv_head == -1 else self.n_kv_head

    @property
    def head_size(self) -> int:
        """Width of one attention head (head_dim, or n_embd // n_head when it is -1)."""
        return self.n_embd // self.n_head if self.head_dim == -1 else self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_head // self.kv_heads

    @property
    def rotary_dim(self) -> int:
        """Leading dims of each head that RoPE rotates: int(head_size * rotary_pct)."""
        return int(self.head_size * self.rotary_pct)

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the MLP (intermediate_size)."""
        return self.intermediate_size

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> DecoderConfig:
        """Build from the config file's `architecture` mapping: flat field names and ``dtype: {param,
        activation}``, starting from ``family``'s switches when it names one; an unknown key is a ValueError that
        names it.

        >>> DecoderConfig.from_mapping({"family": "gemma", "dtype": {"activation": "float32"}}).embed_scale
        True
        >>> DecoderConfig.from_mapping({"instrumentation": {"residual": True}}) == DecoderConfig()
        True
        >>> DecoderConfig.from_mapping({"n_emb": 3})
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: unknown decoder architecture keys ['n_emb']; did you mean n_embd?
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in mapping.items():
            if key == "dtype" and isinstance(value, Mapping):
                for sub, subvalue in value.items():
                    if sub in ("param", "activation"):
                        kwargs[f"{sub}_dtype"] = subvalue
                    else:
                        unknown.append(f"dtype.{sub}")
            elif key == "instrumentation" and isinstance(value, Mapping):
                # the norms analysis's switches: it reads them from the config, the forward pass is unchanged
                unknown.extend(f"instrumentation.{sub}" for sub in value if sub not in ("residual", "components"))
            elif key in fields:
                kwargs[key] = value
            else:
                unknown.append(str(key))
        if unknown:
            import difflib  # only for the error message

            close = difflib.get_close_matches(unknown[0], sorted(fields), n=1)
            hint = f"did you mean {close[0]}?" if close else f"known keys are {sorted(fields)}"
            raise BadInput(f"unknown decoder architecture keys {unknown}; {hint}")
        family = kwargs.pop("family", None)
        return cls(**kwargs) if family is None else cls.for_family(family, **kwargs)

    def to_mapping(self) -> dict[str, Any]:
        """The config file's mapping (inverse of `from_mapping`), with the nested ``dtype``.

        >>> cfg = DecoderConfig(n_embd=64, n_head=4)
        >>> DecoderConfig.from_mapping(cfg.to_mapping()) == cfg
        True
        """
        out: dict[str, Any] = {"dtype": {"param": self.param_dtype, "activation": self.activation_dtype}}
        for f in dataclasses.fields(self):
            if f.name not in ("param_dtype", "activation_dtype"):
                out[f.name] = getattr(self, f.name)
        return out
