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

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from theseus.errors import BadInput, NotFound
from theseus.hf.convert import TensorMap, UnsupportedModel, tensor_maps
from theseus.hf.exporter import check_out, export_dtype, export_hf
from theseus.model.decoder_config import DecoderConfig
from theseus.model.lora import LoraSpec, leaves

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "LoraCheckpoint", "NotLora", "export_model", "export_peft", "from_peft",
           "lora_checkpoint", "merged_reader", "projection_modules", "read_peft", "to_peft", "write_peft"]

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

    check_out(out)
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


# -- a LoRA run's checkpoint: its adapters out as a peft folder, or merged into its base as a model folder --------


def _reader(folder: str) -> tuple[Callable[[str], np.ndarray | None], list[str]]:
    """``(read(leaf), leaves)``: the ``params/`` leaves of the checkpoint in ``folder`` by their path under params/,
    each read on demand and checked against the folder's MANIFEST as it is read."""
    from theseus.train import checkpoint as ckpt  # lazily: TensorStore reads the checkpoint
    from theseus.train import manifest as mf

    sealed = mf.Sealed(folder)
    entries = {leaf["path"].split("/", 1)[1]: leaf for leaf in ckpt.read_index(folder)["leaves"]
               if leaf["path"].startswith("params/")}
    return (lambda leaf: ckpt.read_leaf(sealed, entries[leaf]) if leaf in entries else None), sorted(entries)


class NotLora(BadInput):
    """A checkpoint that is not of a LoRA run where a LoRA checkpoint was wanted.

    >>> issubclass(NotLora, ValueError)
    True
    """


@dataclasses.dataclass(frozen=True)
class LoraCheckpoint:
    """A LoRA run's checkpoint: its ``node``, ``folder``, ``config`` (``config.yaml``), the run's model ``family``,
    the base's node id and folder (``training.init_from``), and ``spec`` (its ``lora`` section).

    >>> LoraCheckpoint.__dataclass_fields__.keys() >= {"node", "base", "spec"}
    True
    """

    node: Any
    folder: str
    config: dict
    family: str
    base: str
    base_folder: str
    spec: LoraSpec

    def adapters(self) -> dict[str, Any]:
        """The adapters tree (host arrays) of the checkpoint."""
        read, names = _reader(self.folder)
        tree: dict[str, Any] = {}
        for name in names:
            *parents, last = name.split("/")
            node = tree
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = read(name)
        return tree

    def decoder(self) -> DecoderConfig:
        """The base's `DecoderConfig`; the GPT, whose adapters peft has no layout for here, is a BadInput."""
        from theseus.model.decoder_config import FAMILIES

        if self.family not in FAMILIES:
            raise BadInput(f"a LoRA adapter of a {self.family} model has no peft export here (the decoder families "
                           f"do: {', '.join(FAMILIES)}); export it merged: --format hf --merge")
        return DecoderConfig.from_mapping({**self.config["architecture"], "family": self.family})


def lora_checkpoint(root: Any, target: Any) -> LoraCheckpoint:
    """The `LoraCheckpoint` of ``target`` (a node id, Node, or nonce: that run's last checkpoint); a checkpoint of
    another run is a BadInput saying what to export instead.

    >>> import tempfile
    >>> lora_checkpoint(tempfile.mkdtemp(), "abc123")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: run abc123 has no committed checkpoint in ...
    """
    import yaml

    from theseus.jobs import get_job  # lazily: the registry imports the training jobs (JAX)
    from theseus.replay.restore import checkpoint_for  # lazily: it loads the trainer (JAX)
    from theseus.replay.verify import checkpoint_config
    from theseus.store import Store
    from theseus.store.schema import JOB, JOB_SOURCE
    from theseus.train.init_from import source_of

    store = root if isinstance(root, Store) else Store(root)
    node, folder = checkpoint_for(store, target)
    config = yaml.safe_load(checkpoint_config(node, folder))
    if not isinstance(config.get("lora"), dict):
        raise NotLora(f"node {node.id} is not of a LoRA run (its config has no lora section): export it with "
                       "--format hf")
    base, base_folder, _ = source_of(store, str(config["training"]["init_from"]))
    spec = LoraSpec(**{k: config["lora"][k] for k in ("rank", "alpha", "dropout", "targets")})
    run = store.run_record(node.nonce, name=node.name)
    family = get_job(run[JOB], run.get(JOB_SOURCE)).MODEL.name  # a LoRA job's model part is its family's
    return LoraCheckpoint(node, folder, config, family, base.id, base_folder, spec)


