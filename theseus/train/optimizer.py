"""AdamW with a warmup-stable-decay (WSD) learning-rate schedule.

>>> opt = make_optimizer(lr=3e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, total_steps=1000,
...                      warmup_pct=0.01, decay_pct=0.1, final_lr_frac=0.01)
>>> import jax.numpy as jnp
>>> state = opt.init({"w": jnp.ones((2, 2)), "b": jnp.zeros(2)})
"""

import jax
import jax.numpy as jnp
import optax


def _check_schedule_args(lr, total_steps, warmup_pct, decay_pct, final_lr_frac):
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
        raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")
    for name, value in (("warmup_pct", warmup_pct), ("decay_pct", decay_pct), ("final_lr_frac", final_lr_frac)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if warmup_pct + decay_pct > 1.0:
        raise ValueError(f"warmup_pct + decay_pct must be at most 1, got {warmup_pct} + {decay_pct}")


def wsd_schedule(lr: float, total_steps: int, warmup_pct: float, decay_pct: float, final_lr_frac: float):
    """Warmup-stable-decay schedule: step (int, may be traced) -> learning rate (float32).

    With W = int(warmup_pct * total_steps), D = int(decay_pct * total_steps) and
    floor = lr * final_lr_frac:

    - warmup, step in [0, W): linear from floor to lr, lr(s) = floor + (lr - floor) * s / W
      (it starts at the floor rather than 0 so the first step is not wasted);
    - stable, step in [W, total_steps - D): lr;
    - decay, step in [total_steps - D, total_steps]: linear from lr down to floor,
      reached at step total_steps and held after it (with D = 0 the rate stays lr).

    The value at step s is the rate used by the update that turns step s into s + 1.

    >>> f = wsd_schedule(1.0, 100, warmup_pct=0.1, decay_pct=0.2, final_lr_frac=0.1)
    >>> [round(float(f(s)), 3) for s in (0, 5, 10, 50, 80, 90, 100, 200)]
    [0.1, 0.55, 1.0, 1.0, 1.0, 0.55, 0.1, 0.1]
    """
    _check_schedule_args(lr, total_steps, warmup_pct, decay_pct, final_lr_frac)
    warmup = int(warmup_pct * total_steps)
    decay = int(decay_pct * total_steps)
    decay_start = total_steps - decay
    floor = lr * final_lr_frac

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        warm = floor + (lr - floor) * s / max(warmup, 1)
        remaining = jnp.clip((total_steps - s) / decay, 0.0, 1.0) if decay else 1.0
        down = floor + (lr - floor) * remaining
        out = jnp.where(s < warmup, warm, jnp.where(s < decay_start, lr, down))
        return out.astype(jnp.float32)

    return schedule


def decay_mask(params):
    """True for leaves that get weight decay: those with 2 or more dims (nanoGPT's rule).

    Kernels and embeddings are decayed; biases and LayerNorm scales are not.

    >>> import jax.numpy as jnp
    >>> decay_mask({"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)})
    {'bias': False, 'kernel': True}
    """
    return jax.tree.map(lambda p: jnp.ndim(p) >= 2, params)


def make_optimizer(
    lr: float,
    weight_decay: float,
    beta1: float,
    beta2: float,
    total_steps: int,
    warmup_pct: float,
    decay_pct: float,
    final_lr_frac: float,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """optax chain: clip_by_global_norm(clip_norm), then AdamW on `wsd_schedule(...)`.

    Weight decay applies only to >=2-D parameters (`decay_mask`). `clip_norm=None`
    (or 0) turns clipping off without changing the optimizer state's layout. Get the matching schedule for logging with
    `wsd_schedule(lr, total_steps, warmup_pct, decay_pct, final_lr_frac)`.

    >>> import jax.numpy as jnp
    >>> opt = make_optimizer(1e-3, 0.1, 0.9, 0.95, total_steps=10, warmup_pct=0.0, decay_pct=0.0, final_lr_frac=0.0)
    >>> params = {"w": jnp.ones((2, 2))}
    >>> updates, _ = opt.update({"w": jnp.ones((2, 2))}, opt.init(params), params)
    >>> round(float(updates["w"][0, 0]), 6)
    -0.0011
    """
    schedule = wsd_schedule(lr, total_steps, warmup_pct, decay_pct, final_lr_frac)
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay!r}")
    if clip_norm is not None and clip_norm < 0:
        raise ValueError(f"clip_norm must be positive or None, got {clip_norm!r}")
    adamw = optax.adamw(schedule, b1=beta1, b2=beta2, weight_decay=weight_decay, mask=decay_mask)
    clip = optax.clip_by_global_norm(clip_norm) if clip_norm else optax.identity()
    return optax.chain(clip, adamw)
