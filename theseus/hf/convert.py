"""Pure conversion between Hugging Face decoders (Llama, Mistral, Qwen2, Qwen3, Gemma, GPT-NeoX) and
`theseus.model.decoder.Decoder`: configs and tensors, name by name. NumPy only: no file I/O, no torch.

The contract:

- ``config_from_hf(config_json) -> DecoderConfig``: the decoder equal to the HF model. A model type, rope
  type or setting it cannot reproduce (``rope_parameters.rope_type: yarn``, ``use_sliding_window``, per-layer
  attention types...) raises `UnsupportedModel` naming the field.
- ``config_to_hf(cfg) -> dict``: the ``config.json`` of ``cfg.family``'s HF model; a ``cfg`` that family cannot
  express (Llama with q/k norms...) raises `UnsupportedModel` naming the fields.
- ``tensor_maps(cfg) -> list[TensorMap]``: every HF tensor, the theseus leaves it fills (paths under
  ``params``, "/"-joined) and the two exact transforms (transposes, and GPT-NeoX's fused head-major qkv
  split into q, k, v). Streaming readers and writers go tensor by tensor through it.
- ``params_from_hf(cfg, read, names) -> iterator of (leaf, array)`` and ``params_to_hf(cfg, read, dtype) ->
  iterator of (hf name, array)``: the maps applied one tensor at a time, a transposed tensor as a view (its
  writer copies it in order block by block); ``load_params`` / ``dump_params`` do the same between whole
  dicts (contiguous arrays) and a nested params tree.
- Round trips are bit-exact: ``params_from_hf(params_to_hf(p)) == p`` for every leaf.

>>> cfg = config_from_hf({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
...                       "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64})
>>> cfg.family, cfg.kv_heads, cfg.tie_embeddings
('llama', 2, False)
>>> config_from_hf({**config_to_hf(cfg), "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})
Traceback (most recent call last):
...
theseus.hf.convert.UnsupportedModel: rope type 'yarn' is not supported (rope_parameters.rope_type); ...
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from theseus.errors import BadInput
from theseus.model.decoder_config import FAMILIES, DecoderConfig

__all__ = ["ARCHITECTURES", "TensorMap", "UnsupportedModel", "config_from_hf", "config_to_hf", "dump_params",
           "load_params", "params_from_hf", "params_to_hf", "tensor_maps"]

#: the HF class of each family's causal LM (config.json's ``architectures``)
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}
_ACT_FROM_HF = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_new": "gelu_tanh"}
_ACT_TO_HF = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}
# buffers some checkpoints carry that are not parameters
_BUFFERS = re.compile(r".*(rotary_emb\.inv_freq|attention\.(masked_)?bias)$")


class UnsupportedModel(BadInput):
    """A Hugging Face model (or a theseus config) the other side cannot reproduce; the message names the field.

    >>> issubclass(UnsupportedModel, ValueError)
    True
    """


def _decoder_config(cfg: DecoderConfig | Mapping[str, Any]) -> DecoderConfig:
    return cfg if isinstance(cfg, DecoderConfig) else DecoderConfig.from_mapping(dict(cfg))


def _rope(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """The DecoderConfig rope fields of an HF config (v5 ``rope_parameters`` or older ``rope_scaling``)."""
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}  # transformers' precedence
    if not isinstance(params, Mapping) or any(isinstance(v, Mapping) for v in params.values()):
        raise UnsupportedModel(f"per-layer rope parameters are not supported (rope_parameters: {params!r})")
    kind = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base")))
    out: dict[str, Any] = {}
    if theta is not None:
        out["rope_theta"] = float(theta)
    partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct")))
    if partial is not None:
        out["rotary_pct"] = float(partial)
    if kind == "default":
        return out
    if kind == "linear":
        return {**out, "rope_scaling": "linear", "rope_factor": float(params["factor"])}
    if kind == "llama3":
        return {**out, "rope_scaling": "llama3", "rope_factor": float(params["factor"]),
                "rope_low_freq_factor": float(params["low_freq_factor"]),
                "rope_high_freq_factor": float(params["high_freq_factor"]),
                "rope_original_max_position": int(params.get("original_max_position_embeddings",
                                                             config.get("max_position_embeddings", 8192)))}
    raise UnsupportedModel(f"rope type {kind!r} is not supported (rope_parameters.rope_type); "
                           "supported: default, linear, llama3")


def _refuse(config: Mapping[str, Any]) -> None:
    """Raise on HF settings that change the forward pass in a way the decoder does not reproduce."""
    if config.get("use_sliding_window"):
        raise UnsupportedModel("use_sliding_window=true (per-layer sliding windows) is not supported")
    layer_types = config.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise UnsupportedModel(f"layer_types other than full_attention are not supported: {sorted(set(layer_types))}")
    if config.get("use_bidirectional_attention"):
        raise UnsupportedModel("use_bidirectional_attention=true is not supported (the decoder is causal)")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if config.get(key) is not None:
            raise UnsupportedModel(f"{key} is not supported")


def config_from_hf(config: Mapping[str, Any], **overrides: Any) -> DecoderConfig:
    """The `DecoderConfig` equal to an HF ``config.json`` mapping; ``overrides`` set other fields (dtypes, remat).

    ``max_position_embeddings`` becomes ``block_size``. Unsupported model types and settings raise
    `UnsupportedModel` naming them.

    >>> config_from_hf({"model_type": "gpt2"})
    Traceback (most recent call last):
    ...
    theseus.hf.convert.UnsupportedModel: model_type 'gpt2' is not a decoder family; supported: llama, mistral, ...
    >>> config_from_hf({"model_type": "mistral", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
    ...                 "num_attention_heads": 4, "intermediate_size": 64, "sliding_window": 16}).sliding_window
    16
    """
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UnsupportedModel(f"model_type {family!r} is not a decoder family; supported: {', '.join(FAMILIES)}")
    _refuse(config)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    fields: dict[str, Any] = {
        "vocab_size": int(config["vocab_size"]), "n_embd": hidden, "n_layers": int(config["num_hidden_layers"]),
        "n_head": heads, "intermediate_size": int(config["intermediate_size"]),
        "block_size": int(config.get("max_position_embeddings", 2048)),
        **_rope(config, family),
    }
    kv = config.get("num_key_value_heads")
    fields["n_kv_head"] = -1 if kv is None or int(kv) == heads else int(kv)
    head_dim = config.get("head_dim")
    fields["head_dim"] = -1 if head_dim is None or hidden % heads == 0 and int(head_dim) == hidden // heads \
        else int(head_dim)
    activation = config.get("hidden_activation") or config.get("hidden_act")
    if activation is not None:
        if activation not in _ACT_FROM_HF:
            raise UnsupportedModel(f"hidden_act {activation!r} is not supported; supported: {', '.join(_ACT_FROM_HF)}")
        fields["activation"] = _ACT_FROM_HF[activation]
    if "tie_word_embeddings" in config:
        fields["tie_embeddings"] = bool(config["tie_word_embeddings"])
    if family == "gpt_neox":
        fields["norm_eps"] = float(config.get("layer_norm_eps", 1e-5))
        fields["parallel_residual"] = bool(config.get("use_parallel_residual", True))
        bias = bool(config.get("attention_bias", True))
        fields["qkv_bias"] = fields["o_bias"] = bias
    else:
        fields["norm_eps"] = float(config.get("rms_norm_eps", 1e-6))
        if family == "mistral":
            fields["sliding_window"] = int(config.get("sliding_window") or 0)
        if family in ("llama", "qwen3", "gemma"):
            bias = bool(config.get("attention_bias", False))
            fields["qkv_bias"] = fields["o_bias"] = bias
        if family == "llama":
            fields["mlp_bias"] = bool(config.get("mlp_bias", False))
    return DecoderConfig.for_family(family, **fields, **overrides)


def config_to_hf(cfg: DecoderConfig | Mapping[str, Any], eos_token_id: int | None = None,
                 bos_token_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` mapping of ``cfg.family``'s HF model equal to ``cfg`` (an architecture mapping is
    read as a `DecoderConfig`); ``cfg`` must read back the same through `config_from_hf`, else
    `UnsupportedModel` names the fields the family cannot express.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> config_to_hf(DecoderConfig(n_embd=32, n_head=4, qk_norm=True))
    Traceback (most recent call last):
    ...
    theseus.hf.convert.UnsupportedModel: a llama model cannot express qk_norm=True
    """
    cfg = _decoder_config(cfg)
    rope: dict[str, Any] = {"rope_type": "default" if cfg.rope_scaling == "none" else cfg.rope_scaling,
                            "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling != "none":
        rope["factor"] = cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        rope.update(low_freq_factor=cfg.rope_low_freq_factor, high_freq_factor=cfg.rope_high_freq_factor,
                    original_max_position_embeddings=cfg.rope_original_max_position)
    out: dict[str, Any] = {
        "architectures": [ARCHITECTURES[cfg.family]], "model_type": cfg.family, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.n_embd, "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_head, "max_position_embeddings": cfg.block_size,
        "hidden_act": _ACT_TO_HF[cfg.activation], "tie_word_embeddings": cfg.tie_embeddings,
        "rope_theta": cfg.rope_theta, "rope_parameters": rope, "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id, "torch_dtype": "float32" if cfg.param_dtype == "float32" else cfg.param_dtype,
    }
    if cfg.family == "gpt_neox":
        rope["partial_rotary_factor"] = cfg.rotary_pct
        out.update(layer_norm_eps=cfg.norm_eps, use_parallel_residual=cfg.parallel_residual,
                   attention_bias=cfg.qkv_bias, rotary_pct=cfg.rotary_pct, rotary_emb_base=cfg.rope_theta,
                   hidden_dropout=0.0, attention_dropout=0.0)
    else:
        out.update(num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_size, rms_norm_eps=cfg.norm_eps,
                   attention_dropout=0.0)
        if cfg.family in ("llama", "qwen3", "gemma"):
            out["attention_bias"] = cfg.qkv_bias
        if cfg.family == "llama":
            out["mlp_bias"] = cfg.mlp_bias
        if cfg.family == "mistral":
            out["sliding_window"] = cfg.sliding_window or None
        if cfg.family in ("qwen2", "qwen3"):
            out.update(use_sliding_window=False, sliding_window=None)
    if cfg.rope_scaling != "none":
        out["rope_scaling"] = dict(rope)
    back = config_from_hf(out, param_dtype=cfg.param_dtype, activation_dtype=cfg.activation_dtype, remat=cfg.remat,
                          attention=cfg.attention)
    differ = [f"{f.name}={getattr(cfg, f.name)!r}" for f in dataclasses.fields(cfg)
              if getattr(back, f.name) != getattr(cfg, f.name)]
    if differ:
        raise UnsupportedModel(f"a {cfg.family} model cannot express {', '.join(differ)}")
    return out


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """One HF tensor ``hf_name`` and the theseus leaves ``leaves`` ("/"-joined paths under params) it holds:
    ``to_theseus(array) -> tuple of arrays`` (one per leaf) and ``to_hf(tuple of arrays) -> array``, both exact.
    ``aliases``: other names the tensor has in some checkpoints.

    >>> m = TensorMap("w", ("a/kernel",), lambda w: (w.T,), lambda t: t[0].T)
    >>> m.to_hf(m.to_theseus(np.arange(6).reshape(2, 3))).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """

    hf_name: str
    leaves: tuple[str, ...]
    to_theseus: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_hf: Callable[[tuple[np.ndarray, ...]], np.ndarray]
    aliases: tuple[str, ...] = ()


def _same(hf: str, leaf: str, aliases: tuple[str, ...] = ()) -> TensorMap:
    return TensorMap(hf, (leaf,), lambda a: (np.asarray(a),), lambda t: np.asarray(t[0]), aliases)


def _linear(hf: str, leaf: str) -> TensorMap:
    """A torch Linear weight [out, in] as a flax kernel [in, out]: transposed views, copied in order only by whoever
    writes them (a streaming writer copies a block at a time instead of a whole new matrix)."""
    return TensorMap(hf, (leaf,), lambda a: (np.asarray(a).T,), lambda t: np.asarray(t[0]).T)


def _fused_qkv(hf: str, prefix: str, cfg: DecoderConfig, bias: bool) -> TensorMap:
    """GPT-NeoX's query_key_value ([n_head, q|k|v, head_size] on its output dim) as q/k/v_proj leaves."""
    H, D = cfg.n_head, cfg.head_size
    leaves = tuple(f"{prefix}/{p}_proj/{'bias' if bias else 'kernel'}" for p in "qkv")

    def split(array: np.ndarray) -> tuple[np.ndarray, ...]:
        array = np.asarray(array)
        heads = array.reshape(H, 3, D, *array.shape[1:])
        parts = [heads[:, j].reshape(H * D, *array.shape[1:]) for j in range(3)]
        return tuple(p if bias else p.T for p in parts)  # views, as _linear's

    def join(parts: tuple[np.ndarray, ...]) -> np.ndarray:
        rows = [np.asarray(p if bias else np.asarray(p).T).reshape(H, D, -1) for p in parts]
        fused = np.stack(rows, axis=1)  # [H, 3, D, in]
        return fused.reshape(3 * H * D) if bias else fused.reshape(3 * H * D, -1)

    return TensorMap(hf, leaves, split, join)


def tensor_maps(cfg: DecoderConfig | Mapping[str, Any]) -> list[TensorMap]:
    """Every tensor of ``cfg.family``'s HF model equal to ``cfg``, with the theseus leaves it fills.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> maps = tensor_maps(DecoderConfig.for_family("gpt_neox", n_embd=32, n_head=4, n_layers=1))
    >>> [m.leaves for m in maps if m.hf_name.endswith("query_key_value.weight")]
    [('blocks_0/attn/q_proj/kernel', 'blocks_0/attn/k_proj/kernel', 'blocks_0/attn/v_proj/kernel')]
    """
    cfg = _decoder_config(cfg)
    maps: list[TensorMap] = []
    norm_params = (("weight", "scale"), ("bias", "bias")) if cfg.norm_bias else (("weight", "scale"),)

    def norm(hf: str, leaf: str) -> None:
        maps.extend(_same(f"{hf}.{w}", f"{leaf}/{ours}") for w, ours in norm_params)

    neox = cfg.family == "gpt_neox"
    model = "gpt_neox" if neox else "model"
    maps.append(_same(f"{model}.embed_in.weight" if neox else "model.embed_tokens.weight", "embed/embedding"))
    for i in range(cfg.n_layers):
        hf, ours = f"{model}.layers.{i}", f"blocks_{i}"
        norm(f"{hf}.input_layernorm", f"{ours}/input_norm")
        norm(f"{hf}.post_attention_layernorm", f"{ours}/post_norm")
        if neox:
            maps.append(_fused_qkv(f"{hf}.attention.query_key_value.weight", f"{ours}/attn", cfg, bias=False))
            if cfg.qkv_bias:
                maps.append(_fused_qkv(f"{hf}.attention.query_key_value.bias", f"{ours}/attn", cfg, bias=True))
            attn_out = f"{hf}.attention.dense"
            mlp = {"up": f"{hf}.mlp.dense_h_to_4h", "down": f"{hf}.mlp.dense_4h_to_h"}
        else:
            for p in "qkv":
                maps.append(_linear(f"{hf}.self_attn.{p}_proj.weight", f"{ours}/attn/{p}_proj/kernel"))
                if cfg.qkv_bias:
                    maps.append(_same(f"{hf}.self_attn.{p}_proj.bias", f"{ours}/attn/{p}_proj/bias"))
            if cfg.qk_norm:
                maps.append(_same(f"{hf}.self_attn.q_norm.weight", f"{ours}/attn/q_norm/scale"))
                maps.append(_same(f"{hf}.self_attn.k_norm.weight", f"{ours}/attn/k_norm/scale"))
            attn_out = f"{hf}.self_attn.o_proj"
            mlp = {p: f"{hf}.mlp.{p}_proj" for p in (("gate", "up", "down") if cfg.mlp == "gated" else ("up", "down"))}
        maps.append(_linear(f"{attn_out}.weight", f"{ours}/attn/o_proj/kernel"))
        if cfg.o_bias:
            maps.append(_same(f"{attn_out}.bias", f"{ours}/attn/o_proj/bias"))
        for p, name in mlp.items():
            maps.append(_linear(f"{name}.weight", f"{ours}/mlp/{p}_proj/kernel"))
            if cfg.mlp_bias:
                maps.append(_same(f"{name}.bias", f"{ours}/mlp/{p}_proj/bias"))
    norm(f"{model}.final_layer_norm" if neox else "model.norm", "final_norm")
    if not cfg.tie_embeddings:
        head = _linear("lm_head.weight", "lm_head/kernel")
        maps.append(dataclasses.replace(head, aliases=("embed_out.weight",) if neox else ()))
    return maps


def params_from_hf(cfg: DecoderConfig | Mapping[str, Any], read: Callable[[str], Any],
                   names: Iterable[str]) -> Iterator[tuple[str, np.ndarray]]:
    """``(theseus leaf, array)`` from an HF model's tensors (``read(hf name)``; ``names``: every tensor it holds),
    one HF tensor at a time. A tensor with no place in the decoder, or a missing one, raises `UnsupportedModel`;
    a tied model's ``lm_head.weight`` must equal the embedding.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> list(params_from_hf(DecoderConfig(n_embd=8, n_head=2, n_layers=1), np.zeros, ["model.extra.weight"]))
    Traceback (most recent call last):
    ...
    theseus.hf.convert.UnsupportedModel: tensor model.extra.weight has no place in a llama decoder
    """
    cfg = _decoder_config(cfg)
    maps = tensor_maps(cfg)
    names = set(names)
    known = {n for m in maps for n in (m.hf_name, *m.aliases)}
    head = {"lm_head.weight", "embed_out.weight"} & names if cfg.tie_embeddings else set()
    extra = sorted(n for n in names - known - head if not _BUFFERS.match(n))
    if extra:
        raise UnsupportedModel(f"tensor {extra[0]} has no place in a {cfg.family} decoder")
    for m in maps:
        name = next((n for n in (m.hf_name, *m.aliases) if n in names), None)
        if name is None:
            raise UnsupportedModel(f"the model has no tensor {m.hf_name}")
        yield from zip(m.leaves, m.to_theseus(np.asarray(read(name))))
    for name in sorted(head):
        embedding = maps[0].hf_name
        if not np.array_equal(np.asarray(read(name)), np.asarray(read(embedding))):
            raise UnsupportedModel(f"{name} differs from {embedding}, but the config ties the embeddings")


def params_to_hf(cfg: DecoderConfig | Mapping[str, Any], read: Callable[[str], Any],
                 dtype: Any = None) -> Iterator[tuple[str, np.ndarray]]:
    """``(hf name, array)`` of every tensor of the HF model, from ``read(theseus leaf)``, cast to ``dtype`` (None:
    as stored), one tensor at a time.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=4, intermediate_size=8, tie_embeddings=True)
    >>> shapes = {m.hf_name: m.leaves for m in tensor_maps(cfg)}
    >>> out = dict(params_to_hf(cfg, lambda leaf: np.ones((4, 8)) if leaf == "embed/embedding" else np.ones(8)))
    >>> out["model.embed_tokens.weight"].shape, "lm_head.weight" in out
    ((4, 8), False)
    """
    cfg = _decoder_config(cfg)
    for m in tensor_maps(cfg):
        array = np.asarray(m.to_hf(tuple(np.asarray(read(leaf)) for leaf in m.leaves)))
        yield m.hf_name, array if dtype is None else array.astype(dtype)


def load_params(cfg: DecoderConfig | Mapping[str, Any], tensors: Mapping[str, Any]) -> dict[str, Any]:
    """The nested params tree (NumPy, as stored) of an HF model's tensors (a mapping name -> array).

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=4, intermediate_size=8)
    >>> hf = {m.hf_name: np.zeros((2, 2)) for m in tensor_maps(cfg)}
    >>> sorted(load_params(cfg, hf))
    ['blocks_0', 'embed', 'final_norm', 'lm_head']
    """
    tree: dict[str, Any] = {}
    for leaf, array in params_from_hf(cfg, tensors.__getitem__, tensors.keys()):
        *parents, last = leaf.split("/")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = np.ascontiguousarray(array)  # a whole model in memory: plain arrays, not views of ``tensors``
    return tree


def dump_params(cfg: DecoderConfig | Mapping[str, Any], params: Mapping[str, Any],
                dtype: Any = None) -> dict[str, np.ndarray]:
    """Every HF tensor of a nested params tree, as a dict name -> NumPy array (cast to ``dtype``, None: as stored).

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=4, intermediate_size=8)
    >>> hf = {m.hf_name: np.arange(4.0).reshape(2, 2) for m in tensor_maps(cfg)}
    >>> back = dump_params(cfg, load_params(cfg, hf))
    >>> all(np.array_equal(back[k], hf[k]) for k in hf)
    True
    """

    def read(leaf: str) -> Any:
        node: Any = params
        for key in leaf.split("/"):
            node = node[key]
        return np.asarray(node)

    return {name: np.ascontiguousarray(array) for name, array in params_to_hf(cfg, read, dtype)}  # as safetensors wants
