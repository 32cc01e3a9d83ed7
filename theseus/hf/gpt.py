"""theseus's GPT as Hugging Face architectures with equal logits: the learned-position GPT as GPT-2, the RoPE GPT
as GPT-NeoX (sequential residual, full rotary, tanh GELU, tied embeddings), tensor by tensor, both ways.

Both HF models compute exactly what `theseus.model.gpt.GPT` does: pre-LayerNorm blocks, tanh-approximated
GELU (``jax.nn.gelu``'s default), attention scaled by 1/sqrt(head_dim), the unembedding tied to the token
embedding. A GPT without biases exports zero biases (the same function). GPT-2's ``Conv1D`` weights are our
kernels as they are; NeoX's ``Linear`` weights are their transposes, and its fused qkv is laid out head by head
(``[head, q|k|v, head_dim]``) where ours is ``[q|k|v, head, head_dim]``. A folder these rules cannot represent
(a parallel residual, partial rotary, another activation, untied embeddings) is refused, naming the setting.

>>> arch = {"n_embd": 8, "n_head": 2, "n_layers": 1, "block_size": 4, "vocab_size": 16, "rope": False}
>>> config_to_hf(arch)["architectures"]
['GPT2LMHeadModel']
>>> config_from_hf(config_to_hf(arch))["n_embd"]
8
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from theseus.errors import BadInput, CorruptData

#: the HF activations equal to ``jax.nn.gelu`` (the tanh approximation)
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
ROPE_BASE = 10000.0  # theseus/model/layers/rope.py's base


class NotRepresentable(BadInput):
    """A model one side cannot represent with equal logits; the message names the setting.

    >>> issubclass(NotRepresentable, ValueError)
    True
    """


def _arch(architecture: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture mapping with the GPT's defaults for what it leaves out."""
    # lazily: the model config pulls in JAX, which reading a folder's JSON does not need
    from theseus.model.config import GPTConfig

    return GPTConfig.from_mapping(dict(architecture)).to_mapping()


def _mlp_dim(arch: Mapping[str, Any]) -> int:
    return 4 * arch["n_embd"] if arch["intermediate_size"] == -1 else arch["intermediate_size"]


