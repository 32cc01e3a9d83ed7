"""LoRA as a transform of a training recipe: the trained parameters are the adapters, the base is frozen.

`theseus.model.lora` holds the math; this module fits it to the composed trainer:

- ``lora`` config section (`LoraConfig`): ``rank``, ``alpha``, ``dropout``, ``targets`` (`lora_spec`).
- `LoraModel`: the module a LoRA recipe trains. Its parameters are the adapters of the base model's
  targeted projections (``{path: {lora_a, lora_b}}``, initialised as peft does), so the trainer's
  layout, optimizer state and checkpoints hold the adapters only. Called with ``frozen=`` the base
  parameters it is the adapted base model; without them it refuses (a reader of ``params`` alone,
  such as an analysis, sees no model).
- `lora_forward`: the recipe's ``forward`` (`theseus.train.objective`): the step differentiates the
  adapters only, the base arrives as the trainer's ``frozen`` tree (`theseus.train.trainer.Trainer.freeze`).
- `lora_part`: the model part of a LoRA run: the base family's part (same name and ``architecture``), whose
  FLOPs per token are the base's forward and its input gradients (4N of 6N: no kernel gradient) for MFU.

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder import Decoder
>>> from theseus.model.decoder_config import DecoderConfig
>>> base = Decoder(DecoderConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, intermediate_size=24,
...                              block_size=8, activation_dtype="float32"))
>>> idx = jnp.arange(8)[None]
>>> frozen = base.init(jax.random.PRNGKey(0), idx)["params"]
>>> model = LoraModel.of(base, LoraSpec(rank=2), block_size=8)
>>> adapters = model.init(jax.random.PRNGKey(1), idx)["params"]
>>> sorted(adapters["blocks_0"]["attn"]), adapters["blocks_0"]["mlp"]["up_proj"]["lora_b"].shape
(['k_proj', 'o_proj', 'q_proj', 'v_proj'], (2, 24))
>>> bool(jnp.array_equal(model.apply({"params": adapters}, idx, frozen=frozen), base.apply({"params": frozen}, idx)))
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.errors import BadInput
from theseus.model import lora
from theseus.model.lora import LoraSpec
from theseus.train.models import Model
from theseus.train.objective import OPTIONAL_KEYS, Forward

__all__ = ["LoraConfig", "LoraModel", "lora_forward", "lora_part", "lora_spec"]

#: the share of a full training step's FLOPs (6N) a LoRA step spends: forward 2N, input gradients 2N
STEP_SHARE = 4.0 / 6.0
_DROPOUT_STREAM = 0x10A  # folded into a step's key for the adapters' dropout, apart from the model's own


@dataclasses.dataclass
class LoraConfig:
    """``lora``: the adapters' ``rank``, ``alpha`` (the term is scaled by alpha / rank), ``dropout`` on their
    input while training, and ``targets`` (`theseus.model.lora.LoraSpec`: ``all`` attention and MLP
    projections, or comma-separated module names / patterns of their paths).

    >>> LoraConfig().targets
    'all'
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: str = lora.ALL


def lora_spec(section: Any) -> LoraSpec:
    """The `LoraSpec` of a ``lora`` section (a DictConfig, mapping or `LoraConfig`); bad values are a BadInput.

    >>> lora_spec({"rank": 4, "alpha": 8}).scale
    2.0
    """
    values = dict(section) if isinstance(section, Mapping) else dataclasses.asdict(section) \
        if dataclasses.is_dataclass(section) else dict(section.items())
    return LoraSpec(rank=values.get("rank", 8), alpha=float(values.get("alpha", 16.0)),
                    dropout=float(values.get("dropout", 0.0)), targets=str(values.get("targets", lora.ALL)))


@dataclasses.dataclass(frozen=True, eq=False)
class _Held:
    """A base module held by reference, so flax does not adopt it as a child of `LoraModel` (its parameters
    are the frozen tree, never the adapters')."""

    module: nn.Module


