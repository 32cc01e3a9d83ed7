"""Find modules in a forward pass, capture the arguments one received, and call it eagerly.

`find_modules` lists the paths of the modules of a type in the order the forward
pass calls them. `capture` runs the forward pass (eagerly, so a recomputation is
bitwise identical) until the module at a path returns, and gives back the module
bound to its parameters (`DebugLayer`) and the arguments it received (`Inputs`).
Both walk the pass with `theseus.model.walk`, which owns the paths and the interception.

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
from theseus.model.walk import Call, bind_arguments, call_at, find_modules, intercepting, normalize_path, subtree

__all__ = ["DebugLayer", "DebugResult", "Inputs", "capture", "find_modules", "normalize_path", "to_numpy"]


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

            def _intercept(inner: Call) -> None:  # the name the log lines show, as the seeds print them
                module = inner.module
                if inner.path in reported or module.scope is None:
                    return
                reported.add(inner.path)
                params = module.variables.get("params", {})
                for leaf in sorted(params):
                    if hasattr(params[leaf], "shape"):
                        name = "/".join((*base, *inner.path, leaf))
                        log.debug(f"DEBUG | {name} | reused parameter shape={tuple(params[leaf].shape)}")

            with intercepting(on_enter=_intercept):
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
    call = call_at(model, variables, path, *args, **kwargs)
    sub = {col: tree for col in variables if (tree := subtree(variables[col], path)) is not None}
    layer = DebugLayer(call.module, sub, path, log=log, captured_output=call.output)
    return DebugResult(layer, Inputs(bind_arguments(call.module, call.args, call.kwargs)), output=call.output)


def to_numpy(tree: Any) -> Any:
    """Every array leaf of ``tree`` as a NumPy array (for printing or saving).

    >>> import jax.numpy as jnp
    >>> type(to_numpy({"a": jnp.ones(2)})["a"]).__name__
    'ndarray'
    """
    return jax.tree.map(lambda a: np.asarray(a) if hasattr(a, "shape") else a, tree)
