"""A registry of named classes: the one decorator behind ``@job`` and ``@part``, and the import of the
modules that fill it.

A registry holds the classes of one base under names. Registering checks that the
class is of that base, that the name is not taken by another class (registering
the same class again, as a re-import does, is fine), gives the class its one-line
description (by default the first line of its docstring) and the attributes its
decorator names, and stores it.

>>> class Tool:
...     name = ""
...     description = ""
>>> tools = Registry("tool", Tool, "@tool")
>>> @tools.register("saw", name="saw")
... class Saw(Tool):
...     '''Cuts wood.'''
>>> tools.get("saw") is Saw, Saw.name, Saw.description, "saw" in tools
(True, 'saw', 'Cuts wood.', True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from theseus.errors import BadInput

__all__ = ["Registry", "import_registering"]


class Registry:
    """Classes of ``base`` by name; ``noun`` names an entry in errors (``job key``, ``optimizer part``) and
    ``decorator`` the decorator that fills it (``@job``).

    ``classes`` is the mapping itself (name -> class), in registration order: tests save and restore it.

    >>> class Base:
    ...     description = ""
    >>> r = Registry("widget", Base, "@widget")
    >>> _ = r.register("a", "First.")(type("A", (Base,), {}))
    >>> r.register("a")(type("B", (Base,), {}))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: widget 'a' is already registered by theseus.registry.A
    """

    def __init__(self, noun: str, base: type, decorator: str):
        self.noun, self.base, self.decorator = noun, base, decorator
        self.classes: dict[str, type] = {}

    def register(self, name: str, description: str | None = None, check: Callable[[type], None] | None = None, /,
                 *, call: str | None = None, **attributes: Any) -> Callable[[type], type]:
        """A class decorator registering its class as ``name``: ``check`` (raises on a bad class) runs first,
        then the class gets ``attributes`` and its ``description`` (default: its docstring's first line).
        ``call`` is the decorator's arguments as an error quotes them (default: ``name``'s repr).

        >>> class Base:
        ...     description = ""
        >>> r = Registry("widget", Base, "@widget")
        >>> r.register("w")(int)
        Traceback (most recent call last):
        ...
        TypeError: @widget('w') decorates a subclass of theseus.registry.Base, got <class 'int'>
        """
        def register(cls: type) -> type:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"{self.decorator}({call or repr(name)}) decorates a subclass of "
                                f"{self.base.__module__}.{self.base.__qualname__}, got {cls!r}")
            if check is not None:
                check(cls)
            prior = self.classes.get(name)
            if prior is not None and not same_class(prior, cls):
                where = f"{prior.__module__}.{prior.__qualname__}"
                raise BadInput(f"{self.noun} {name!r} is already registered by {where}")
            doc = (cls.__doc__ or "").strip().splitlines()
            for attribute, value in attributes.items():
                setattr(cls, attribute, value)
            cls.description = (description or (doc[0].strip() if doc else "")).strip()
            self.classes[name] = cls
            return cls

        return register

    def get(self, name: str) -> type | None:
        """The class registered as ``name``, or None.

        >>> Registry("widget", object, "@widget").get("none") is None
        True
        """
        return self.classes.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.classes

    def sorted(self, prefix: str = "") -> dict[str, type]:
        """The registered classes whose name starts with ``prefix``, sorted by name.

        >>> r = Registry("widget", object, "@widget")
        >>> _ = r.register("b/x")(type("X", (), {})); _ = r.register("a/y")(type("Y", (), {}))
        >>> list(r.sorted()), list(r.sorted("b/"))
        (['a/y', 'b/x'], ['b/x'])
        """
        return {name: self.classes[name] for name in sorted(self.classes) if name.startswith(prefix)}

    def holds(self, name: str, cls: type) -> bool:
        """Whether ``cls`` itself (not a subclass or a namesake elsewhere) is registered as ``name``.

        >>> r = Registry("widget", object, "@widget")
        >>> W = r.register("w")(type("W", (), {}))
        >>> r.holds("w", W), r.holds("w", type("V", (W,), {}))
        (True, False)
        """
        registered = self.classes.get(name)
        return registered is not None and same_class(registered, cls)


def same_class(a: type, b: type) -> bool:
    """Whether ``a`` and ``b`` are one class by where they are defined: a module imported twice defines the
    same class twice, and registering it again is no clash.

    >>> same_class(int, int), same_class(int, str)
    (True, False)
    """
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def import_registering(modules: Iterable[str], loaded: set[str]) -> None:
    """Import each module of ``modules`` not in ``loaded`` (then add it): modules that register things when
    imported. A module that does not exist is skipped; one whose own imports fail raises.

    >>> done = set(); import_registering(["theseus.data.jobs", "theseus.no_such_module"], done); sorted(done)
    ['theseus.data.jobs', 'theseus.no_such_module']
    """
    for name in list(modules):
        if name in loaded:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise  # the module exists but one of its imports is missing: a real error
        loaded.add(name)
