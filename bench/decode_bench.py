"""Decoding with the key/value cache vs recomputing the full forward pass for every new token.

One GPT (n_embd 64, 2 layers, 4 heads, vocabulary 2048, block 512, float32 activations,
random parameters), 8 prompts of 9 to 16 tokens, 256 new tokens each, greedy, no
end-of-text token (every row decodes all 256):

- cache: ``theseus.model.decode.generate_tokens(..., cache=True)``: a prefill of the
  prompts, then one token per row per step through the cache, in one jitted loop;
- full forward: the same loop with ``cache=False``: every step runs the model over the
  whole [8, 272] buffer and reads the logits at each row's position (what a decoder
  without a cache does).

Both compile once before timing (a warm-up call of the same shapes); each is then timed
``--rounds`` times, alternating, and the medians' tokens/s (8 x 256 new tokens over the
seconds) and their ratio are printed. The two must produce the same tokens.

    uv run python bench/decode_bench.py [--rounds 3] [--new-tokens 256]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from theseus.model.config import GPTConfig
from theseus.model.decode import Sampler, generate_tokens
from theseus.model.gpt import GPT

BATCH = 8
TARGET = 5.0  # the cache's tokens/s over the full forward pass's


def model_and_prompts(seed: int = 0) -> tuple[GPT, dict, list[list[int]]]:
    """The benchmark's GPT, random parameters and 8 prompts of 9..16 tokens."""
    config = GPTConfig(n_embd=64, n_layers=2, n_head=4, vocab_size=2048, block_size=512, activation_dtype="float32")
    model = GPT(config)
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros((1, 16), jnp.int32))["params"]
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, config.vocab_size, size=9 + b).tolist() for b in range(BATCH)]
    return model, params, prompts


def timed(model: GPT, params: dict, prompts: list[list[int]], new: int, cache: bool) -> tuple[float, np.ndarray]:
    """Seconds of one decoding call (tokens on the host) and its tokens."""
    t0 = time.perf_counter()
    out = generate_tokens(model, params, prompts, new, Sampler(temperature=0.0), cache=cache)
    return time.perf_counter() - t0, out.tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed calls of each, alternating (default 3)")
    parser.add_argument("--new-tokens", type=int, default=256, help="new tokens per row (default 256)")
    args = parser.parse_args()

    model, params, prompts = model_and_prompts()
    new = args.new_tokens
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({platform.processor() or platform.machine()}), "
          f"batch {BATCH}, {new} new tokens, prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens")
    t0 = time.perf_counter()
    _, cached_tokens = timed(model, params, prompts, new, cache=True)
    print(f"  warm-up (compile + one run), cache: {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    _, full_tokens = timed(model, params, prompts, new, cache=False)
    print(f"  warm-up (compile + one run), full forward: {time.perf_counter() - t0:.1f} s", flush=True)
    if not np.array_equal(cached_tokens, full_tokens):
        raise SystemExit("the cache and the full forward pass decoded different tokens")

    seconds: dict[str, list[float]] = {"cache": [], "full": []}
    for r in range(args.rounds):
        for name in ("cache", "full"):
            s, tokens = timed(model, params, prompts, new, cache=name == "cache")
            assert np.array_equal(tokens, cached_tokens)
            seconds[name].append(s)
        print(f"  round {r}: cache {seconds['cache'][-1]:.3f} s | full forward {seconds['full'][-1]:.2f} s",
              flush=True)
    rate = {name: BATCH * new / statistics.median(s) for name, s in seconds.items()}
    ratio = rate["cache"] / rate["full"]
    print()
    print("| figure | cache | full forward per token | ratio | target | pass |")
    print("|---|---|---|---|---|---|")
    print(f"| decode {new} new tokens, batch {BATCH}, greedy | {rate['cache']:,.0f} tokens/s | "
          f"{rate['full']:,.0f} tokens/s | {ratio:.1f}x | >= {TARGET:g}x | {'yes' if ratio >= TARGET else 'NO'} |")


if __name__ == "__main__":
    main()
