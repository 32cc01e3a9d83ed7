"""Norms of the weights and of the activations, layer by layer.

Weights: the L2 (Frobenius) norm of every parameter and of each block's parameters together.
Activations: the mean L2 norm of a token's residual stream as it enters the first block and as it
leaves each block, on the first rows of a validation batch. Two switches of the job's
``architecture.instrumentation`` section add detail (they change nothing in the model):

- ``residual``: ``residual.npy`` ``[2 * layers + 1, sample, T]``, each token's residual-stream norm
  at every point the stream changes (entering the first block, after each attention, after each
  MLP; a parallel block, as GPT-NeoX's, adds both to its input, so its middle point is that input
  plus the attention's output), drawn as a map; key ``analysis/norms/residual_max``;
- ``components``: ``components.npy`` ``[layer, 2]``, the mean norm of what each attention and MLP
  adds to the stream; keys ``analysis/norms/attn`` and ``analysis/norms/mlp``.

Files under ``analysis/norms/``: ``weights.npy`` and ``weight_names.npy`` (one entry per parameter,
``blocks_0/attn/c_attn/kernel``...), ``layer_weights.npy`` ``[layer]``, ``activations.npy``
``[layers + 1]``, ``norms.png``. Keys: ``analysis/norms/weights`` (norm of all parameters),
``activations`` (of the last block's output) and ``growth`` (that over the embeddings').

>>> import numpy as np
>>> leaf_norms({"a": {"w": np.full((2, 2), 2.0)}, "b": np.ones(4)})
(['a/w', 'b'], [4.0, 2.0])
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import OmegaConf

from theseus.train.analyses.base import AnalysisResult, ArrayAnalysis, analysis_input
from theseus.train.analyses.picture import new_figure, png
from theseus.train.analyses.trace import Trace, local_params, record
from theseus.train.evaluations import EvalContext
from theseus.train.parts import part

__all__ = ["RESIDUAL", "COMPONENTS", "Norms", "instrumentation", "leaf_norms", "token_norms"]

RESIDUAL = "architecture.instrumentation.residual"
COMPONENTS = "architecture.instrumentation.components"


def leaf_norms(params: Any) -> tuple[list[str], list[float]]:
    """``(names, norms)``: each parameter's path (``a/b/kernel``) and its L2 norm, in float64.

    >>> leaf_norms({"w": np.array([3.0, 4.0])})
    (['w'], [5.0])
    """
    flat = jax.tree_util.tree_flatten_with_path(local_params(params))[0]
    names = ["/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path) for path, _ in flat]
    norms = [float(np.linalg.norm(np.asarray(leaf, np.float64).ravel())) for _, leaf in flat]
    return names, norms


def token_norms(x: Any) -> np.ndarray:
    """The L2 norm of each token's vector: ``[..., C]`` -> ``[...]`` (float32).

    >>> token_norms(np.array([[3.0, 4.0]])).tolist()
    [5.0]
    """
    return np.asarray(jnp.linalg.norm(jnp.asarray(x, jnp.float32), axis=-1))


def instrumentation(config: Any) -> tuple[bool, bool]:
    """``(residual, components)``: the job's ``architecture.instrumentation`` switches (off without a config).

    >>> instrumentation({"architecture": {"instrumentation": {"residual": True, "components": False}}})
    (True, False)
    """
    if config is None:
        return False, False
    config = config if OmegaConf.is_config(config) else OmegaConf.create(config)
    return bool(OmegaConf.select(config, RESIDUAL, default=False)), bool(OmegaConf.select(config, COMPONENTS,
                                                                                         default=False))


def _residual_points(trace: Trace) -> np.ndarray:
    """Each token's residual norm entering block 0, then after each attention and each MLP: ``[2L + 1, S, T]``."""
    points = [trace.embeddings]
    for i in range(trace.n_layers):
        entering = trace.embeddings if i == 0 else trace.blocks[i - 1]
        points += [entering + trace.attn[i], trace.blocks[i]]
    return token_norms(jnp.stack(points))


def _picture(activations, layer_weights, components, residual) -> bytes:
    panels = 2 + (residual is not None)
    figure = new_figure(4.2 * panels, 3.6)
    axes = figure.add_subplot(1, panels, 1)
    axes.plot(range(len(activations)), activations, marker="o", label="residual stream")
    if components is not None:
        axes.plot(np.arange(1, len(components) + 1), components[:, 0], marker="s", label="attention output")
        axes.plot(np.arange(1, len(components) + 1), components[:, 1], marker="^", label="MLP output")
    axes.set_xlabel("after block (0: embeddings)")
    axes.set_ylabel("mean token L2 norm")
    axes.set_title("activations")
    axes.legend(fontsize=7)
    axes = figure.add_subplot(1, panels, 2)
    axes.bar(range(len(layer_weights)), layer_weights)
    axes.set_xlabel("block")
    axes.set_ylabel("L2 norm of its parameters")
    axes.set_title("weights")
    if residual is not None:
        axes = figure.add_subplot(1, panels, 3)
        image = axes.imshow(residual[:, 0], aspect="auto", cmap="magma", interpolation="nearest")
        axes.set_xlabel("position (first sample)")
        axes.set_ylabel("stream point (embed, attn 0, mlp 0, ...)")
        axes.set_title("residual norm per token")
        figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return png(figure)


@part("analysis", "norms", "Weight norms and per-layer activation norms (residual / components with instrumentation).")
class Norms(ArrayAnalysis):
    """Weight and activation norms, layer by layer (see the module doc); reads ``architecture.instrumentation``.

    >>> Norms.reads
    ('architecture.instrumentation.residual', 'architecture.instrumentation.components')
    """

    reads = (RESIDUAL, COMPONENTS)

    @classmethod
    def compute(cls, context: EvalContext, **options: Any) -> AnalysisResult:
        """The norms of the current parameters and of their activations on validation tokens."""
        cls.check_options(options)
        residual_on, components_on = instrumentation(context.config)
        names, norms = leaf_norms(context.params)
        trace = record(context.model, context.params, analysis_input(context)["x"])
        layer_weights = np.array([np.linalg.norm([n for name, n in zip(names, norms, strict=True)
                                                  if f"/blocks_{i}/" in f"/{name}"]) for i in range(trace.n_layers)])
        activations = token_norms(trace.stream()).mean(axis=(1, 2))
        arrays = {"weights": np.array(norms, np.float64), "weight_names": np.array(names),
                  "layer_weights": layer_weights, "activations": activations}
        scalars = {"weights": float(np.linalg.norm(norms)), "activations": float(activations[-1]),
                   "growth": float(activations[-1] / max(float(activations[0]), 1e-30))}
        components = residual = None
        if components_on:
            components = np.stack([token_norms(trace.attn).mean(axis=(1, 2)),
                                   token_norms(trace.mlp).mean(axis=(1, 2))], axis=1)
            arrays["components"] = components
            scalars["attn"], scalars["mlp"] = float(components[:, 0].mean()), float(components[:, 1].mean())
        if residual_on:
            residual = _residual_points(trace)
            arrays["residual"] = residual
            scalars["residual_max"] = float(residual.max())
        return AnalysisResult(scalars, arrays, _picture(activations, layer_weights, components, residual))