class _Adapter(nn.Module):
    """``lora_a`` [fan_in, rank] uniform in ±1/sqrt(fan_in) and ``lora_b`` [rank, fan_out] zeros."""

    fan_in: int
    fan_out: int
    rank: int

    @nn.compact
    def __call__(self) -> dict[str, jax.Array]:
        bound = 1.0 / math.sqrt(self.fan_in)

        def uniform(key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
            return jax.random.uniform(key, shape, dtype, -bound, bound)

        a = self.param("lora_a", uniform, (self.fan_in, self.rank), jnp.float32)
        b = self.param("lora_b", nn.initializers.zeros, (self.rank, self.fan_out), jnp.float32)
        return {"lora_a": a, "lora_b": b}


class _Group(nn.Module):
    """The adapters under one path component: ``entries`` is ``((name, subtree or (fan_in, fan_out)), ...)``."""

    entries: tuple
    rank: int

    @nn.compact
    def __call__(self) -> dict[str, Any]:
        out = {}
        for name, value in self.entries:
            if isinstance(value[0], int):
                out[name] = _Adapter(value[0], value[1], self.rank, name=name)()
            else:
                out[name] = _Group(value, self.rank, name=name)()
        return out


def _entries(shapes: Mapping[str, tuple[int, int]]) -> tuple:
    tree: dict[str, Any] = {}
    for path, shape in sorted(shapes.items()):
        *parents, last = path.split("/")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = tuple(shape)

    def freeze(node: dict) -> tuple:
        return tuple((k, v if isinstance(v, tuple) else freeze(v)) for k, v in sorted(node.items()))

    return freeze(tree)


class _AdaptedConfig:
    """A base model's config read through, but for ``dropout``: the larger of the base's and ``adapters``'."""

    def __init__(self, base: Any, adapters: float):
        self._base, self._adapters = base, adapters

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    @property
    def dropout(self) -> float:
        return max(float(getattr(self._base, "dropout", 0.0)), self._adapters)


class LoraModel(nn.Module):
    """The adapters of ``base``'s projections at ``entries`` (`of` builds it), applied over a frozen base.

    ``__call__(idx, deterministic=True, *, frozen, rng=None, **extras)``: the logits of ``base`` with params
    ``frozen`` and these adapters (`theseus.model.lora.apply`; ``extras``: positions, a cache, segment ids);
    ``rng`` with ``deterministic=False`` draws the adapters' dropout and the base's own.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.gpt import GPT
    >>> from theseus.model.config import GPTConfig
    >>> model = LoraModel.of(GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32)), LoraSpec(), 4)
    >>> adapters = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> model.apply({"params": adapters}, jnp.zeros((1, 4), jnp.int32))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a LoRA model runs over its frozen base parameters: call it with frozen=...
    """

    held: _Held
    spec: LoraSpec
    entries: tuple

    @classmethod
    def of(cls, base: nn.Module, spec: LoraSpec, block_size: int = 1) -> LoraModel:
        """The LoRA model of ``base`` adapting what ``spec`` targets (a target selecting nothing is a BadInput)."""
        return cls(_Held(base), spec, _entries(lora.projections(base, spec, block_size)))

    @property
    def base(self) -> nn.Module:
        """The base model (its parameters are the frozen tree)."""
        return self.held.module

    @property
    def config(self) -> Any:
        """The base model's config (what decoding and the evaluations read), its ``dropout`` the larger of the
        base's and the adapters' (the step draws dropout keys when it is positive)."""
        return _AdaptedConfig(self.base.config, self.spec.dropout)

    def merged(self, adapters: Any, frozen: Any) -> tuple[nn.Module, Any]:
        """``(base module, its params with the adapters merged)``: the adapted model as one plain model, what
        sampling and the evaluations read (`theseus.model.lora.merge`).

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.gpt import GPT
        >>> from theseus.model.config import GPTConfig
        >>> base = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
        >>> model, x = LoraModel.of(base, LoraSpec(), 4), jnp.zeros((1, 4), jnp.int32)
        >>> plain, params = model.merged(model.init(jax.random.PRNGKey(0), x)["params"],
        ...                              base.init(jax.random.PRNGKey(1), x)["params"])
        >>> plain is base, sorted(params)
        (True, ['blocks_0', 'ln_f', 'wte'])
        """
        return self.base, lora.merge(frozen, adapters, self.spec)

    def init_cache(self, batch: int, length: int) -> Any:
        """The base model's empty key/value cache."""
        return self.base.init_cache(batch, length)

    @nn.compact
    def __call__(self, idx: jax.Array, deterministic: bool = True, *, frozen: Any = None,
                 rng: jax.Array | None = None, **extras: Any) -> Any:
        adapters = {name: (_Adapter(v[0], v[1], self.spec.rank, name=name)() if isinstance(v[0], int)
                           else _Group(v, self.spec.rank, name=name)()) for name, v in self.entries}
        if self.is_initializing():
            return adapters
        if frozen is None:
            raise BadInput("a LoRA model runs over its frozen base parameters: call it with frozen=...")
        dropping = rng is not None and not deterministic
        rngs = {"dropout": rng} if dropping else None
        key = jax.random.fold_in(rng, _DROPOUT_STREAM) if dropping else None
        return lora.apply(self.base, frozen, adapters, self.spec, idx, rng=key, deterministic=deterministic,
                          rngs=rngs, **extras)


def lora_forward(model: LoraModel) -> Forward:
    """The forward of a LoRA recipe: ``forward(adapters, frozen base, batch, *, deterministic, rng)``, the batch's
    optional keys (a packed batch's) passed to the base model.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.gpt import GPT
    >>> from theseus.model.config import GPTConfig
    >>> base = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> model = LoraModel.of(base, LoraSpec(targets="c_fc"), 4)
    >>> x = jnp.zeros((2, 4), jnp.int32)
    >>> adapters, frozen = model.init(jax.random.PRNGKey(0), x)["params"], base.init(jax.random.PRNGKey(1), x)["params"]
    >>> lora_forward(model)(adapters, frozen, {"x": x}).shape
    (2, 4, 32)
    """

    def forward(params: Any, frozen: Any, batch: Mapping[str, Any], *, deterministic: bool = True,
                rng: jax.Array | None = None) -> jax.Array:
        extras = {key: batch[key] for key in OPTIONAL_KEYS if key in batch}
        return model.apply({"params": params}, batch["x"], deterministic, frozen=frozen, rng=rng, **extras)

    return forward


def lora_part(base: type[Model]) -> type[Model]:
    """The model part of a LoRA run over ``base``'s model: ``base`` itself (its name, ``architecture`` section,
    check and module) but for the FLOPs per token MFU divides by: `STEP_SHARE` of the base's, whatever the
    ``params`` (the adapters) it is given.

    >>> from theseus.train.models import DECODER_PARTS
    >>> part = lora_part(DECODER_PARTS["llama"])
    >>> part.name, part.Config is DECODER_PARTS["llama"].Config
    ('llama', True)
    """

    def flops_per_token(cls: type, config: Any, params: Any) -> float:
        module = base.build(config)
        whole = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32))["params"])
        return STEP_SHARE * base.flops_per_token(config, whole)

    return type(f"{base.__name__}Adapters", (base,), {"flops_per_token": classmethod(flops_per_token),
                                                  "__module__": __name__, "__doc__": base.__doc__})
