"""LoRA, for any theseus model: low-rank adapters beside the frozen kernels of its projections.

A targeted projection (an ``nn.Dense`` whose "/"-joined module path `LoraSpec.targets` selects, by default
every projection of attention and MLP) computes ``base(x) + scale * dropout(x) @ A @ B`` with ``A`` [in, rank]
and ``B`` [rank, out] and ``scale = alpha / rank``. The adapters live in their own tree, the model's path
to each projection with ``{"lora_a", "lora_b"}`` under it; `apply` runs the unchanged model over the frozen
params and adds the adapters' term to each targeted Dense call's output (`theseus.model.walk.intercepting`), so a
gradient taken w.r.t. the adapters never forms a kernel-sized gradient of the base. `merge` folds the
adapters into the kernels: ``W + scale * A @ B``. Nothing here knows a family: the targets are found by
tracing the model's own Dense calls (`projections`).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder import Decoder
>>> from theseus.model.decoder_config import DecoderConfig
>>> model = Decoder(DecoderConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, intermediate_size=24,
...                               block_size=8, activation_dtype="float32"))
>>> idx = jnp.arange(8)[None]
>>> params = model.init(jax.random.PRNGKey(0), idx)["params"]
>>> spec = LoraSpec(rank=2, alpha=4.0)
>>> adapters = init_adapters(spec, projections(model, spec, block_size=8), jax.random.PRNGKey(1))
>>> sorted(adapters["blocks_0"]["mlp"]), adapters["blocks_0"]["attn"]["q_proj"]["lora_a"].shape
(['down_proj', 'gate_proj', 'up_proj'], (16, 2))
>>> bool(jnp.array_equal(apply(model, params, adapters, spec, idx), model.apply({"params": params}, idx)))
True
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.errors import BadInput
from theseus.model.walk import Call, intercepting

__all__ = ["LoraSpec", "apply", "init_adapters", "leaves", "merge", "projections"]

#: ``LoraSpec.targets``'s default: every projection of attention and MLP
ALL = "all"
_DEFAULT = re.compile(r"(.*/)?(attn|mlp)/[^/]+")


@dataclasses.dataclass(frozen=True)
class LoraSpec:
    """What to adapt and how: ``rank`` r, ``alpha`` (the term is scaled by alpha / r), ``dropout`` on the
    adapters' input while training, and ``targets``: ``all`` (every attention and MLP projection), or
    comma-separated entries, each a module name (``q_proj``) or a regular expression that fully matches a
    projection's path (``blocks_[01]/attn/.*``).

    >>> LoraSpec(rank=8, alpha=16).scale, LoraSpec(targets="q_proj, v_proj").entries
    (2.0, ('q_proj', 'v_proj'))
    >>> LoraSpec(rank=0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: lora.rank must be a positive integer, got 0
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: str = ALL

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank <= 0:
            raise BadInput(f"lora.rank must be a positive integer, got {self.rank!r}")
        if not isinstance(self.alpha, int | float) or not math.isfinite(self.alpha) or self.alpha <= 0:
            raise BadInput(f"lora.alpha must be a positive number, got {self.alpha!r}")
        if not isinstance(self.dropout, int | float) or not 0.0 <= self.dropout < 1.0:
            raise BadInput(f"lora.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.entries:
            raise BadInput("lora.targets is empty: name modules (q_proj,v_proj), a pattern, or 'all'")
        for entry in self.entries:
            try:
                re.compile(entry)
            except re.error as e:
                raise BadInput(f"lora.targets entry {entry!r} is neither a module name nor a pattern: {e}") from None

    @property
    def scale(self) -> float:
        """alpha / rank, the factor of the adapters' term.

        >>> LoraSpec(rank=4, alpha=4).scale
        1.0
        """
        return self.alpha / self.rank

    @property
    def entries(self) -> tuple[str, ...]:
        """The comma-separated entries of ``targets``, stripped.

        >>> LoraSpec().entries
        ('all',)
        """
        return tuple(e.strip() for e in str(self.targets).split(",") if e.strip())

    def selects(self, path: str) -> bool:
        """Whether the projection at ``path`` ("/"-joined module names) is adapted.

        >>> spec = LoraSpec(targets="q_proj,blocks_1/mlp/.*")
        >>> [spec.selects(p) for p in ("blocks_0/attn/q_proj", "blocks_0/mlp/up_proj", "blocks_1/mlp/up_proj")]
        [True, False, True]
        """
        return any(_matches(entry, path) for entry in self.entries)


def _matches(entry: str, path: str) -> bool:
    if entry == ALL:
        return bool(_DEFAULT.fullmatch(path))
    return entry == path.rsplit("/", 1)[-1] or re.fullmatch(entry, path) is not None


def _is_projection(call: Call) -> bool:
    return isinstance(call.module, nn.Dense) and call.is_call


def projections(model: nn.Module, spec: LoraSpec, block_size: int = 1) -> dict[str, tuple[int, int]]:
    """``{path: (in, out)}`` of every projection of ``model`` that ``spec`` targets, found by tracing the model's
    Dense calls abstractly (no memory); an entry of ``spec.targets`` that selects no projection is a BadInput
    naming it (a typo never trains nothing).

    >>> from theseus.model.gpt import GPT
    >>> from theseus.model.config import GPTConfig
    >>> found = projections(GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4)), LoraSpec())
    >>> found
    {'blocks_0/attn/c_attn': (16, 48), 'blocks_0/attn/c_proj': (16, 16), 'blocks_0/mlp/c_fc': (16, 64), 'blocks_0/mlp/c_proj': (64, 16)}
    >>> projections(GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1)), LoraSpec(targets="q_proj"))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: lora.targets entry 'q_proj' selects no projection of GPT; its projections: blocks_0/attn/c_attn, blocks_0/attn/c_proj, blocks_0/mlp/c_fc, blocks_0/mlp/c_proj
    """  # noqa: E501 - a doctest's expected output, printed on one line
    seen: dict[str, tuple[int, int]] = {}

    def record(call: Call) -> None:
        if _is_projection(call):
            seen["/".join(call.path)] = (int(call.args[0].shape[-1]), int(call.module.features))

    with intercepting(on_enter=record):
        jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, block_size), jnp.int32)))
    for entry in spec.entries:
        if not any(_matches(entry, path) for path in seen):
            raise BadInput(f"lora.targets entry {entry!r} selects no projection of {type(model).__name__}; its "
                           f"projections: {', '.join(seen)}")
    return {path: shape for path, shape in seen.items() if spec.selects(path)}


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, last = path.split("/")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return tree


