"""LoRA adapters between theseus (`theseus.model.lora`) and peft's folder format, for the decoder families.

A peft LoRA folder holds ``adapter_config.json`` (``r``, ``lora_alpha``, ``target_modules``, per-module
``rank_pattern`` / ``alpha_pattern``...) and ``adapter_model.safetensors``: for each adapted HF module ``M``,
``base_model.model.M.lora_A.weight`` [r, in] and ``...lora_B.weight`` [out, r] (torch's Linear layout, so
``lora_a = A.T`` and ``lora_b = B.T``). The module of each theseus projection is the HF tensor
`theseus.hf.convert.tensor_maps` writes its kernel into. GPT-NeoX fuses q, k and v into one
``query_key_value``: their adapters go out as one adapter of the summed rank (``A`` stacked, ``B`` block
diagonal, through the same exact map as the kernels) with ``rank_pattern`` / ``alpha_pattern`` keeping
alpha / r, and a fused adapter read back gives q, k and v each the shared ``A`` and its rows of ``B``:
equal logits both ways.

>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=16, intermediate_size=8)
>>> projection_modules(cfg)["model.layers.0.self_attn.q_proj"]
('blocks_0/attn/q_proj',)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from theseus.errors import BadInput, NotFound
from theseus.hf.convert import TensorMap, UnsupportedModel, tensor_maps
from theseus.model.decoder_config import DecoderConfig
from theseus.model.lora import LoraSpec, leaves

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "from_peft", "projection_modules", "read_peft", "to_peft",
           "write_peft"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_KEY = re.compile(r"^base_model\.model\.(.+)\.lora_([AB])\.weight$")


def _projection_maps(cfg: DecoderConfig) -> dict[str, TensorMap]:
    """{HF module: its weight's TensorMap} of every map whose leaves are all projection kernels."""
    return {m.hf_name.removesuffix(".weight"): m for m in tensor_maps(cfg)
            if m.hf_name.endswith(".weight") and all(leaf.endswith("/kernel") for leaf in m.leaves)
            and not m.hf_name.startswith(("lm_head", "embed_out"))}


def projection_modules(cfg: DecoderConfig) -> dict[str, tuple[str, ...]]:
    """``{HF module name: the theseus projection paths whose kernels it holds}`` (three for GPT-NeoX's fused qkv).

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig.for_family("gpt_neox", n_embd=16, n_head=2, n_layers=1, intermediate_size=8)
    >>> projection_modules(cfg)["gpt_neox.layers.0.attention.query_key_value"]
    ('blocks_0/attn/q_proj', 'blocks_0/attn/k_proj', 'blocks_0/attn/v_proj')
    """
    return {name: tuple(leaf.removesuffix("/kernel") for leaf in m.leaves) for name, m in _projection_maps(cfg).items()}


def _target_modules(adapted: list[str], every: list[str]) -> list[str]:
    """peft's ``target_modules``: the short names (``q_proj``) when they select exactly ``adapted`` among
    ``every`` module, else the full names."""
    short = sorted({name.rsplit(".", 1)[-1] for name in adapted})
    if {name for name in every if name.rsplit(".", 1)[-1] in short} == set(adapted):
        return short
    return sorted(adapted)


def to_peft(cfg: DecoderConfig, spec: LoraSpec, adapters: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
    """``(tensors, adapter_config)`` of a peft LoRA folder equal to ``adapters`` on a ``cfg`` model (float32; a
    projection no HF module holds is a BadInput naming it).

    >>> import jax
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> from theseus.model.lora import init_adapters
    >>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=16, intermediate_size=8)
    >>> spec = LoraSpec(rank=2, targets="q_proj,v_proj")
    >>> adapters = init_adapters(spec, {"blocks_0/attn/q_proj": (8, 8), "blocks_0/attn/v_proj": (8, 8)},
    ...                          jax.random.PRNGKey(0))
    >>> tensors, config = to_peft(cfg, spec, adapters)
    >>> config["target_modules"], tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape
    (['q_proj', 'v_proj'], (2, 8))
    """
    held = {path: {k: np.asarray(v, np.float32) for k, v in adapter.items()} for path, adapter in leaves(adapters)}
    modules = projection_modules(cfg)
    maps = _projection_maps(cfg)
    placed = {path for paths in modules.values() for path in paths}
    stray = sorted(set(held) - placed)
    if stray:
        raise BadInput(f"the adapter of {stray[0]} has no Hugging Face module in a {cfg.family} model")
    tensors: dict[str, np.ndarray] = {}
    ranks: dict[str, int] = {}
    for name, paths in modules.items():
        if not any(path in held for path in paths):
            continue
        rank = sum(held[p]["lora_a"].shape[1] for p in paths if p in held)
        a_rows, b_parts, offset = [], [], 0
        for path in paths:
            if path not in held:  # a fused projection left out: zero rows of B, no rows of A
                b_parts.append(np.zeros((rank, cfg.n_head * cfg.head_size), np.float32))
                continue
            a, b = held[path]["lora_a"], held[path]["lora_b"]
            a_rows.append(a.T)
            part = np.zeros((rank, b.shape[1]), np.float32)
            part[offset:offset + b.shape[0]] = b
            b_parts.append(part)
            offset += b.shape[0]
        tensors[f"{_PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(np.concatenate(a_rows))
        tensors[f"{_PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(maps[name].to_hf(tuple(b_parts)))
        ranks[name] = rank
    return tensors, _adapter_config(spec, ranks, list(modules))


def _adapter_config(spec: LoraSpec, ranks: dict[str, int], every: list[str]) -> dict[str, Any]:
    """peft's LoraConfig as JSON: ``spec``'s rank and alpha, each module of another rank in the patterns with the
    alpha that keeps ``spec.scale``."""
    other = {re.escape(name): r for name, r in ranks.items() if r != spec.rank}
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": spec.rank, "lora_alpha": spec.alpha,
            "lora_dropout": spec.dropout, "target_modules": _target_modules(sorted(ranks), every), "bias": "none",
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "init_lora_weights": True,
            "inference_mode": True, "modules_to_save": None, "layers_to_transform": None,
            "rank_pattern": other, "alpha_pattern": {k: spec.scale * r for k, r in other.items()},
            "base_model_name_or_path": None, "revision": None}


def _pattern(patterns: Mapping[str, Any], module: str, default: Any) -> Any:
    """The value of the first of peft's ``*_pattern`` keys that matches ``module``, as peft matches them."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _scale(config: Mapping[str, Any], module: str) -> float:
    rank = _pattern(config.get("rank_pattern") or {}, module, config["r"])
    alpha = _pattern(config.get("alpha_pattern") or {}, module, config["lora_alpha"])
    return float(alpha) / (rank ** 0.5 if config.get("use_rslora") else rank)


def _refuse(config: Mapping[str, Any]) -> None:
    """Raise on a peft config whose adapters are not plain LoRA on projections."""
    if config.get("peft_type", "LORA") != "LORA":
        raise UnsupportedModel(f"peft_type {config.get('peft_type')!r} is not LoRA")
    for key, plain in (("use_dora", False), ("bias", "none"), ("fan_in_fan_out", False)):
        if config.get(key, plain) != plain:
            raise UnsupportedModel(f"a peft adapter with {key}={config[key]!r} is not supported (needs {plain!r})")
    for key in ("modules_to_save", "trainable_token_indices", "target_parameters", "layer_replication"):
        if config.get(key):
            raise UnsupportedModel(f"a peft adapter with {key} is not supported: theseus adapts projections only")


def from_peft(cfg: DecoderConfig, tensors: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[LoraSpec, dict]:
    """``(spec, adapters)`` equal to a peft LoRA folder's ``tensors`` and ``adapter_config`` on a ``cfg`` model: a
    fused module's adapter becomes one per projection (the shared ``lora_a``, its rows of ``lora_b``). Modules
    whose alpha / r differ, an adapter of no projection, or a setting beyond plain LoRA raise
    `theseus.hf.convert.UnsupportedModel` naming it.

    >>> import jax
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> from theseus.model.lora import init_adapters
    >>> cfg = DecoderConfig.for_family("gpt_neox", n_embd=16, n_head=2, n_layers=1, intermediate_size=8)
    >>> spec = LoraSpec(rank=2, alpha=4, targets="q_proj,v_proj")
    >>> mine = init_adapters(spec, {"blocks_0/attn/q_proj": (16, 16), "blocks_0/attn/v_proj": (16, 16)},
    ...                      jax.random.PRNGKey(0))
    >>> back_spec, back = from_peft(cfg, *to_peft(cfg, spec, mine))
    >>> back_spec.scale, back["blocks_0"]["attn"]["k_proj"]["lora_a"].shape
    (2.0, (16, 4))
    """
    _refuse(config)
    maps = _projection_maps(cfg)
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key in tensors:
        match = _KEY.match(key)
        if match is None or match.group(1) not in maps:
            raise UnsupportedModel(f"adapter tensor {key} adapts no projection of a {cfg.family} model")
        pairs.setdefault(match.group(1), {})[match.group(2)] = np.asarray(tensors[key], np.float32)
    if not pairs:
        raise UnsupportedModel("the peft adapter holds no LoRA tensors")
    scales = {module: _scale(config, module) for module in pairs}
    if len(set(scales.values())) > 1:
        raise UnsupportedModel(f"the peft adapter scales its modules differently ({scales}): theseus uses one "
                               "alpha / r for all")
    adapters: dict[str, Any] = {}
    for module, pair in sorted(pairs.items()):
        if set(pair) != {"A", "B"}:
            raise UnsupportedModel(f"the peft adapter of {module} lacks its lora_{({'A', 'B'} - set(pair)).pop()}")
        m = maps[module]
        for leaf, b in zip(m.leaves, m.to_theseus(pair["B"]), strict=True):
            *parents, _ = leaf.split("/")
            node = adapters
            for key in parents:
                node = node.setdefault(key, {})
            node.update(lora_a=np.ascontiguousarray(pair["A"].T), lora_b=np.asarray(b, np.float32))
    rank = int(config["r"])
    spec = LoraSpec(rank=rank, alpha=next(iter(scales.values())) * rank, dropout=float(config.get("lora_dropout", 0)),
                    targets=",".join(path for path, _ in leaves(adapters)))
    return spec, adapters


def write_peft(out: str, cfg: DecoderConfig, spec: LoraSpec, adapters: Mapping[str, Any],
               base: str | None = None) -> list[str]:
    """Write ``adapters`` as a peft folder ``out`` (new or empty; ``base``: its ``base_model_name_or_path``);
    returns the files written.

    >>> import jax, tempfile
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> from theseus.model.lora import init_adapters
    >>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=16, intermediate_size=8)
    >>> spec = LoraSpec(rank=2, targets="o_proj")
    >>> out = tempfile.mkdtemp()
    >>> write_peft(out, cfg, spec, init_adapters(spec, {"blocks_0/attn/o_proj": (8, 8)}, jax.random.PRNGKey(0)))
    ['adapter_config.json', 'adapter_model.safetensors']
    >>> read_peft(out, cfg)[0].scale
    8.0
    """
    from safetensors.numpy import save_file  # lazily: the hf group's library

    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise BadInput(f"{out} exists and is not an empty folder: an export never overwrites files")
    tensors, config = to_peft(cfg, spec, adapters)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, ADAPTER_WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(out, ADAPTER_CONFIG), "w") as f:
        json.dump({**config, "base_model_name_or_path": base}, f, indent=2)
    return [ADAPTER_CONFIG, ADAPTER_WEIGHTS]


def read_peft(folder: str, cfg: DecoderConfig) -> tuple[LoraSpec, dict]:
    """``(spec, adapters)`` of the peft LoRA folder ``folder`` (`from_peft`); a folder without the two files is
    `theseus.errors.NotFound`, a ``.bin`` adapter is refused (never unpickled).

    >>> import tempfile
    >>> read_peft(tempfile.mkdtemp(), DecoderConfig(n_embd=8, n_head=2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.NotFound: ... has no adapter_config.json: not a peft adapter folder
    """
    from safetensors.numpy import load_file  # lazily: the hf group's library

    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not os.path.isfile(os.path.join(folder, name)):
            pickled = name == ADAPTER_WEIGHTS and os.path.isfile(os.path.join(folder, "adapter_model.bin"))
            raise NotFound(f"{folder} has no {name}: " + ("its adapter_model.bin is a pickle, which theseus never "
                                                          "unpickles" if pickled else "not a peft adapter folder"))
    with open(os.path.join(folder, ADAPTER_CONFIG)) as f:
        config = json.load(f)
    return from_peft(cfg, load_file(os.path.join(folder, ADAPTER_WEIGHTS)), config)
