"""An `EvalContext` over one fixed batch, for running an analysis on a model outside a training job."""

import numpy as np

from theseus.train.evaluations import EvalContext


def context_of(model, params, tokens, cfg=None, written=None):
    """A context whose every batch is ``tokens`` (targets: the next token), with the job config ``cfg``; files an
    analysis publishes land in ``written`` by name when it is given."""
    batch = {"x": np.asarray(tokens), "y": np.roll(np.asarray(tokens), -1, axis=1),
             "padding_mask": np.ones(tokens.shape, bool)}

    def write(name, data):
        written[name] = data
        return f"objects/n/analysis/{name}"

    return EvalContext(step=1, params=params, config=cfg, sources=("toy",), mean_loss=lambda d: 0.0, model=model,
                       batch=lambda d: batch, write=write if written is not None else EvalContext.write)