def config_to_hf(architecture: Mapping[str, Any], eos_token_id: int | None = None,
                 bos_token_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of the HF model equal to a GPT of ``architecture`` (the ``architecture`` section).

    >>> config_to_hf({"n_embd": 8, "n_head": 2, "n_layers": 1, "vocab_size": 16})["model_type"]
    'gpt_neox'
    """
    arch = _arch(architecture)
    common = {"vocab_size": arch["vocab_size"], "tie_word_embeddings": True, "bos_token_id": bos_token_id,
              "eos_token_id": eos_token_id}
    if not arch["rope"]:
        return {**common, "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "n_positions": arch["block_size"], "n_embd": arch["n_embd"], "n_layer": arch["n_layers"],
                "n_head": arch["n_head"], "n_inner": _mlp_dim(arch), "activation_function": "gelu_new",
                "resid_pdrop": arch["dropout"], "embd_pdrop": arch["dropout"], "attn_pdrop": 0.0,
                "layer_norm_epsilon": arch["layer_norm_eps"], "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False}
    return {**common, "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
            "hidden_size": arch["n_embd"], "num_hidden_layers": arch["n_layers"],
            "num_attention_heads": arch["n_head"], "intermediate_size": _mlp_dim(arch), "hidden_act": "gelu_new",
            "max_position_embeddings": arch["block_size"], "layer_norm_eps": arch["layer_norm_eps"],
            "use_parallel_residual": False, "attention_bias": True, "hidden_dropout": arch["dropout"],
            "attention_dropout": 0.0, "rotary_pct": 1.0, "rotary_emb_base": ROPE_BASE,
            "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE, "partial_rotary_factor": 1.0}}


def _require(config: Mapping[str, Any], key: str, ok: Callable[[Any], bool], want: str, default: Any = None) -> None:
    value = config.get(key, default)
    if not ok(value):
        raise NotRepresentable(f"{config.get('model_type')} with {key}={value!r} has no theseus GPT equal to it "
                               f"(it needs {want})")


def _rope(config: Mapping[str, Any]) -> dict[str, Any]:
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rope.setdefault("partial_rotary_factor", config.get("rotary_pct", 0.25))
    rope.setdefault("rope_theta", config.get("rotary_emb_base", ROPE_BASE))
    return rope


def config_from_hf(config: Mapping[str, Any]) -> dict[str, Any]:
    """The GPT ``architecture`` section equal to a GPT-2 or GPT-NeoX ``config.json``; `NotRepresentable` naming
    the setting otherwise.

    >>> config_from_hf({"model_type": "gpt_neox", "tie_word_embeddings": True, "use_parallel_residual": True})
    Traceback (most recent call last):
    ...
    theseus.hf.gpt.NotRepresentable: gpt_neox with use_parallel_residual=True has no theseus GPT equal to it (it needs False: theseus blocks add attention, then the MLP)
    """  # noqa: E501 - a doctest's expected output, printed on one line
    kind = config.get("model_type")
    _require(config, "tie_word_embeddings", lambda v: v is True, "True: theseus ties its unembedding",
             default=kind == "gpt2")
    if kind == "gpt2":
        _require(config, "activation_function", lambda v: v in TANH_GELU, f"one of {TANH_GELU}", "gelu_new")
        _require(config, "scale_attn_weights", lambda v: v is True, "True", True)
        _require(config, "scale_attn_by_inverse_layer_idx", lambda v: v is False, "False", False)
        n_embd = int(config["n_embd"])
        inner = config.get("n_inner")
        return _arch({"n_embd": n_embd, "n_layers": int(config["n_layer"]), "n_head": int(config["n_head"]),
                      "block_size": int(config["n_positions"]), "vocab_size": int(config["vocab_size"]),
                      "rope": False, "bias": True, "layer_norm_eps": float(config.get("layer_norm_epsilon", 1e-5)),
                      "intermediate_size": -1 if inner in (None, 4 * n_embd) else int(inner)})
    if kind == "gpt_neox":
        _require(config, "use_parallel_residual", lambda v: v is False,
                 "False: theseus blocks add attention, then the MLP", True)
        _require(config, "hidden_act", lambda v: v in TANH_GELU, f"one of {TANH_GELU}", "gelu")
        rope = _rope(config)
        if float(rope["partial_rotary_factor"]) != 1.0 or float(rope["rope_theta"]) != ROPE_BASE or \
                rope.get("rope_type", "default") != "default":
            raise NotRepresentable(f"gpt_neox with rotary {rope} has no theseus GPT equal to it (it needs full "
                                   f"rotary, partial_rotary_factor 1.0, base {ROPE_BASE:g}, no scaling)")
        n_embd = int(config["hidden_size"])
        inner = int(config["intermediate_size"])
        return _arch({"n_embd": n_embd, "n_layers": int(config["num_hidden_layers"]),
                      "n_head": int(config["num_attention_heads"]),
                      "block_size": int(config["max_position_embeddings"]), "vocab_size": int(config["vocab_size"]),
                      "rope": True, "bias": True, "layer_norm_eps": float(config.get("layer_norm_eps", 1e-5)),
                      "intermediate_size": -1 if inner == 4 * n_embd else inner})
    raise NotRepresentable(f"model_type {kind!r} is not a theseus GPT (GPT-2 or GPT-NeoX)")


# -- tensors -------------------------------------------------------------------------------------------------


def _neox_qkv(array: np.ndarray, n_head: int, to_hf: bool) -> np.ndarray:
    """Our fused qkv ([C, 3C] kernel or [3C] bias: q|k|v, then heads) as NeoX's ([3C, C] weight or [3C] bias:
    heads, then q|k|v), or back."""
    if array.ndim == 1:
        width = array.shape[0] // 3
        shape = (3, n_head, width // n_head) if to_hf else (n_head, 3, width // n_head)
        return np.ascontiguousarray(array.reshape(shape).swapaxes(0, 1).reshape(-1))
    if to_hf:  # kernel [C, 3C] -> weight [3C, C]
        C = array.shape[0]
        return np.ascontiguousarray(array.T.reshape(3, n_head, C // n_head, C).swapaxes(0, 1).reshape(3 * C, C))
    C = array.shape[1]  # weight [3C, C] -> kernel [C, 3C]
    return np.ascontiguousarray(array.reshape(n_head, 3, C // n_head, C).swapaxes(0, 1).reshape(3 * C, C).T)


#: our leaf (under params/, with {i} the block) -> (GPT-2 name, NeoX name, NeoX transposes it)
_NAMES = {
    "wte/embedding": ("transformer.wte.weight", "gpt_neox.embed_in.weight", False),
    "wpe/embedding": ("transformer.wpe.weight", None, False),
    "ln_f/scale": ("transformer.ln_f.weight", "gpt_neox.final_layer_norm.weight", False),
    "ln_f/bias": ("transformer.ln_f.bias", "gpt_neox.final_layer_norm.bias", False),
    "blocks_{i}/ln_1/scale": ("transformer.h.{i}.ln_1.weight", "gpt_neox.layers.{i}.input_layernorm.weight", False),
    "blocks_{i}/ln_1/bias": ("transformer.h.{i}.ln_1.bias", "gpt_neox.layers.{i}.input_layernorm.bias", False),
    "blocks_{i}/ln_2/scale": ("transformer.h.{i}.ln_2.weight",
                              "gpt_neox.layers.{i}.post_attention_layernorm.weight", False),
    "blocks_{i}/ln_2/bias": ("transformer.h.{i}.ln_2.bias", "gpt_neox.layers.{i}.post_attention_layernorm.bias",
                             False),
    "blocks_{i}/attn/c_attn/kernel": ("transformer.h.{i}.attn.c_attn.weight",
                                      "gpt_neox.layers.{i}.attention.query_key_value.weight", True),
    "blocks_{i}/attn/c_attn/bias": ("transformer.h.{i}.attn.c_attn.bias",
                                    "gpt_neox.layers.{i}.attention.query_key_value.bias", False),
    "blocks_{i}/attn/c_proj/kernel": ("transformer.h.{i}.attn.c_proj.weight",
                                      "gpt_neox.layers.{i}.attention.dense.weight", True),
    "blocks_{i}/attn/c_proj/bias": ("transformer.h.{i}.attn.c_proj.bias", "gpt_neox.layers.{i}.attention.dense.bias",
                                    False),
    "blocks_{i}/mlp/c_fc/kernel": ("transformer.h.{i}.mlp.c_fc.weight", "gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight",
                                   True),
    "blocks_{i}/mlp/c_fc/bias": ("transformer.h.{i}.mlp.c_fc.bias", "gpt_neox.layers.{i}.mlp.dense_h_to_4h.bias",
                                 False),
    "blocks_{i}/mlp/c_proj/kernel": ("transformer.h.{i}.mlp.c_proj.weight",
                                     "gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight", True),
    "blocks_{i}/mlp/c_proj/bias": ("transformer.h.{i}.mlp.c_proj.bias", "gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias",
                                   False),
}


def name_map(architecture: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """Every HF tensor of the model equal to ``architecture``'s GPT: ``{hf name: (our leaf under params/, whether
    it is transposed)}``; a bias the GPT does not have maps to itself (exported as zeros).

    >>> m = name_map({"n_embd": 8, "n_head": 2, "n_layers": 1, "vocab_size": 16})
    >>> m["gpt_neox.layers.0.attention.dense.weight"]
    ('blocks_0/attn/c_proj/kernel', True)
    """
    arch = _arch(architecture)
    side = 1 if arch["rope"] else 0
    out = {}
    for ours, names in _NAMES.items():
        hf = names[side]
        if hf is None:
            continue
        for i in (range(arch["n_layers"]) if "{i}" in ours else [None]):
            out[hf.format(i=i)] = (ours.format(i=i), side == 1 and names[2])
    return out


def _hf_shape(ours_shape: tuple[int, ...], transposed: bool) -> tuple[int, ...]:
    return tuple(reversed(ours_shape)) if transposed else ours_shape


def params_to_hf(architecture: Mapping[str, Any], read: Callable[[str], np.ndarray | None],
                 dtype: Any = None) -> Iterator[tuple[str, np.ndarray]]:
    """``(hf name, array)`` of every tensor of the HF model, from ``read(leaf)`` (our parameter under params/, None
    for a bias the GPT does not have: zeros), cast to ``dtype`` (None: as stored), one tensor at a time.

    >>> import numpy as np
    >>> arch = {"n_embd": 4, "n_head": 2, "n_layers": 1, "vocab_size": 8, "block_size": 4, "rope": False,
    ...         "bias": False}
    >>> shapes = {"wte/embedding": (8, 4), "wpe/embedding": (4, 4)}
    >>> def read(leaf):
    ...     return None if leaf.endswith("bias") else np.ones(shapes.get(leaf, (4, 4)), np.float32)
    >>> shapes.update({"blocks_0/attn/c_attn/kernel": (4, 12), "blocks_0/mlp/c_fc/kernel": (4, 16),
    ...                "blocks_0/mlp/c_proj/kernel": (16, 4), "ln_f/scale": (4,), "blocks_0/ln_1/scale": (4,),
    ...                "blocks_0/ln_2/scale": (4,)})
    >>> out = dict(params_to_hf(arch, read))
    >>> out["transformer.h.0.attn.c_attn.bias"].tolist() == [0.0] * 12
    True
    """
    arch = _arch(architecture)
    C, H, M = arch["n_embd"], arch["n_head"], _mlp_dim(arch)
    bias_width = {"c_attn": 3 * C, "c_fc": M}
    for hf, (ours, transposed) in name_map(arch).items():
        array = read(ours)
        if array is None:
            if not ours.endswith("/bias"):
                raise CorruptData(f"the checkpoint has no parameter params/{ours}")
            array = np.zeros(bias_width.get(ours.split("/")[-2], C), np.float32)
        elif ours.endswith(("c_attn/kernel", "c_attn/bias")) and arch["rope"]:
            array = _neox_qkv(np.asarray(array), H, to_hf=True)
        elif transposed:
            array = np.ascontiguousarray(np.asarray(array).T)
        array = np.asarray(array)
        yield hf, array if dtype is None else array.astype(dtype)


def params_from_hf(architecture: Mapping[str, Any], read: Callable[[str], np.ndarray],
                   names: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
    """``(our leaf under params/, array)`` from an HF folder's tensors (``read(hf name)``, ``names`` all it holds),
    one at a time; ``lm_head.weight`` must be absent or equal to the embedding (tied), and a tensor the GPT does
    not have is an error naming it.

    >>> import numpy as np
    >>> arch = {"n_embd": 4, "n_head": 2, "n_layers": 1, "vocab_size": 8, "block_size": 4, "rope": False}
    >>> list(params_from_hf(arch, lambda n: np.zeros(1), ["transformer.h.0.extra"]))
    Traceback (most recent call last):
    ...
    theseus.hf.gpt.NotRepresentable: tensor transformer.h.0.extra has no place in a theseus GPT
    """
    arch = _arch(architecture)
    mapping = name_map(arch)
    names = set(names)
    skipped = {n for n in names if re.fullmatch(r"(transformer\.h\.\d+\.attn\.(masked_)?bias|"
                                                r"gpt_neox\.layers\.\d+\.attention\.(masked_)?bias|"
                                                r".*rotary_emb\.inv_freq)", n)}  # buffers, not parameters
    head = {"lm_head.weight", "embed_out.weight"} & names
    extra = sorted(names - set(mapping) - skipped - head)
    if extra:
        raise NotRepresentable(f"tensor {extra[0]} has no place in a theseus GPT")
    missing = sorted(set(mapping) - names)
    if missing:
        raise NotRepresentable(f"the folder has no tensor {missing[0]}")
    for name in sorted(head):
        embedding = "gpt_neox.embed_in.weight" if arch["rope"] else "transformer.wte.weight"
        if not np.array_equal(np.asarray(read(name)), np.asarray(read(embedding))):
            raise NotRepresentable(f"{name} differs from {embedding}: theseus GPT ties its unembedding")
    for hf, (ours, transposed) in mapping.items():
        array = read(hf)
        if ours.endswith(("c_attn/kernel", "c_attn/bias")) and arch["rope"]:
            array = _neox_qkv(np.asarray(array), arch["n_head"], to_hf=False)
        elif transposed:
            array = np.asarray(array).T
        yield ours, np.asarray(array)