def init_adapters(spec: LoraSpec, shapes: Mapping[str, tuple[int, int]], rng: jax.Array,
                  dtype: Any = jnp.float32) -> dict[str, Any]:
    """Fresh adapters for ``shapes`` (`projections`), initialised as peft does: ``lora_a`` uniform in
    ±1/sqrt(in) (kaiming-uniform with a = sqrt(5)), ``lora_b`` zeros, so the adapted model starts equal to the
    base. Projection i (in path order) draws from ``fold_in(rng, i)``.

    >>> import jax
    >>> tree = init_adapters(LoraSpec(rank=2), {"attn/q": (4, 6)}, jax.random.PRNGKey(0))
    >>> tree["attn"]["q"]["lora_a"].shape, float(abs(tree["attn"]["q"]["lora_a"]).max()) <= 0.5
    ((4, 2), True)
    """
    flat = {}
    for i, (path, (fan_in, fan_out)) in enumerate(sorted(shapes.items())):
        bound = 1.0 / math.sqrt(fan_in)
        a = jax.random.uniform(jax.random.fold_in(rng, i), (fan_in, spec.rank), dtype, -bound, bound)
        flat[path] = {"lora_a": a, "lora_b": jnp.zeros((spec.rank, fan_out), dtype)}
    return _nest(flat)


def leaves(adapters: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, jax.Array]]]:
    """``(path, {"lora_a", "lora_b"})`` of every adapted projection of an adapters tree, in path order.

    >>> [p for p, _ in leaves({"b": {"attn": {"q": {"lora_a": 1, "lora_b": 2}}}})]
    ['b/attn/q']
    """
    for key in sorted(adapters):
        value = adapters[key]
        if isinstance(value, Mapping) and "lora_a" in value:
            yield f"{prefix}{key}", value
        elif isinstance(value, Mapping):
            yield from leaves(value, f"{prefix}{key}/")


