"""The pure training and evaluation steps.

State is a plain dict pytree, one named leaf group per thing a checkpoint saves:

    {"params": <GPT params>, "opt_state": <optax state>, "step": int32 scalar}

`step` counts the updates applied so far (the node at seq k holds step == k).

>>> import jax, jax.numpy as jnp, optax
>>> from theseus.model import GPT, GPTConfig
>>> from theseus.train.optimizers import AdamW
>>> from theseus.train.schedules import wsd_schedule
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8)
>>> model = GPT(cfg)
>>> schedule = wsd_schedule(1e-3, 10, 0.0, 0.0, 0.1)
>>> opt = optax.chain(optax.clip_by_global_norm(1.0), AdamW.build(AdamW.Config(lr=1e-3), schedule))
>>> state = init_state(model, opt, jax.random.PRNGKey(0), cfg.block_size)
>>> step = jax.jit(make_train_step(model, opt, accum_steps=2, schedule=schedule), donate_argnums=0)
>>> batch = {"x": jnp.zeros((4, 8), jnp.int32), "y": jnp.zeros((4, 8), jnp.int32),
...          "padding_mask": jnp.ones((4, 8), bool)}
>>> state, metrics = step(state, batch, jax.random.PRNGKey(1))
>>> int(state["step"]), sorted(metrics)
(1, ['grad_norm', 'loss', 'lr', 'tokens'])
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from theseus.errors import BadInput
from theseus.model.gpt import cross_entropy
from theseus.train.objective import BATCH_KEYS, OPTIONAL_KEYS, Forward, Objective, TokenObjective, model_forward


def init_state(model: nn.Module, optimizer: optax.GradientTransformation, rng, block_size: int) -> dict:
    """Fresh training state: model params from `rng`, optimizer state, step 0.

    Pure, so it can run under `jax.jit(..., out_shardings=...)` to create sharded
    state, or `jax.eval_shape` to get its abstract layout without memory.

    >>> import jax, optax
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
    >>> abstract = jax.eval_shape(lambda: init_state(model, optax.sgd(0.1), jax.random.PRNGKey(0), 8))
    >>> sorted(abstract), abstract["step"].dtype
    (['opt_state', 'params', 'step'], dtype('int32'))
    """
    params = model.init(rng, jnp.zeros((1, block_size), jnp.int32))["params"]
    return {"params": params, "opt_state": optimizer.init(params), "step": jnp.zeros((), jnp.int32)}


def global_norm(tree) -> jax.Array:
    """sqrt of the sum of squares of every leaf, in float32.

    >>> import jax.numpy as jnp
    >>> float(global_norm({"a": jnp.array([3.0]), "b": jnp.array([[4.0]])}))
    5.0
    """
    leaves = jax.tree.leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


def split_micro_batches(batch: dict, accum_steps: int) -> dict:
    """Arrange a batch as [accum_steps, micro, T] per key.

    A flat [accum_steps * micro, T] array is split with a stride: micro-batch j holds
    rows j, j + accum_steps, j + 2 * accum_steps, ... so that an array sharded along
    its batch rows keeps every micro-batch spread over all shards. An array that is
    already [accum_steps, micro, T] is used as is. The loss and gradient of a step do
    not depend on how rows are grouped.

    >>> import jax.numpy as jnp
    >>> b = split_micro_batches({"x": jnp.arange(4)[:, None]}, 2)
    >>> b["x"][:, :, 0].tolist()
    [[0, 2], [1, 3]]
    """
    if isinstance(accum_steps, bool) or not isinstance(accum_steps, int) or accum_steps <= 0:
        raise BadInput(f"accum_steps must be a positive int, got {accum_steps!r}")
    out = {}
    for key, value in batch.items():
        value = jnp.asarray(value)
        if value.ndim == 3:
            if value.shape[0] != accum_steps:
                raise BadInput(
                    f"batch[{key!r}] has shape {value.shape}; a 3-D batch must be [accum_steps={accum_steps}, micro, T]"
                )
            out[key] = value
        elif value.ndim == 2:
            rows = value.shape[0]
            if rows % accum_steps != 0:
                raise BadInput(f"batch[{key!r}] has {rows} rows, not divisible by accum_steps={accum_steps}")
            out[key] = jnp.swapaxes(value.reshape(rows // accum_steps, accum_steps, *value.shape[1:]), 0, 1)
        else:
            raise BadInput(f"batch[{key!r}] must be [rows, T] or [accum_steps, micro, T], got shape {value.shape}")
    return out


def _check_batch(batch: dict) -> None:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise BadInput(f"batch is missing keys {missing}; expected {list(BATCH_KEYS)}, got {sorted(batch)}")


def step_keys(batch: dict) -> tuple[str, ...]:
    """The keys of ``batch`` a step reads: `BATCH_KEYS`, then the `OPTIONAL_KEYS` it holds.

    >>> step_keys({"x": 0, "y": 0, "padding_mask": 0, "positions": 0, "note": 0})
    ('x', 'y', 'padding_mask', 'positions')
    """
    _check_batch(batch)
    return (*BATCH_KEYS, *(k for k in OPTIONAL_KEYS if k in batch))


def _uses_dropout(model: nn.Module, dropout: bool | None) -> bool:
    if dropout is not None:
        return bool(dropout)
    config = getattr(model, "config", None)
    return bool(config is not None and getattr(config, "dropout", 0.0) > 0)


def make_grad_fn(model: nn.Module, accum_steps: int = 1, *, dropout: bool | None = None, token_loss=cross_entropy,
                 objective: Objective | None = None, forward: Forward | None = None):
    """Build `grad_fn(params, batch, rng, frozen=None) -> (loss, grads, tokens)` with gradient accumulation.

    `batch` is split into `accum_steps` micro-batches (`split_micro_batches`) and
    `jax.lax.scan` runs one forward/backward per micro-batch. Each micro-batch
    contributes its ``loss_sum`` / (``objective.count`` of the whole batch), so `loss`
    (the mean masked token loss by default) and `grads` (float32 sums, cast to the param dtype)
    equal those of one big batch. Micro-batch i uses dropout key `jax.random.fold_in(rng, i)`.
    `dropout=None` means "when model.config.dropout > 0". `objective` (`theseus.train.objective`;
    default: `TokenObjective` of `token_loss`, the per-token loss ``(logits, y) -> [B, T]``) over
    `forward` (default `model_forward(model)`); `frozen` reaches both and gets no gradient.
    `make_train_step` also reports the objective's metrics (`accumulated_grads`).

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> batch = {"x": jnp.zeros((4, 8), jnp.int32), "y": jnp.zeros((4, 8), jnp.int32),
    ...          "padding_mask": jnp.ones((4, 8), bool)}
    >>> loss, grads, tokens = make_grad_fn(model, 2)(params, batch, jax.random.PRNGKey(1))
    >>> int(tokens)
    32
    """
    accumulate = accumulated_grads(model, accum_steps, dropout=dropout, token_loss=token_loss, objective=objective,
                                   forward=forward)

    def grad_fn(params, batch, rng, frozen=None):
        loss, grads, tokens, _ = accumulate(params, batch, rng, frozen)
        return loss, grads, tokens

    return grad_fn


def accumulated_grads(model: nn.Module, accum_steps: int = 1, *, dropout: bool | None = None,
                      token_loss=cross_entropy, objective: Objective | None = None, forward: Forward | None = None):
    """`make_grad_fn`'s ``grad_fn`` that also returns the objective's metrics (each sum over the count):
    ``(params, batch, rng, frozen=None) -> (loss, grads, tokens, metrics)``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> batch = {"x": jnp.zeros((2, 8), jnp.int32), "y": jnp.zeros((2, 8), jnp.int32),
    ...          "padding_mask": jnp.ones((2, 8), bool)}
    >>> accumulated_grads(model)(params, batch, jax.random.PRNGKey(1))[3]
    {}
    """
    if isinstance(accum_steps, bool) or not isinstance(accum_steps, int) or accum_steps <= 0:
        raise BadInput(f"accum_steps must be a positive int, got {accum_steps!r}")
    dropout = _uses_dropout(model, dropout)
    objective = TokenObjective(token_loss) if objective is None else objective
    forward = model_forward(model) if forward is None else forward

    def grad_fn(params, batch, rng, frozen=None):
        micro = split_micro_batches({k: batch[k] for k in step_keys(batch)}, accum_steps)
        count = objective.count(batch)
        denom = jnp.maximum(count, 1.0)

        def micro_loss(p, one, key):
            loss_sum, metric_sums = objective(forward, p, frozen, one, key if dropout else None)
            return loss_sum / denom, metric_sums

        value_and_grad = jax.value_and_grad(micro_loss, has_aux=True)

        def body(carry, inputs):
            loss_acc, grad_acc, metric_acc = carry
            i, one = inputs
            (loss, metric_sums), grads = value_and_grad(params, one, jax.random.fold_in(rng, i))
            grad_acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grad_acc, grads)
            metric_acc = {k: a + metric_sums[k].astype(jnp.float32) for k, a in metric_acc.items()}
            return (loss_acc + loss, grad_acc, metric_acc), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        carry = (jnp.zeros((), jnp.float32), zeros, {name: jnp.zeros((), jnp.float32) for name in objective.metrics})
        xs = (jnp.arange(accum_steps), micro)
        if accum_steps == 1:
            (loss, grads, metrics), _ = body(carry, jax.tree.map(lambda a: a[0], xs))
        else:
            (loss, grads, metrics), _ = jax.lax.scan(body, carry, xs)
        grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
        return loss, grads, count.astype(jnp.int32), {k: v / denom for k, v in metrics.items()}

    return grad_fn


def make_train_step(
    model: nn.Module,
    optimizer: optax.GradientTransformation,
    accum_steps: int = 1,
    *,
    schedule=None,
    dropout: bool | None = None,
    token_loss=cross_entropy,
    objective: Objective | None = None,
    forward: Forward | None = None,
):
    """Build `train_step(state, batch, rng, frozen=None) -> (state, metrics)`, a pure function to jit.

    - `batch`: dict with `x`, `y` (int token ids) and `padding_mask` (bool, True = token
      counts), each [accum_steps * micro, T] or [accum_steps, micro, T]
      (see `split_micro_batches`); a packed batch's `segment_ids` and `positions` reach the model too.
    - `rng`: the run's base key; step k uses `jax.random.fold_in(rng, k)` (then folded
      with the micro-batch index) for dropout.
    - `frozen`: a tree the forward and objective read beside the params (a frozen base, a
      reference copy); no gradient, no optimizer state. None for pretraining.
    - gradients are accumulated over micro-batches with `jax.lax.scan` (`make_grad_fn`);
      loss and gradient equal those of one big batch.
    - `metrics`: `loss` (the objective's mean), `grad_norm` (global norm before
      clipping), `tokens` (the objective's count: masked-in tokens), `lr` = schedule(step) when a
      schedule is given (the rate this update used), and the objective's own metrics by name.
    - `dropout`: run the model with dropout; None means "when model.config.dropout > 0".
    - `objective`, `forward` (`theseus.train.objective`): default the masked mean of
      `token_loss(logits, y) -> [B, T]` (default cross-entropy) over ``model.apply``.

    Jit it with the state donated: `jax.jit(train_step, donate_argnums=0)`.

    >>> import jax, jax.numpy as jnp, optax
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
    >>> opt = optax.adamw(1e-3)
    >>> state = init_state(model, opt, jax.random.PRNGKey(0), 8)
    >>> batch = {k: jnp.ones((2, 8), jnp.int32) for k in ("x", "y")} | {"padding_mask": jnp.ones((2, 8), bool)}
    >>> state, m = jax.jit(make_train_step(model, opt))(state, batch, jax.random.PRNGKey(1))
    >>> float(m["loss"]) > 0
    True
    """
    grad_fn = accumulated_grads(model, accum_steps, dropout=dropout, token_loss=token_loss, objective=objective,
                                forward=forward)

    def train_step(state, batch, rng, frozen=None):
        params = state["params"]
        loss, grads, tokens, extra = grad_fn(params, batch, jax.random.fold_in(rng, state["step"]), frozen)
        updates, opt_state = optimizer.update(grads, state["opt_state"], params)
        new_state = {
            "params": optax.apply_updates(params, updates),
            "opt_state": opt_state,
            "step": state["step"] + 1,
        }
        metrics = {"loss": loss, "grad_norm": global_norm(grads), "tokens": tokens, **extra}
        if schedule is not None:
            metrics["lr"] = jnp.asarray(schedule(state["step"]), jnp.float32)
        return new_state, metrics

    return train_step


def make_eval_step(model: nn.Module, *, token_loss=cross_entropy, objective: Objective | None = None,
                   forward: Forward | None = None):
    """Build `eval_step(params, batch, frozen=None) -> {"loss", "tokens"}`: the objective's mean, no dropout.

    `batch` is like train_step's ([rows, T] or [accum, micro, T], flattened here).
    `tokens` is the objective's count (the mask count), to weight a mean over several eval batches.
    `objective`, `forward`: the train step's (default: the masked mean of `token_loss(logits, y) -> [B, T]`,
    default cross-entropy), so a validation loss measures what training minimises.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> batch = {"x": jnp.zeros((2, 8), jnp.int32), "y": jnp.zeros((2, 8), jnp.int32),
    ...          "padding_mask": jnp.ones((2, 8), bool)}
    >>> int(jax.jit(make_eval_step(model))(params, batch)["tokens"])
    16
    """
    objective = TokenObjective(token_loss) if objective is None else objective
    forward = model_forward(model) if forward is None else forward

    def eval_step(params, batch, frozen=None):
        flat = {k: jnp.asarray(batch[k]) for k in step_keys(batch)}
        flat = {k: a.reshape(-1, a.shape[-1]) for k, a in flat.items()}
        count = objective.count(flat)
        loss_sum, _ = objective(forward, params, frozen, flat, None)
        return {"loss": loss_sum / jnp.maximum(count, 1.0), "tokens": count.astype(jnp.int32)}

    return eval_step
