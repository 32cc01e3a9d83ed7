"""GPT architecture config: the `architecture` section of a training job.

The config file spells it as a nested mapping (`dtype.param`, `instrumentation.residual`,
...); `GPTConfig` holds the same values as flat, frozen, validated fields so it can be
a hashable attribute of a flax module.

>>> cfg = GPTConfig.from_mapping({"n_embd": 64, "n_head": 4, "n_layers": 2})
>>> cfg.head_dim, cfg.mlp_dim
(16, 256)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from theseus.errors import BadInput

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

# nested key in the config file -> flat field name
_NESTED = {
    ("dtype", "param"): "param_dtype",
    ("dtype", "activation"): "activation_dtype",
    ("instrumentation", "residual"): "instrument_residual",
    ("instrumentation", "components"): "instrument_components",
}


class DtypePolicy:
    """The jnp dtypes of a config's ``param_dtype`` and ``activation_dtype`` names (a mixin of the model configs).

    >>> GPTConfig(activation_dtype="float32").activation_jnp_dtype.__name__
    'float32'
    """

    param_dtype: str
    activation_dtype: str

    @property
    def param_jnp_dtype(self):
        """The parameter dtype as a jnp dtype."""
        return DTYPES[self.param_dtype]

    @property
    def activation_jnp_dtype(self):
        """The activation (compute) dtype as a jnp dtype."""
        return DTYPES[self.activation_dtype]


@dataclasses.dataclass(frozen=True)
class GPTConfig(DtypePolicy):
    """Shape and numerics of a GPT; defaults are the `gpt/train/pretrain` defaults.

    `intermediate_size=-1` means 4 * n_embd. `instrument_residual` and
    `instrument_components` are carried for the debugging tools and do not change the
    forward pass.

    >>> GPTConfig(n_embd=64, n_head=4, n_layers=2, vocab_size=256).mlp_dim
    256
    >>> GPTConfig(n_embd=64, n_head=5)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: n_embd (64) must be divisible by n_head (5)
    """

    param_dtype: str = "float32"
    activation_dtype: str = "bfloat16"
    n_embd: int = 2048
    n_layers: int = 32
    bias: bool = True
    dropout: float = 0.0
    n_head: int = 16
    block_size: int = 512
    rope: bool = True
    vocab_size: int = 100288
    instrument_residual: bool = False
    instrument_components: bool = False
    layer_norm_eps: float = 1e-5
    intermediate_size: int = -1

    def __post_init__(self):
        for name in ("param_dtype", "activation_dtype"):
            value = getattr(self, name)
            if value not in DTYPES:
                raise BadInput(f"{name} {value!r} is not a known dtype; use one of {sorted(DTYPES)}")
        for name in ("n_embd", "n_layers", "n_head", "block_size", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BadInput(f"{name} must be a positive int, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise BadInput(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.rope and self.head_dim % 2 != 0:
            raise BadInput(
                f"rope needs an even head_dim, got n_embd/n_head = {self.n_embd}/{self.n_head} = {self.head_dim}"
            )
        if not isinstance(self.intermediate_size, int) or (
            self.intermediate_size != -1 and self.intermediate_size <= 0
        ):
            raise BadInput(f"intermediate_size must be -1 or a positive int, got {self.intermediate_size!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise BadInput(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.layer_norm_eps > 0:
            raise BadInput(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head, n_embd // n_head."""
        return self.n_embd // self.n_head

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the MLP: intermediate_size, or 4 * n_embd when it is -1."""
        return 4 * self.n_embd if self.intermediate_size == -1 else self.intermediate_size

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> GPTConfig:
        """Build from the config file's `architecture` mapping (dict or OmegaConf).

        Nested keys (`dtype: {param, activation}`, `instrumentation: {residual,
        components}`) and the flat field names are both accepted; an unknown key is a
        ValueError that names it.

        >>> GPTConfig.from_mapping({"dtype": {"activation": "float32"}, "n_embd": 64, "n_head": 4}).activation_dtype
        'float32'
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in mapping.items():
            if key in ("dtype", "instrumentation") and isinstance(value, Mapping):
                for sub, subvalue in value.items():
                    flat = _NESTED.get((key, sub))
                    if flat is None:
                        unknown.append(f"{key}.{sub}")
                    else:
                        kwargs[flat] = subvalue
            elif key in fields:
                kwargs[key] = value
            else:
                unknown.append(str(key))
        if unknown:
            known = sorted(fields - set(_NESTED.values())) + [".".join(k) for k in _NESTED]
            raise BadInput(f"unknown architecture keys {unknown}; known keys are {sorted(known)}")
        return cls(**kwargs)

    def to_mapping(self) -> dict[str, Any]:
        """The nested mapping the config file uses (inverse of `from_mapping`).

        >>> GPTConfig().to_mapping()["dtype"]
        {'param': 'float32', 'activation': 'bfloat16'}
        """
        out: dict[str, Any] = {}
        nested = {flat: path for path, flat in _NESTED.items()}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in nested:
                group, key = nested[f.name]
                out.setdefault(group, {})[key] = value
            else:
                out[f.name] = value
        order = [
            "dtype",
            "n_embd",
            "n_layers",
            "bias",
            "dropout",
            "n_head",
            "block_size",
            "rope",
            "vocab_size",
            "instrumentation",
            "layer_norm_eps",
            "intermediate_size",
        ]
        return {k: out[k] for k in order}
