"""GPT and its layers (flax.linen)."""

from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT, count_params, cross_entropy, loss_fn

__all__ = ["GPT", "GPTConfig", "count_params", "cross_entropy", "loss_fn"]