def merged_reader(checkpoint: LoraCheckpoint) -> Callable[[str], np.ndarray | None]:
    """``read(leaf)`` of the base's parameters with the adapters merged into their kernels
    (`theseus.model.lora.merge`, one kernel at a time).

    >>> callable(merged_reader)
    True
    """
    read, _ = _reader(checkpoint.base_folder)
    adapters = {f"{path}/kernel": adapter for path, adapter in leaves(checkpoint.adapters())}
    scale = np.float32(checkpoint.spec.scale)

    def merged(leaf: str) -> np.ndarray | None:
        value = read(leaf)
        if leaf not in adapters or value is None:
            return value
        a, b = (np.asarray(adapters[leaf][k], np.float32) for k in ("lora_a", "lora_b"))
        return (np.asarray(value, np.float32) + scale * (a @ b)).astype(value.dtype)

    return merged


def export_peft(root: Any, target: Any, out: str) -> dict[str, Any]:
    """Write the adapters of the LoRA checkpoint ``target`` as the peft folder ``out`` (new or empty) and record the
    export on its node: ``export/peft/path``, ``export/peft/base`` (the base node, which ``--format hf`` exports
    as the model peft loads them onto) and ``export/peft/sha256`` (of the files' sha256 listing).

    >>> import tempfile
    >>> export_peft(tempfile.mkdtemp(), "abc123", tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: run abc123 has no committed checkpoint in ...
    """
    import hashlib

    from theseus.store import Store

    out = os.path.abspath(os.fspath(out))
    check_out(out)  # before the run: a full folder is named whatever else is wrong
    store = root if isinstance(root, Store) else Store(root)
    checkpoint = lora_checkpoint(store, target)
    files = write_peft(out, checkpoint.decoder(), checkpoint.spec, checkpoint.adapters())
    digests = {}
    for name in files:
        with open(os.path.join(out, name), "rb") as f:
            digests[name] = hashlib.sha256(f.read()).hexdigest()
    listing = json.dumps(digests, sort_keys=True)
    record = {"export/peft/path": out, "export/peft/base": checkpoint.base,
              "export/peft/sha256": hashlib.sha256(listing.encode()).hexdigest()}
    with store.writer() as w:
        w.write(checkpoint.node, record)
    return {**record, "node": checkpoint.node.id}


def export_model(root: Any, target: Any, out: str, dtype: str = "bf16", merge: bool = False) -> dict[str, Any]:
    """`theseus.hf.exporter.export_hf` of ``target``, knowing LoRA: with ``merge`` the LoRA checkpoint's base with
    its adapters merged into the kernels (peft's ``merge_and_unload``); a LoRA checkpoint without ``merge`` is a
    BadInput (it holds adapters only), and so is ``merge`` of another checkpoint.

    >>> import tempfile
    >>> export_model(tempfile.mkdtemp(), "abc123", tempfile.mkdtemp(), merge=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: run abc123 has no committed checkpoint in ...
    """
    export_dtype(dtype)  # an unknown dtype or a full folder fails before anything is read
    check_out(os.fspath(out))
    try:
        checkpoint = lora_checkpoint(root, target)
    except NotLora as e:
        if merge:
            raise BadInput(f"--merge merges a LoRA run's adapters into its base: {e}") from None
        return export_hf(root, target, out, dtype)
    if not merge:
        raise BadInput(f"node {checkpoint.node.id} holds LoRA adapters only: export them with --format peft, or "
                       "the model with its adapters merged with --format hf --merge")
    return {**export_hf(root, checkpoint.node, out, dtype, params=merged_reader(checkpoint)), "merged": True}
