"""The attention maps: each head's attention probabilities on the first rows of a validation batch.

The probabilities are recomputed from the queries and keys the attention computed with (recorded
by `theseus.train.analyses.trace.record`, positions applied), the way `jax.nn.dot_product_attention`
makes them: scores in float32 scaled by ``1/sqrt(head_dim)``, the causal mask (and the sliding window
when the model has one), a softmax. Each row sums to 1 and is zero right of the diagonal. A model whose
key/value heads are shared (grouped-query attention) has a map per query head.

Files under ``analysis/attention/``: ``attention.npy`` ``[layer, sample, head, T, T]`` (float16),
``entropy.npy`` ``[layer, head]`` (mean entropy of a row, nats) and ``attention.png`` (every head of
the first sample, a layer a row). Keys: ``analysis/attention/entropy``, ``first_token`` (mean weight
on position 0, the "attention sink") and ``diagonal`` (mean weight of a token on itself), rows past
the first.

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> from theseus.train.analyses.trace import record
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
>>> tokens = jnp.arange(8)[None] % 64
>>> params = model.init(jax.random.PRNGKey(0), tokens)["params"]
>>> maps = probabilities(record(model, params, tokens))
>>> maps.shape, bool(jnp.allclose(maps.sum(-1), 1.0)), float(maps[0, 0, 0, 0, 1])
((2, 1, 4, 8, 8), True, 0.0)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput
from theseus.train.analyses.base import ROWS, AnalysisResult, ArrayAnalysis, analysis_input
from theseus.train.analyses.labels import token_labels
from theseus.train.analyses.picture import mosaic, new_figure, png
from theseus.train.analyses.trace import Trace, record
from theseus.train.evaluations import EvalContext
from theseus.train.parts import part

__all__ = ["Attention", "probabilities", "summary"]

LABELED = 32  # a single map shows its tokens on the axes up to this many positions


def probabilities(trace: Trace) -> jax.Array:
    """Attention probabilities ``[layer, sample, head, query, key]`` (float32) of a recorded pass.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> probabilities(record(model, params, [[1, 2, 3]]))[0, 0, 1, 0].tolist()   # the first token sees itself
    [1.0, 0.0, 0.0]
    """
    layers, samples, T, heads, head_dim = trace.queries.shape
    q = trace.queries.reshape(layers * samples, T, heads, head_dim)
    k = trace.keys.reshape(layers * samples, T, heads, head_dim)
    scores = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32)
    scores = scores * jnp.float32(1.0 / math.sqrt(head_dim))
    rows, cols = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
    visible = (cols <= rows) & (cols > rows - trace.window) if trace.window else cols <= rows
    scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(scores, axis=-1).reshape(layers, samples, heads, T, T)


def summary(maps: np.ndarray) -> dict[str, float]:
    """``entropy``, ``first_token`` and ``diagonal`` of maps ``[..., T, T]`` (rows past the first).

    >>> uniform = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    >>> {k: round(v, 3) for k, v in summary(uniform).items()}
    {'entropy': 0.896, 'first_token': 0.417, 'diagonal': 0.417}
    """
    maps = np.asarray(maps, np.float64)
    if maps.shape[-1] < 2:
        return {"entropy": 0.0, "first_token": 1.0, "diagonal": 1.0}
    rows = maps[..., 1:, :]
    entropy = -np.sum(np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0), axis=-1)
    diagonal = np.diagonal(maps, axis1=-2, axis2=-1)[..., 1:]
    return {"entropy": float(entropy.mean()), "first_token": float(rows[..., 0].mean()),
            "diagonal": float(diagonal.mean())}


def _entropy(maps: np.ndarray) -> np.ndarray:
    """Mean row entropy (nats) of each ``[layer, sample, head]`` map, averaged over samples -> ``[layer, head]``."""
    maps = np.asarray(maps, np.float64)
    logs = np.log(np.where(maps > 0, maps, 1.0))
    return -(maps * logs).sum(-1).mean(axis=(1, 3))


def _picture(maps: np.ndarray, layers: list[int], heads: list[int], labels: list[str]) -> bytes:
    """One heatmap (one layer and head: tokens on the axes when few) or a mosaic, a layer a row."""
    if len(layers) == 1 and len(heads) == 1:
        T = maps.shape[-1]
        figure = new_figure(6, 5.5)
        axes = figure.add_subplot()
        image = axes.imshow(maps[0, 0], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        if T <= LABELED:
            axes.set_xticks(range(T), labels, rotation=90, fontsize=7)
            axes.set_yticks(range(T), labels, fontsize=7)
        axes.set_xlabel("key position")
        axes.set_ylabel("query position")
        axes.set_title(f"attention, layer {layers[0]}, head {heads[0]}")
        figure.colorbar(image, ax=axes, fraction=0.046)
        figure.tight_layout()
        return png(figure)
    tiles = mosaic(maps)
    scale = 10.0 / max(tiles.shape)
    figure = new_figure(max(3.0, tiles.shape[1] * scale + 1.5), max(2.5, tiles.shape[0] * scale + 1.0))
    axes = figure.add_subplot()
    image = axes.imshow(tiles, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    step_y, step_x = maps.shape[2] + 1, maps.shape[3] + 1
    axes.set_yticks([i * step_y + maps.shape[2] / 2 for i in range(len(layers))], [str(i) for i in layers])
    axes.set_xticks([j * step_x + maps.shape[3] / 2 for j in range(len(heads))], [str(j) for j in heads])
    axes.set_ylabel("layer")
    axes.set_xlabel("head")
    axes.set_title("attention maps (query down, key across)")
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return png(figure)


def _pick(option: str, value: int | None, count: int) -> list[int]:
    if value is None:
        return list(range(count))
    if value >= count:
        raise BadInput(f"--{option} {value} is out of range: the model has {count} {option}s (0..{count - 1})")
    return [value]


@part("analysis", "attention", "Attention maps of every layer and head on validation tokens, and their entropy.")
class Attention(ArrayAnalysis):
    """Attention probabilities (layer, head, sample) of the first validation rows, as `probabilities`.

    Options: ``layer``, ``head`` (one of each, else all) and ``sample`` (a row of the first
    validation batch, else the first `theseus.train.analyses.base.ROWS`).

    >>> Attention.name, Attention.OPTIONS
    ('attention', ('layer', 'head', 'sample'))
    """

    OPTIONS = ("layer", "head", "sample")

    @classmethod
    def compute(cls, context: EvalContext, **options: Any) -> AnalysisResult:
        """The maps of the chosen layers, heads and samples, their summary and picture."""
        options = cls.check_options(options)
        sample = options.get("sample")
        batch = analysis_input(context, rows=ROWS if sample is None else sample + 1)
        rows = batch["x"].shape[0]
        if sample is not None and sample >= rows:
            raise BadInput(f"--sample {sample} is out of range: a validation batch here has {rows} rows")
        tokens = batch["x"] if sample is None else batch["x"][sample:sample + 1]
        trace = record(context.model, context.params, tokens)
        layers = _pick("layer", options.get("layer"), trace.n_layers)
        heads = _pick("head", options.get("head"), trace.n_head)
        maps = np.asarray(probabilities(trace))[layers][:, :, heads]  # [layer, sample, head, T, T]
        scalars = summary(maps)
        picture = _picture(maps[:, 0], layers, heads, token_labels(context.tokenizer, tokens[0].tolist()))
        arrays = {"attention": maps.astype(np.float16), "entropy": _entropy(maps).astype(np.float32),
                  "tokens": np.asarray(tokens, np.int32)}
        return AnalysisResult(scalars, arrays, picture)
