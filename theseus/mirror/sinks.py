"""What a mirror writes to: the run it mirrors, the backends it can write to, and the check that one is installed.

A sink is a backend's live run (a TensorBoard event file, a wandb run, a Comet
experiment) with two methods: ``log(step, values)`` and ``close()``. ``open_sink``
makes one for a `MirrorRun` (the theseus run's name, nonce and config); the backends'
packages live in the optional ``remote`` dependency group, and ``require`` turns a
missing one into an error that names the command installing it.

>>> sorted(BACKENDS)
['comet', 'tensorboard', 'wandb']
>>> run = MirrorRun("proj.grp.my-run", "c33b26", {"training": {"batch_size": 8}})
>>> run.project, run.group, run.run, run.label
('proj', 'grp', 'my-run', 'my-run:c33b26')
>>> scalars({"train/loss": 2.5, "train/steps": 3, "ok": True, "note": "text", "gone": None})
{'train/loss': 2.5, 'train/steps': 3.0, 'ok': 1.0}
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from theseus.errors import BadInput

#: the command that installs every backend's package
INSTALL = "uv sync --group remote"


class MirrorUnavailable(BadInput):
    """A backend whose package is not installed (or a backend name that is not one of `BACKENDS`).

    >>> issubclass(MirrorUnavailable, ValueError)
    True
    """


class Sink(Protocol):
    """A backend's live run: ``log`` one report's scalars at a step, ``close`` when the run ends.

    >>> class Printed:
    ...     def log(self, step, values): print(step, values)
    ...     def close(self): pass
    >>> Printed().log(1, {"train/loss": 2.0})
    1 {'train/loss': 2.0}
    """

    def log(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class MirrorRun:
    """The theseus run a sink mirrors: its full name (``project.group.run``), nonce and config (a plain mapping),
    the local ``folder`` the backend writes into ("" for the backend's own default) and whether it stays
    ``offline`` (wandb's offline mode, Comet's offline experiment; TensorBoard is always local).

    >>> run = MirrorRun("general.default.train-gpt", "949e88", {})
    >>> run.key == MirrorRun("general.default.train-gpt", "949e88", {"other": 1}).key, len(run.key)
    (True, 32)
    """

    name: str
    nonce: str
    config: Mapping[str, Any]
    folder: str = ""
    offline: bool = False

    @property
    def project(self) -> str:
        return self.name.split(".")[0]

    @property
    def group(self) -> str:
        return self.name.split(".")[1]

    @property
    def run(self) -> str:
        return self.name.split(".", 2)[2]

    @property
    def label(self) -> str:
        """``run:nonce``: the display name of the mirrored run."""
        return f"{self.run}:{self.nonce}"

    @property
    def key(self) -> str:
        """A 32-hex key of (name, nonce): one lineage is one wandb run id and one Comet experiment key, so a
        resumed lineage goes on logging into the same mirrored run."""
        return hashlib.sha256(f"{self.name}:{self.nonce}".encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class Backend:
    """A backend: the module its package provides, the pip name installing it, and the module of theseus
    holding its ``open(run) -> Sink``.

    >>> BACKENDS["wandb"].package
    'wandb'
    """

    module: str
    package: str
    opener: str


#: the registry of backends, by the name ``logging.remote_backend`` takes
BACKENDS: dict[str, Backend] = {
    "comet": Backend("comet_ml", "comet-ml", "theseus.mirror.to_comet"),
    "wandb": Backend("wandb", "wandb", "theseus.mirror.to_wandb"),
    "tensorboard": Backend("tensorboard", "tensorboard", "theseus.mirror.to_tensorboard"),
}


def backend(name: str) -> Backend:
    """The backend called ``name``; another name is an error listing the choices.

    >>> backend("tensorbord")
    Traceback (most recent call last):
    ...
    theseus.mirror.sinks.MirrorUnavailable: unknown mirror backend 'tensorbord' (did you mean tensorboard?); choose one of comet, tensorboard, wandb
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if name not in BACKENDS:
        close = difflib.get_close_matches(str(name), BACKENDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MirrorUnavailable(f"unknown mirror backend {name!r}{hint}; choose one of {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]


def require(name: str) -> Backend:
    """The backend ``name``, once its package imports; a missing package is an error naming the install command.

    >>> require("tensorboard").module
    'tensorboard'
    >>> import sys; saved = sys.modules.get("wandb"); sys.modules["wandb"] = None  # as if it were not installed
    >>> try:
    ...     require("wandb")
    ... except MirrorUnavailable as e:
    ...     print(e)
    ... finally:
    ...     _ = sys.modules.pop("wandb") if saved is None else sys.modules.update(wandb=saved)
    logging.remote_backend=wandb needs the wandb package, in theseus's optional `remote` group: run `uv sync --group remote` (or `pip install wandb`)
    """  # noqa: E501 - a doctest's expected output, printed on one line
    found = backend(name)
    try:
        importlib.import_module(found.module)
    except ImportError:
        raise MirrorUnavailable(
            f"logging.remote_backend={name} needs the {found.package} package, in theseus's optional `remote` group: "
            f"run `{INSTALL}` (or `pip install {found.package}`)") from None
    return found


def open_sink(name: str, run: MirrorRun) -> Sink:
    """A live sink of backend ``name`` for ``run`` (the backend's package must be installed: `require`).

    >>> import tempfile
    >>> sink = open_sink("tensorboard", MirrorRun("p.g.r", "abc123", {}, folder=tempfile.mkdtemp()))
    >>> sink.log(1, {"train/loss": 2.0}); sink.close()
    """
    opener: Callable[[MirrorRun], Sink] = importlib.import_module(require(name).opener).open_run
    return opener(run)


def scalars(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a report as floats (bools as 0/1); text and missing values are not mirrored.

    >>> scalars({"a": 1, "b": float("nan"), "c": "x"})
    {'a': 1.0, 'b': nan}
    """
    out = {}
    for key, value in values.items():
        if isinstance(value, bool | int | float):
            out[key] = float(value)
        elif getattr(value, "ndim", None) == 0 and getattr(value.dtype, "kind", "") in "biuf":  # a NumPy scalar
            out[key] = float(value)
    return out

