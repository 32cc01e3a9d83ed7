"""Walk a flax module tree during a forward pass: every module method call, with its path, its arguments
and what it returned, handed to a visitor as it happens.

The walk runs under `flax.linen.intercept_methods`, which hands over each call and changes nothing (but for
`intercepting`'s ``rewrite`` hook, through which LoRA changes projections' outputs: this module is the one place
that intercepts), so a model needs no path of its own switched on to be inspected. `find_modules` (the paths of
the modules of a type, in call order), `theseus.model.debug.capture` (one module's inputs and output) and the analyses'
forward trace (`theseus.train.analyses.trace.record`) are all visitors of one walk.

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
>>> idx = jnp.zeros((1, 4), jnp.int32)
>>> variables = model.init(jax.random.PRNGKey(0), idx)
>>> returned = []
>>> _ = walk(model, variables, idx, on_return=lambda call: returned.append(call.path))
>>> returned[-1], ("blocks_0", "mlp") in returned
((), True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax

from theseus.errors import BadInput

__all__ = ["Call", "StopWalk", "bind_arguments", "call_at", "find_modules", "intercepting", "normalize_path",
           "subtree", "walk"]

Path = tuple[str, ...]


class StopWalk(Exception):
    """Raised by a visitor to end the forward pass there; `walk` then returns None.

    >>> issubclass(StopWalk, Exception)
    True
    """


@dataclasses.dataclass(frozen=True)
class Call:
    """One module method call of a walked pass.

    ``module`` is the bound module, ``method`` the name of the method called (``"__call__"`` for a plain
    call), ``args`` and ``kwargs`` what it received and ``output`` what it returned (None while it runs).

    >>> import flax.linen as nn
    >>> call = Call(nn.Dense(3), "__call__", (1,), {})
    >>> call.is_call, call.output is None
    (True, True)
    """

    module: nn.Module
    method: str
    args: tuple
    kwargs: dict
    output: Any = None

    @property
    def path(self) -> Path:
        """The module's path in the model, like ``("blocks_0", "mlp")`` (``()`` for the model itself)."""
        return tuple(self.module.path)

    @property
    def is_call(self) -> bool:
        """Whether the call is the module's ``__call__`` (not one of its other methods)."""
        return self.method == "__call__"


Visitor = Callable[[Call], Any]


@contextlib.contextmanager
def intercepting(on_return: Visitor | None = None, *, on_enter: Visitor | None = None,
                 rewrite: Visitor | None = None) -> Iterator[None]:
    """Within the block, hand every flax module method call to ``on_enter`` (before it runs) and to
    ``on_return`` (once it returned, with ``output`` set); a visitor's return value is ignored. ``rewrite``, the
    one hook that changes the pass, is handed each call once it returned (before ``on_return``) and its return
    value becomes the call's output, what the caller receives (LoRA adds its adapters' term so:
    `theseus.model.lora.apply`); return ``call.output`` to leave a call as it is.

    >>> import jax, jax.numpy as jnp, flax.linen as nn
    >>> dense = nn.Dense(2)
    >>> variables = dense.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    >>> seen = []
    >>> with intercepting(lambda call: seen.append(call.output.shape)):
    ...     _ = dense.apply(variables, jnp.ones((4, 3)))
    >>> seen
    [(4, 2)]
    >>> with intercepting(rewrite=lambda call: call.output * 0 if isinstance(call.module, nn.Dense) else call.output):
    ...     float(abs(dense.apply(variables, jnp.ones((4, 3)))).max())
    0.0
    """
    def intercept(next_fun, args, kwargs, context):
        call = Call(context.module, context.method_name, args, kwargs)
        if on_enter is not None:
            on_enter(call)
        output = next_fun(*args, **kwargs)
        if rewrite is not None:
            output = rewrite(dataclasses.replace(call, output=output))
        if on_return is not None:
            on_return(dataclasses.replace(call, output=output))
        return output

    with nn.intercept_methods(intercept):
        yield


def walk(model: nn.Module, variables: Any, *args: Any, on_return: Visitor | None = None,
         on_enter: Visitor | None = None, abstract: bool = False, **kwargs: Any) -> Any:
    """Run ``model.apply(variables, *args, **kwargs)`` under `intercepting`; return its output, or None when
    a visitor raised `StopWalk`.

    ``abstract=True`` runs it under ``jax.eval_shape``: ``variables`` and ``args`` may then be
    ``jax.ShapeDtypeStruct`` and nothing is computed. Otherwise it runs eagerly (un-jitted), so a module
    called again on the arguments a visitor saw returns bitwise what it returned then.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=2, vocab_size=32, block_size=4))
    >>> idx = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    >>> abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), idx)
    >>> def stop_at_mlp(call):
    ...     if call.path == ("blocks_0", "mlp"):
    ...         raise StopWalk
    >>> walk(model, abstract, idx, on_return=stop_at_mlp, abstract=True) is None
    True
    """
    def forward(v: Any, *a: Any) -> Any:
        with intercepting(on_return, on_enter=on_enter):
            return model.apply(v, *a, **kwargs)

    try:
        return jax.eval_shape(forward, variables, *args) if abstract else forward(variables, *args)
    except StopWalk:
        return None


