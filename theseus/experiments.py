"""Experiments in the user's own files: import them, say where a job class came from, ship them.

A user's experiment is a ``Job`` subclass registered with ``@job("mylab/train/mix")`` in a
file outside the package. ``import_experiment(path_or_module)`` imports it (the CLI's
``theseus --import FILE``): a file under a module name derived from its resolved path, so a
second import of the same file (another spelling of its path, or after ``import
my_experiments``) reuses the module instead of registering its classes again; a dotted name
is imported as usual.

``job_source(cls)`` is where a job class came from, as every run records it (the reserved
field ``_job_source``): ``module:qualname``, or ``/path/of/file.py:qualname`` for a class
of an imported file. ``import_hint(source)`` says what to import when a run's job is not
registered in this process; nothing named by a root is ever imported automatically (a root
is data: DESIGN.md invariant 4).

A launch ships what ``shipped(cls)`` lists (the experiments imported here, sources as text)
in its spec, and every launched process imports them with ``import_shipped`` before it
builds the job.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "doc_experiment.py"
>>> _ = path.write_text("ANSWER = 42\\n")
>>> module = import_experiment(path)
>>> module.ANSWER, import_experiment(str(path)) is module   # imported once, then reused
(42, True)
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import linecache
import os
import re
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from theseus.errors import BadInput

__all__ = ["Experiment", "ExperimentError", "import_experiment", "import_hint", "import_shipped", "imported",
           "job_source", "shipped"]

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# module name -> the experiment it was imported as: the registry of experiments imported in this process
_IMPORTED: dict[str, Experiment] = {}


class ExperimentError(BadInput):
    """An experiment that cannot be imported: no such file or module, or its code raised.

    >>> try:
    ...     import_experiment("/nowhere/my_experiments.py")
    ... except ExperimentError as e:
    ...     print(e)
    cannot import experiment /nowhere/my_experiments.py: no such file
    """


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One imported experiment, as plain data: a file (its resolved ``path`` and its ``source``
    text, which a launch ships) or a ``module`` name (imported by name wherever it runs).

    >>> Experiment(module="mylab.experiments").to_dict()
    {'module': 'mylab.experiments'}
    >>> Experiment.from_dict({"path": "/home/me/mix.py", "source": "X = 1\\n"}).path
    '/home/me/mix.py'
    """

    path: str = ""
    source: str = dataclasses.field(default="", repr=False)  # a whole file: reprs stay one line
    module: str = ""

    def __post_init__(self) -> None:
        for name in ("path", "source", "module"):
            if not isinstance(getattr(self, name), str):
                raise BadInput(f"experiment field {name!r} must be str, got {getattr(self, name)!r}")
        if bool(self.path) == bool(self.module):
            raise BadInput("an experiment is a file (path and source) or a module name, exactly one of them")
        if self.module and (self.source or not _MODULE_NAME.match(self.module)):
            raise BadInput(f"experiment module {self.module!r} must be a dotted module name, without source")

    @property
    def origin(self) -> str:
        """The file's path or the module's name: what ``theseus --import`` takes.

        >>> Experiment(path="/a/b.py", source="").origin
        '/a/b.py'
        """
        return self.path or self.module

    def to_dict(self) -> dict[str, str]:
        """The experiment as JSON-ready data: ``{"path", "source"}`` or ``{"module"}``.

        >>> sorted(Experiment(path="/a/b.py", source="X = 1\\n").to_dict())
        ['path', 'source']
        """
        return {"module": self.module} if self.module else {"path": self.path, "source": self.source}

    @classmethod
    def from_dict(cls, data: Any) -> Experiment:
        """The experiment of ``to_dict()`` data; other fields or types are errors.

        >>> Experiment.from_dict({"module": "m", "colour": "red"})
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: an experiment has the fields path and source, or module; got colour, module
        """
        if not isinstance(data, dict) or set(data) not in ({"module"}, {"path", "source"}):
            got = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
            raise BadInput(f"an experiment has the fields path and source, or module; got {got}")
        return cls(**data)


