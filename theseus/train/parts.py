"""Parts of a training job and their registry: models, optimizers, schedules, losses, evaluations, analyses.

A part is a class with a kind, a short name, a one-line description, the config
section it adds its fields to and a ``Config`` dataclass of typed defaults. A
training job (`theseus.train.recipe.Recipe`) names one part of each kind; its
config is the union of its parts' sections. ``theseus parts`` lists them all.

Parts of one section share it: an optimizer and a schedule both add their fields
to ``optimization`` (the optimizer's first), so with the default AdamW and WSD parts
``optimization`` is ``{weight_decay, beta1, beta2, lr, warmup_pct, decay_pct, final_lr_frac}``:
AdamW's fields followed by WSD's.

>>> import dataclasses
>>> @dataclasses.dataclass
... class HalfConfig:
...     factor: float = 0.5
>>> @part("schedule", "doc-half", "Half the learning rate, always.")
... class Half(Part):
...     section = "optimization"
...     Config = HalfConfig
>>> parts("schedule")["doc-half"] is Half, Half.description
(True, 'Half the learning rate, always.')
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterable
from typing import Any, ClassVar

from theseus.errors import BadInput
from theseus.registry import Registry, import_registering

__all__ = ["KINDS", "PART_MODULES", "Part", "dataclass_fields", "get_part", "load_part_modules", "part", "parts",
           "section_fields"]

#: The kinds of parts, in the order ``theseus parts`` lists them.
KINDS = ("model", "optimizer", "schedule", "loss", "evaluation", "analysis")

#: Modules imported (once, when the registry is first read) to register the built-in parts.
#: A module that does not exist yet is skipped; add yours here or import it before use.
PART_MODULES: list[str] = ["theseus.train.models", "theseus.train.optimizers", "theseus.train.schedules",
                           "theseus.train.losses", "theseus.train.evaluations", "theseus.train.analyses.attention",
                           "theseus.train.analyses.norms", "theseus.train.analyses.logit_lens",
                           "theseus.train.evals.exact_match", "theseus.train.evals.text", "theseus.train.evals.choice",
                           "theseus.train.evals.public", "theseus.train.sft"]

_LOADED: set[str] = set()
_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


class Part:
    """Base class of every part: ``kind``, ``name``, ``description``, ``section`` and ``Config``.

    ``Config`` is a dataclass of typed defaults (or None: the part has no settings);
    its fields are added to the job's config section ``section``.

    >>> Part.Config is None
    True
    """

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    section: ClassVar[str] = ""
    Config: ClassVar[type | None] = None


#: The registries of parts, one per kind, filled by @part.
_REGISTRIES: dict[str, Registry] = {kind: Registry(f"{kind} part", Part, "@part") for kind in KINDS}


def part(kind: str, name: str, description: str | None = None):
    """Class decorator: register a ``Part`` subclass as ``name`` among the parts of ``kind``.

    ``description`` defaults to the first line of the class docstring. A name is
    registered once per kind; registering another class under it is an error.

    >>> @part("loss", "doc-none")
    ... class NoLoss(Part):
    ...     '''A loss that is never built.'''
    >>> NoLoss.kind, NoLoss.name, NoLoss.description
    ('loss', 'doc-none', 'A loss that is never built.')
    """
    if kind not in KINDS:
        raise BadInput(f"unknown part kind {kind!r}; the kinds are {', '.join(KINDS)}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInput(f"invalid part name {name!r}: use lowercase letters, digits, '-' and '_'")

    def check(cls: type) -> None:
        if cls.Config is not None and not (isinstance(cls.Config, type) and dataclasses.is_dataclass(cls.Config)):
            raise TypeError(f"part {kind}/{name}: {cls.__name__}.Config must be a dataclass of typed defaults or None")
        if cls.Config is not None and not cls.section:
            raise TypeError(f"part {kind}/{name}: {cls.__name__} has a Config but no section to put it in")

    return _REGISTRIES[kind].register(name, description, check, call=f"{kind!r}, {name!r}", kind=kind, name=name)


def load_part_modules(modules: Iterable[str] | None = None) -> None:
    """Import the modules that register parts (``PART_MODULES`` by default); missing ones are skipped.

    >>> load_part_modules(); "adamw" in _REGISTRIES["optimizer"]
    True
    """
    import_registering(PART_MODULES if modules is None else modules, _LOADED)


def parts(kind: str | None = None, load: bool = True) -> dict[str, Any]:
    """The registered parts, built-in ones loaded first: of one ``kind`` (name -> class, sorted), or all of
    them (kind -> that mapping). With ``load=False`` only those registered so far, ``PART_MODULES`` not
    imported (they import JAX: ``theseus parts`` reads its built-in parts from `theseus.catalog`).

    >>> "adamw" in parts("optimizer") and "wsd" in parts()["schedule"]
    True
    >>> "adamw" in parts("optimizer", load=False)   # loaded above, so registered now
    True
    """
    if load:
        load_part_modules()
    if kind is not None:
        if kind not in KINDS:
            raise BadInput(f"unknown part kind {kind!r}; the kinds are {', '.join(KINDS)}")
        return _REGISTRIES[kind].sorted()
    return {k: _REGISTRIES[k].sorted() for k in KINDS}


def get_part(kind: str, name: str) -> type[Part]:
    """The part of ``kind`` registered as ``name``; an unknown name lists the known ones.

    >>> get_part("optimizer", "lion").name
    'lion'
    """
    known = parts(kind)
    if name not in known:
        raise BadInput(f"unknown {kind} part {name!r}; known: {', '.join(known) or 'none'}")
    return known[name]


def dataclass_fields(cls: type) -> list[tuple[str, Any, dataclasses.Field]]:
    """The fields of dataclass ``cls`` as ``make_dataclass`` takes them: name, resolved type, default.

    Types are resolved (``typing.get_type_hints``): OmegaConf cannot resolve a string
    annotation in a dataclass made elsewhere.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class A:
    ...     lr: float = 0.1
    >>> [(name, typ) for name, typ, _ in dataclass_fields(A)]
    [('lr', <class 'float'>)]
    """
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], dataclasses.field(default=f.default) if f.default is not dataclasses.MISSING
             else dataclasses.field(default_factory=f.default_factory)) for f in dataclasses.fields(cls)]


def section_fields(members: list[type[Part]], section: str) -> list[tuple[str, Any, dataclasses.Field]]:
    """The fields the parts ``members`` add to ``section``, in order, as ``make_dataclass`` wants them.

    Two parts may declare the same field only with the same type and default (then it
    appears once); anything else is an error naming both parts.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class A:
    ...     lr: float = 0.1
    >>> class P(Part):
    ...     name, section, Config = "p", "opt", A
    >>> [name for name, _, _ in section_fields([P, P], "opt")]
    ['lr']
    """
    out: dict[str, tuple[str, Any, dataclasses.Field, type[Part]]] = {}
    for member in members:
        if member.Config is None or member.section != section:
            continue
        for name, typ, spec in dataclass_fields(member.Config):
            if name in out:
                _, prior_type, prior_spec, owner = out[name]
                same_default = (prior_spec.default == spec.default
                                and prior_spec.default_factory == spec.default_factory)
                if prior_type != typ or not same_default:
                    raise TypeError(f"config key {section}.{name} is declared differently by parts "
                                    f"{owner.kind}/{owner.name} and {member.kind}/{member.name}")
                continue
            out[name] = (name, typ, spec, member)
    return [(name, typ, spec) for name, typ, spec, _ in out.values()]
