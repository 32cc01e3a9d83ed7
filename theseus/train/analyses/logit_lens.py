"""The logit lens: the residual stream after each block read out as if it were the last.

Each point of the stream (the embeddings, then each block's output) goes through the model's final
norm and its unembedding (tied or not), as the model's own last layer does; the top tokens
of each position show what the model "predicts" at that depth. The last point's are the model's
own predictions.

Files under ``analysis/logit-lens/``: ``top_ids.npy`` / ``top_probs.npy`` ``[layers + 1, sample, T, K]``,
``loss.npy`` ``[layers + 1]`` (mean cross-entropy of each point's prediction of the next token),
``agreement.npy`` ``[layers + 1]`` (fraction of positions whose top token is the model's),
``tokens.npy``, ``top_text.npy`` (each top-1 token decoded, when the job's tokenizer loads offline)
and ``logit-lens.png``. Keys: ``analysis/logit-lens/agreement`` (mean over the points before the
last), ``settled`` (the first point from which every point agrees on at least half the positions)
and ``loss_gap`` (the loss of the point before the last minus the last's).

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> from theseus.train.analyses.trace import record
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
>>> tokens = jnp.arange(8)[None] % 64
>>> params = model.init(jax.random.PRNGKey(0), tokens)["params"]
>>> lens = read_out(record(model, params, tokens), np.asarray(tokens), k=3)
>>> own = model.apply({"params": params}, tokens).argmax(-1)
>>> lens["top_ids"].shape, bool((lens["top_ids"][-1, ..., 0] == own).all())
((3, 1, 8, 3), True)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput
from theseus.train.analyses.base import ROWS, AnalysisResult, ArrayAnalysis, analysis_input
from theseus.train.analyses.labels import load_tokenizer, token_labels
from theseus.train.analyses.picture import new_figure, png
from theseus.train.analyses.trace import Trace, record
from theseus.train.evaluations import EvalContext
from theseus.train.parts import part

__all__ = ["TOP", "LogitLens", "read_out"]

TOP = 5  # top tokens kept per position and point
ANNOTATED = 1024  # the picture writes each cell's token up to this many cells


def read_out(trace: Trace, targets: np.ndarray | None = None, mask: np.ndarray | None = None,
             k: int = TOP) -> dict[str, np.ndarray]:
    """Every point of the stream through the final norm and the unembedding: ``top_ids``, ``top_probs``
    ``[points, S, T, k]``, and with ``targets`` ``[S, T]`` the mean cross-entropy ``loss`` ``[points]``
    (over the positions ``mask`` keeps).

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> out = read_out(record(model, params, [[1, 2, 3]]), np.array([[2, 3, 4]]), k=2)
    >>> out["top_ids"].shape, out["loss"].shape
    ((2, 1, 3, 2), (2,))
    """
    read = trace.adapter.read_out(trace.config, trace.params)
    ids, probs, losses = [], [], []
    weights = None if mask is None else jnp.asarray(mask, jnp.float32)
    for point in trace.stream():
        logp = jax.nn.log_softmax(read(point), axis=-1)
        top_logp, top_ids = jax.lax.top_k(logp, k)
        ids.append(np.asarray(top_ids, np.int32))
        probs.append(np.asarray(jnp.exp(top_logp), np.float32))
        if targets is not None:
            nll = -jnp.take_along_axis(logp, jnp.asarray(targets, jnp.int32)[..., None], axis=-1)[..., 0]
            w = jnp.ones_like(nll) if weights is None else weights
            losses.append(float(jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)))
    out = {"top_ids": np.stack(ids), "top_probs": np.stack(probs)}
    if targets is not None:
        out["loss"] = np.array(losses, np.float32)
    return out


def _agreement(top_ids: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Fraction of (kept) positions where each point's top token is the last point's: ``[points]``."""
    same = top_ids[..., 0] == top_ids[-1:, ..., 0]
    weights = np.ones(same.shape[1:]) if mask is None else np.asarray(mask, np.float64)
    return (same * weights).sum(axis=(1, 2)) / max(weights.sum(), 1.0)


def _picture(top_ids: np.ndarray, top_probs: np.ndarray, labels: list[str], sample: int) -> bytes:
    points, T = top_ids.shape[0], top_ids.shape[2]
    figure = new_figure(min(2.0 + 0.45 * T, 30.0), 1.5 + 0.4 * points)
    axes = figure.add_subplot()
    image = axes.imshow(top_probs[:, sample, :, 0], aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0,
                        interpolation="nearest", origin="lower")
    if points * T <= ANNOTATED:
        for p in range(points):
            for t in range(T):
                axes.text(t, p, labels[p * T + t], ha="center", va="center", fontsize=6)
    axes.set_yticks(range(points), ["embed", *(f"block {i}" for i in range(points - 1))])
    axes.set_xlabel("position")
    axes.set_title(f"logit lens: top token and its probability at each depth (sample {sample})")
    figure.colorbar(image, ax=axes, fraction=0.03)
    figure.tight_layout()
    return png(figure)


@part("analysis", "logit-lens", "Logit lens: each block's residual through the final norm and unembedding.")
class LogitLens(ArrayAnalysis):
    """The top tokens each block's output predicts, read out as `read_out` does (see the module doc).

    Option ``sample``: the row of the first validation batch to read (else the first
    `theseus.train.analyses.base.ROWS`; the picture shows the first).

    >>> LogitLens.name, LogitLens.OPTIONS
    ('logit-lens', ('sample',))
    """

    OPTIONS = ("sample",)

    @classmethod
    def compute(cls, context: EvalContext, **options: Any) -> AnalysisResult:
        """The lens of the current parameters on validation tokens."""
        options = cls.check_options(options)
        sample = options.get("sample")
        batch = analysis_input(context, rows=ROWS if sample is None else sample + 1)
        if sample is not None and sample >= batch["x"].shape[0]:
            raise BadInput(f"--sample {sample} is out of range: a validation batch here has {batch['x'].shape[0]} "
                             "rows")
        rows = slice(None) if sample is None else slice(sample, sample + 1)
        tokens, targets = batch["x"][rows], batch["y"][rows]
        mask = batch["padding_mask"][rows] if "padding_mask" in batch else None
        trace = record(context.model, context.params, tokens)
        lens = read_out(trace, targets, mask)
        agreement = _agreement(lens["top_ids"], mask)
        settled = next(i for i in range(len(agreement)) if (agreement[i:] >= 0.5).all())
        arrays = {**lens, "agreement": agreement.astype(np.float32), "tokens": np.asarray(tokens, np.int32)}
        tokenizer = load_tokenizer(context.tokenizer)
        firsts = lens["top_ids"][..., 0]
        if tokenizer is not None:
            arrays["top_text"] = np.array(token_labels(tokenizer, firsts.ravel().tolist())).reshape(firsts.shape)
        labels = token_labels(tokenizer, firsts[:, 0].ravel().tolist())
        scalars = {"agreement": float(agreement[:-1].mean()) if len(agreement) > 1 else 1.0,
                   "settled": float(settled),
                   "loss_gap": float(lens["loss"][-2] - lens["loss"][-1]) if len(agreement) > 1 else 0.0}
        return AnalysisResult(scalars, arrays, _picture(lens["top_ids"], lens["top_probs"], labels, 0))