def normalize_path(path: str | Sequence[str]) -> Path:
    """A module path as a tuple: ``"blocks_2/mlp"`` or ``("blocks_2", "mlp")`` -> ``("blocks_2", "mlp")``.

    >>> normalize_path("blocks_2/mlp"), normalize_path(["blocks_0", "attn"])
    (('blocks_2', 'mlp'), ('blocks_0', 'attn'))
    """
    if isinstance(path, str):
        parts = tuple(p for p in path.replace(".", "/").split("/") if p)
    else:
        parts = tuple(str(p) for p in path)
    if not parts:
        raise BadInput("a module path needs at least one name, like ('blocks_0', 'mlp')")
    return parts


def find_modules(model: nn.Module, variables: Any, module_type: type | tuple[type, ...], *args: Any,
                 **kwargs: Any) -> list[Path]:
    """Paths of the modules of ``module_type`` that ``model.apply(variables, *args, **kwargs)`` calls, in call order.

    Runs abstractly (``jax.eval_shape``): ``variables`` and ``args`` may be arrays or
    ``jax.ShapeDtypeStruct``; nothing is computed.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> from theseus.model.layers.attention import CausalSelfAttention
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
    >>> idx = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    >>> abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), idx)
    >>> find_modules(model, abstract, CausalSelfAttention, idx)
    [('blocks_0', 'attn'), ('blocks_1', 'attn')]
    """
    if not (isinstance(module_type, type) or (isinstance(module_type, tuple) and all(
            isinstance(t, type) for t in module_type))):
        raise TypeError(f"module_type must be a class (like MLP) or a tuple of classes, got {module_type!r}")
    seen: list[Path] = []

    def enter(call: Call) -> None:
        if call.is_call and isinstance(call.module, module_type) and call.path not in seen:
            seen.append(call.path)

    walk(model, variables, *args, on_enter=enter, abstract=True, **kwargs)
    return seen


def call_at(model: nn.Module, variables: Any, path: str | Sequence[str], *args: Any, **kwargs: Any) -> Call:
    """The first ``__call__`` of the module at ``path`` in an eager ``model.apply(variables, *args, **kwargs)``;
    the rest of the pass is skipped. A path the pass never calls is a BadInput naming it.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> idx = jnp.zeros((1, 4), jnp.int32)
    >>> call = call_at(model, model.init(jax.random.PRNGKey(0), idx), "blocks_0/mlp", idx)
    >>> call.path, call.args[0].shape == call.output.shape
    (('blocks_0', 'mlp'), True)
    """
    path = normalize_path(path)
    found: list[Call] = []

    def stop_at(call: Call) -> None:
        if call.is_call and call.path == path:
            found.append(call)
            raise StopWalk

    walk(model, variables, *args, on_return=stop_at, **kwargs)
    if not found:
        raise BadInput(f"no module at path {'/'.join(path)} was called in the forward pass; "
                       "list paths with find_modules(model, variables, ModuleType, ...)")
    return found[0]


def bind_arguments(module: nn.Module, args: tuple, kwargs: dict, method: str = "__call__") -> dict[str, Any]:
    """A call's arguments by parameter name (defaults filled in, ``**kwargs`` spread), without ``self``.

    >>> import flax.linen as nn
    >>> bind_arguments(nn.Dropout(0.1), (1,), {})
    {'inputs': 1, 'deterministic': None, 'rng': None}
    """
    fn = getattr(type(module), method)
    try:
        bound = inspect.signature(fn).bind(module, *args, **kwargs)
    except TypeError:  # not introspectable: positional names arg0, arg1, ...
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    bound.apply_defaults()
    out: dict[str, Any] = {}
    params = inspect.signature(fn).parameters
    for i, (name, value) in enumerate(bound.arguments.items()):
        if i == 0:
            continue  # self
        if params[name].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def subtree(tree: Any, path: Sequence[str]) -> Any:
    """The part of a nested mapping (a variables collection) at ``path``, or None when it has none.

    >>> subtree({"blocks_0": {"mlp": {"w": 1}}}, ("blocks_0", "mlp")), subtree({}, ("x",))
    ({'w': 1}, None)
    """
    for name in path:
        if not hasattr(tree, "get") or name not in tree:
            return None
        tree = tree[name]
    return tree