def _find(adapters: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node: Any = adapters
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) and "lora_a" in node else None


def _dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros((), x.dtype))


def apply(model: nn.Module, params: Any, adapters: Mapping[str, Any], spec: LoraSpec, *args: Any,
          rng: jax.Array | None = None, **kwargs: Any) -> Any:
    """``model.apply({"params": params}, *args, **kwargs)`` with every adapted projection's output plus
    ``spec.scale * dropout(x) @ lora_a @ lora_b`` (in the output's dtype). ``rng`` turns the adapters' dropout on
    (``spec.dropout`` > 0): projection i of ``leaves`` order drops with ``fold_in(rng, i)``; without it the
    call is deterministic. Decoding with a cache goes through the same projections, so it samples the adapted
    model too.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.gpt import GPT
    >>> from theseus.model.config import GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4, activation_dtype="float32"))
    >>> idx = jnp.arange(4)[None]
    >>> params = model.init(jax.random.PRNGKey(0), idx)["params"]
    >>> spec = LoraSpec(rank=2, alpha=2.0, targets="c_fc")
    >>> adapters = init_adapters(spec, projections(model, spec, 4), jax.random.PRNGKey(1))
    >>> adapters["blocks_0"]["mlp"]["c_fc"]["lora_b"] += 0.1
    >>> merged = merge(params, adapters, spec)
    >>> bool(jnp.allclose(apply(model, params, adapters, spec, idx), model.apply({"params": merged}, idx), atol=1e-5))
    True
    """
    index = {path: i for i, (path, _) in enumerate(leaves(adapters))}
    dropping = rng is not None and spec.dropout > 0

    def adapt(call: Call) -> Any:
        out = call.output
        adapter = _find(adapters, call.path) if _is_projection(call) else None
        if adapter is None:
            return out
        x = call.args[0]
        if dropping:
            x = _dropout(x, spec.dropout, jax.random.fold_in(rng, index["/".join(call.path)]))
        low = jnp.dot(x.astype(out.dtype), adapter["lora_a"].astype(out.dtype))
        delta = jnp.dot(low, adapter["lora_b"].astype(out.dtype))
        return out + jnp.asarray(spec.scale, out.dtype) * delta

    with intercepting(rewrite=adapt):
        return model.apply({"params": params}, *args, **kwargs)


def _copy(tree: Any) -> Any:
    """The nested mappings of ``tree`` as new plain dicts (leaves shared), so a caller's tree is never changed."""
    return {k: _copy(v) for k, v in tree.items()} if isinstance(tree, Mapping) else tree


def merge(params: Mapping[str, Any], adapters: Mapping[str, Any], spec: LoraSpec) -> dict[str, Any]:
    """``params`` with each adapted kernel replaced by ``kernel + scale * lora_a @ lora_b`` (computed in float32,
    stored in the kernel's dtype); an adapter whose projection ``params`` lacks is a BadInput naming it.

    >>> import jax.numpy as jnp
    >>> params = {"attn": {"q": {"kernel": jnp.zeros((2, 2))}}}
    >>> adapters = {"attn": {"q": {"lora_a": jnp.ones((2, 1)), "lora_b": jnp.ones((1, 2))}}}
    >>> merge(params, adapters, LoraSpec(rank=1, alpha=3))["attn"]["q"]["kernel"].tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """
    out = _copy(params)
    for path, adapter in leaves(adapters):
        node: Any = out
        for key in path.split("/"):
            if not isinstance(node, Mapping) or key not in node:
                raise BadInput(f"the adapters adapt {path}, a projection the base parameters do not have")
            node = node[key]
        kernel = node["kernel"]
        delta = jnp.dot(jnp.asarray(adapter["lora_a"], jnp.float32), jnp.asarray(adapter["lora_b"], jnp.float32))
        node["kernel"] = (jnp.asarray(kernel, jnp.float32) + spec.scale * delta).astype(kernel.dtype)
    return out