def import_experiment(target: str | os.PathLike) -> ModuleType:
    """Import the experiment ``target`` (a Python file, or a dotted module name) and return its module.

    A file (a path ending in ``.py`` or naming an existing file) is imported under a
    module name derived from its resolved path; a file already imported, by this function
    or by a plain ``import``, is not executed again: its module is returned. A file that
    does not exist, or whose code raises, is an ``ExperimentError`` naming it and the error.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "broken.py"
    >>> _ = path.write_text("import nowhere_to_be_found\\n")
    >>> try:
    ...     import_experiment(path)
    ... except ExperimentError as e:
    ...     print(str(e).replace(str(path), "broken.py"))
    cannot import experiment broken.py: ModuleNotFoundError: No module named 'nowhere_to_be_found'
    >>> import_experiment("json").__name__   # a module name: imported as usual
    'json'
    """
    text = os.fspath(target)
    if not isinstance(text, str) or not text:
        raise ExperimentError(f"an experiment is a Python file or a module name, got {target!r}")
    if isinstance(target, os.PathLike) or text.endswith(".py") or os.sep in text or "/" in text or \
            os.path.isfile(text):
        return _import_file(text)
    if not _MODULE_NAME.match(text):
        raise ExperimentError(f"cannot import experiment {text!r}: not a Python file (no such file) "
                              "nor a dotted module name")
    try:
        module = importlib.import_module(text)
    except Exception as e:
        raise ExperimentError(f"cannot import experiment module {text}: {type(e).__name__}: {e}") from e
    _IMPORTED.setdefault(module.__name__, Experiment(module=text))
    return module


def _import_file(text: str) -> ModuleType:
    return _load(_read_file(text), on_disk=True, shown=text)


def _read_file(text: str) -> Experiment:
    """The experiment file at ``text``: its resolved path and its source; a clear error when unreadable."""
    path = os.path.realpath(os.path.expanduser(text))
    if not os.path.exists(path):
        raise ExperimentError(f"cannot import experiment {text}: no such file")
    if not os.path.isfile(path):
        raise ExperimentError(f"cannot import experiment {text}: not a file")
    try:
        with open(path, "rb") as f:
            source = importlib.util.decode_source(f.read())
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        raise ExperimentError(f"cannot import experiment {text}: {type(e).__name__}: {e}") from e
    return Experiment(path=path, source=source)


def import_shipped(experiments: Iterable[Experiment]) -> list[ModuleType]:
    """Import experiments a launch shipped (``shipped()`` on the launching side), in order.

    A file is executed from its shipped source under the module name its original path
    gives (and reported by that path: ``job_source`` names the file the user imported), so
    a process that already imported it reuses its module. Errors are ``ExperimentError``.

    >>> module, = import_shipped([Experiment(path="/home/me/shipped_doc.py", source="Y = 7\\n")])
    >>> module.Y, module.__file__
    (7, '/home/me/shipped_doc.py')
    """
    modules = []
    for experiment in experiments:
        if not isinstance(experiment, Experiment):
            raise TypeError(f"import_shipped takes Experiment values, got {experiment!r}")
        if experiment.module:
            modules.append(import_experiment(experiment.module))
        else:
            modules.append(_load(experiment, on_disk=False, shown=experiment.path))
    return modules


def _load(experiment: Experiment, on_disk: bool, shown: str) -> ModuleType:
    """The module of the file ``experiment``: already loaded from that path, else executed from its source."""
    path = experiment.path
    name = _module_name(path)
    module = sys.modules.get(name) or _module_from(path)
    if module is None:
        module = _execute(name, experiment, on_disk, shown)
    _IMPORTED.setdefault(module.__name__, experiment)
    return module


def _module_name(path: str) -> str:
    """The stable module name of the experiment file at ``path``: its stem and a digest of the path.

    >>> _module_name("/home/me/my-experiments.py")[:-12]
    'theseus_experiment_my_experiments_'
    """
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    return f"theseus_experiment_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:12]}"


def _module_from(path: str) -> ModuleType | None:
    """A module already imported from the file ``path`` (by a plain ``import``), if any."""
    base = os.path.basename(path)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == base and os.path.realpath(file) == path:
            return module
    return None


