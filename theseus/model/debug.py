"""Find modules in a forward pass, capture the arguments one received, and call it eagerly.

`find_modules` lists the paths of the modules of a type in the order the forward
pass calls them. `capture` runs the forward pass (eagerly, so a recomputation is
bitwise identical) until the module at a path returns, and gives back the module
bound to its parameters (`DebugLayer`) and the arguments it received (`Inputs`).

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> from theseus.model.layers.mlp import MLP
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8)
>>> model = GPT(cfg)
>>> idx = jnp.zeros((2, 8), jnp.int32)
>>> variables = model.init(jax.random.PRNGKey(0), idx)
>>> find_modules(model, variables, MLP, idx)
[('blocks_0', 'mlp'), ('blocks_1', 'mlp')]
>>> layer, inputs = capture(model, variables, ("blocks_1", "mlp"), idx)
>>> layer.c_fc(inputs.x).shape
(2, 8, 128)
>>> bool((layer(**inputs) == layer.captured_output).all())
True
>>> layer.close()
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from loguru import logger

from theseus.errors import BadInput


class _Captured(Exception):
    """Raised inside the forward pass once the wanted module has returned, to stop early."""


def normalize_path(path: str | Sequence[str]) -> tuple[str, ...]:
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


class Inputs:
    """The arguments a module received, by parameter name: ``inputs.x``, ``inputs["x"]``, ``f(**inputs)``.

    >>> inputs = Inputs({"x": 1, "deterministic": True})
    >>> inputs.x, dict(**inputs), list(inputs)
    (1, {'x': 1, 'deterministic': True}, ['x', 'deterministic'])
    """

    def __init__(self, arguments: dict[str, Any]):
        object.__setattr__(self, "_arguments", dict(arguments))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._arguments[name]
        except KeyError:
            raise AttributeError(f"no argument {name!r}; the module received {list(self._arguments)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._arguments[name] = value

    def keys(self):
        """Argument names, in signature order."""
        return self._arguments.keys()

    def values(self):
        """Argument values, in signature order."""
        return self._arguments.values()

    def items(self):
        """(name, value) pairs, in signature order."""
        return self._arguments.items()

    def __getitem__(self, name: str) -> Any:
        return self._arguments[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arguments)

    def __len__(self) -> int:
        return len(self._arguments)

    def __contains__(self, name: object) -> bool:
        return name in self._arguments

    def __repr__(self) -> str:
        def show(v: Any) -> str:
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                return f"{type(v).__name__}(shape={tuple(v.shape)}, dtype={v.dtype})"
            return repr(v)

        return "Inputs(" + ", ".join(f"{k}={show(v)}" for k, v in self._arguments.items()) + ")"


def _bind_arguments(module: nn.Module, args: tuple, kwargs: dict, method: str = "__call__") -> dict[str, Any]:
    """The call's arguments by parameter name (defaults filled in), without ``self``."""
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
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def find_modules(model: nn.Module, variables: Any, module_type: type | tuple[type, ...], *args: Any,
                 **kwargs: Any) -> list[tuple[str, ...]]:
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
    seen: list[tuple[str, ...]] = []

    def _find(next_fun, call_args, call_kwargs, context):
        if context.method_name == "__call__" and isinstance(context.module, module_type):
            path = tuple(context.module.path)
            if path not in seen:
                seen.append(path)
        return next_fun(*call_args, **call_kwargs)

    def forward(v, *a):
        with nn.intercept_methods(_find):
            return model.apply(v, *a, **kwargs)

    jax.eval_shape(forward, variables, *args)
    return seen


