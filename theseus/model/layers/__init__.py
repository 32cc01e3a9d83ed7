"""The modules a GPT is made of: MLP, CausalSelfAttention, Block, and RoPE helpers."""

from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.block import Block
from theseus.model.layers.mlp import MLP

__all__ = ["MLP", "CausalSelfAttention", "Block"]