def _execute(name: str, experiment: Experiment, on_disk: bool, shown: str) -> ModuleType:
    """Execute the experiment's source as module ``name``; a failure leaves no module behind."""
    path = experiment.path
    if on_disk:
        spec = importlib.util.spec_from_file_location(name, path)
    else:  # shipped: no file here, so tracebacks and inspect read the source from linecache
        spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
        lines = experiment.source.splitlines(keepends=True)
        linecache.cache[path] = (len(experiment.source), None, lines, path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[name] = module  # before executing: dataclasses and pickling look classes up by module
    try:
        exec(compile(experiment.source, path, "exec"), module.__dict__)
    except BaseException as e:
        del sys.modules[name]
        if isinstance(e, (KeyboardInterrupt, GeneratorExit)):
            raise
        raise ExperimentError(f"cannot import experiment {shown}: {type(e).__name__}: {e}") from e
    return module


def imported() -> tuple[Experiment, ...]:
    """The experiments imported in this process (``import_experiment``, ``import_shipped``), in order.

    >>> all(isinstance(e, Experiment) for e in imported())
    True
    """
    return tuple(dict.fromkeys(_IMPORTED.values()))


def shipped(cls: type | None = None) -> tuple[Experiment, ...]:
    """What a launch ships so that the process it starts can build job class ``cls``.

    The experiments imported here, and, when ``cls`` came from neither the theseus package
    nor one of them (a plain ``import``), its module: a module of a package by name (the
    host must have the package), a module of its own by its file. A class of the script
    being run (``__main__``), or of a module without a file, cannot be shipped: an
    ``ExperimentError`` says to move it into a file.

    >>> class Local:
    ...     pass
    >>> Local.__module__ = "__main__"
    >>> shipped(Local)
    Traceback (most recent call last):
    ...
    theseus.experiments.ExperimentError: job class Local is defined in __main__ (the script being run), ...
    """
    found = imported()
    if cls is None:
        return found
    module = cls.__module__
    if any(module == name or module.startswith(name + ".") for name in [*_IMPORTED, "theseus"]):
        return found
    hint = "move it into a file of its own and import that file (theseus.experiments.import_experiment)"
    if module == "__main__":
        raise ExperimentError(f"job class {cls.__qualname__} is defined in __main__ (the script being run), "
                              f"which a launch cannot ship: {hint}")
    loaded = sys.modules.get(module)
    if "." in module or hasattr(loaded, "__path__"):  # part of a package: relative imports need the package
        return (*found, Experiment(module=module))
    file = getattr(loaded, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py") or not os.path.isfile(file):
        raise ExperimentError(f"job class {cls.__qualname__} is defined in module {module}, which has no Python "
                              f"file a launch could ship: {hint}")
    return (*found, _read_file(file))


def job_source(cls: type) -> str:
    """Where job class ``cls`` came from: ``/path/file.py:qualname`` for a class of an imported experiment
    file, else ``module:qualname``.

    >>> import json
    >>> job_source(json.JSONDecoder)
    'json.decoder:JSONDecoder'
    """
    experiment = _IMPORTED.get(cls.__module__)
    origin = experiment.path if experiment is not None and experiment.path else cls.__module__
    return f"{origin}:{cls.__qualname__}"


def import_hint(source: str | None) -> str:
    """What to import so that a job recorded as coming from ``source`` (``job_source``) is registered.

    >>> import_hint("/home/me/mix.py:Mix")
    "import /home/me/mix.py first: `theseus --import /home/me/mix.py ...` on the command line, `theseus.experiments.import_experiment('/home/me/mix.py')` in Python"
    >>> import_hint(None)
    'no source is recorded: import the module or file that registers it (`theseus --import FILE ...`)'
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if not source:
        return "no source is recorded: import the module or file that registers it (`theseus --import FILE ...`)"
    origin = source.rpartition(":")[0] or source
    if origin == "__main__":
        return ("it was defined in a script (__main__): move it into a file and import that "
                "(`theseus --import FILE ...`)")
    if origin.endswith(".py") or "/" in origin or os.sep in origin:
        return (f"import {origin} first: `theseus --import {origin} ...` on the command line, "
                f"`theseus.experiments.import_experiment({origin!r})` in Python")
    return f"import {origin} first: `theseus --import {origin} ...` on the command line, `import {origin}` in Python"