def _subtree(tree: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not hasattr(tree, "get") or name not in tree:
            return None
        tree = tree[name]
    return tree


class DebugLayer:
    """A module bound to its stored parameters, callable eagerly; logs the parameters each call reuses.

    Attribute access is forwarded to the bound module, so ``layer.c_fc(x)`` calls
    its submodule; every call logs ``DEBUG | <path>/<param> | reused parameter shape=...``
    for each parameter the call uses. ``close()`` (or leaving a ``with`` block)
    drops the references to parameters and captured arrays.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPTConfig
    >>> from theseus.model.layers.mlp import MLP
    >>> mlp = MLP(GPTConfig(n_embd=32, n_head=4, activation_dtype="float32"))
    >>> x = jnp.ones((1, 2, 32))
    >>> variables = mlp.init(jax.random.PRNGKey(0), x)
    >>> with DebugLayer(mlp, variables, path=("blocks_0", "mlp")) as layer:
    ...     layer.c_proj(layer.c_fc(x)).shape
    (1, 2, 32)
    """

    def __init__(self, module: nn.Module, variables: Any, path: Sequence[str] = (), *, log: Any = logger,
                 captured_output: Any = None, _bound: nn.Module | None = None):
        if _bound is None:
            unbound = module.clone(parent=None) if module.scope is not None or module.parent is not None else module
            _bound = unbound.bind(variables)
        state = {
            "_module": _bound,
            "_path": tuple(path),
            "_log": log,
            "captured_output": captured_output,
        }
        for key, value in state.items():
            object.__setattr__(self, key, value)

    # -- plumbing --------------------------------------------------------------------

    @property
    def module(self) -> nn.Module:
        """The bound flax module (ValueError once closed)."""
        module = object.__getattribute__(self, "_module")
        if module is None:
            raise BadInput("this debug layer is closed")
        return module

    @property
    def path(self) -> tuple[str, ...]:
        """Path of this layer in the model it was captured from."""
        return object.__getattribute__(self, "_path")

    def _logged(self, fn: Any) -> Any:
        base, log = self.path, self._log

        def call(*args: Any, **kwargs: Any) -> Any:
            reported: set[tuple[str, ...]] = set()

            def _intercept(next_fun, call_args, call_kwargs, context):
                module = context.module
                scope_path = tuple(module.path)
                if scope_path not in reported and module.scope is not None:
                    reported.add(scope_path)
                    params = module.variables.get("params", {})
                    for leaf in sorted(params):
                        value = params[leaf]
                        if hasattr(value, "shape"):
                            name = "/".join((*base, *scope_path, leaf))
                            log.debug(f"DEBUG | {name} | reused parameter shape={tuple(value.shape)}")
                return next_fun(*call_args, **call_kwargs)

            with nn.intercept_methods(_intercept):
                return fn(*args, **kwargs)

        return call

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        if isinstance(value, nn.Module):
            return DebugLayer(value, None, self.path, log=self._log, _bound=value)
        if callable(value) and inspect.ismethod(value) and isinstance(value.__self__, nn.Module):
            return self._logged(value)
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._logged(self.module)(*args, **kwargs)

    def close(self) -> None:
        """Drop the bound parameters and the captured output (further use raises ValueError)."""
        object.__setattr__(self, "_module", None)
        object.__setattr__(self, "captured_output", None)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return object.__getattribute__(self, "_module") is None

    def __enter__(self) -> DebugLayer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        module = object.__getattribute__(self, "_module")
        what = "closed" if module is None else type(module).__name__
        return f"DebugLayer({'/'.join(self.path) or '<root>'}: {what})"


class DebugResult(tuple):
    """``(layer, inputs)`` from `capture`, with ``.output`` (what the module returned); a context manager.

    >>> r = DebugResult(DebugLayer.__new__(DebugLayer), Inputs({}), output=None)
    >>> len(r), r.output is None
    (2, True)
    """

    def __new__(cls, layer: DebugLayer, inputs: Inputs, output: Any = None):
        self = super().__new__(cls, (layer, inputs))
        self.output = output
        return self

    @property
    def layer(self) -> DebugLayer:
        """The bound module."""
        return self[0]

    @property
    def inputs(self) -> Inputs:
        """The arguments it received."""
        return self[1]

    def close(self) -> None:
        """Close the layer and drop the captured arrays."""
        self[0].close()
        self.output = None

    def __enter__(self) -> DebugResult:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def capture(model: nn.Module, variables: Any, path: str | Sequence[str], *args: Any, log: Any = logger,
            **kwargs: Any) -> DebugResult:
    """Run ``model.apply(variables, *args, **kwargs)`` eagerly until the module at ``path`` returns.

    Returns ``DebugResult(layer, inputs)``: ``inputs`` holds the arguments of the
    module's first ``__call__`` by parameter name; ``layer`` is that module bound to
    its sub-tree of ``variables``; ``.output`` (also ``layer.captured_output``) is what
    the call returned. The rest of the forward pass is skipped. Eager (un-jitted)
    execution makes ``layer(**inputs)`` bitwise equal to the captured output.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> idx = jnp.zeros((1, 8), jnp.int32)
    >>> variables = model.init(jax.random.PRNGKey(0), idx)
    >>> with capture(model, variables, "blocks_0/attn", idx) as (layer, inputs):
    ...     inputs.x.shape
    (1, 8, 32)
    """
    path = normalize_path(path)
    found: dict[str, Any] = {}

    def _capture(next_fun, call_args, call_kwargs, context):
        if not found and context.method_name == "__call__" and tuple(context.module.path) == path:
            out = next_fun(*call_args, **call_kwargs)
            found.update(module=context.module, args=call_args, kwargs=call_kwargs, out=out)
            raise _Captured
        return next_fun(*call_args, **call_kwargs)

    try:
        with nn.intercept_methods(_capture):
            model.apply(variables, *args, **kwargs)
    except _Captured:
        pass
    if not found:
        raise BadInput(f"no module at path {'/'.join(path)} was called in the forward pass; "
                         "list paths with find_modules(model, variables, ModuleType, ...)")
    module = found["module"]
    sub = {col: tree for col in variables if (tree := _subtree(variables[col], path)) is not None}
    arguments = _bind_arguments(module, found["args"], found["kwargs"])
    layer = DebugLayer(module, sub, path, log=log, captured_output=found["out"])
    return DebugResult(layer, Inputs(arguments), output=found["out"])


def to_numpy(tree: Any) -> Any:
    """Every array leaf of ``tree`` as a NumPy array (for printing or saving).

    >>> import jax.numpy as jnp
    >>> type(to_numpy({"a": jnp.ones(2)})["a"]).__name__
    'ndarray'
    """
    return jax.tree.map(lambda a: np.asarray(a) if hasattr(a, "shape") else a, tree)
