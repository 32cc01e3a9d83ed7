"""OmegaConf helpers: strict configs built from typed dataclass defaults.

A job's config is ``structured(Job.Config)``: an OmegaConf ``DictConfig`` in
struct mode whose every key has a type. Assigning an unknown key or a value
of the wrong type raises at once, and the message names the key's full path::

    cfg.data.max_tokenz = 1        # ConfigAttributeError ... full_key: data.max_tokenz
    cfg.data.max_tokens = "lots"   # ValidationError ... full_key: data.max_tokens

``apply_overrides`` applies ``key=value`` strings (the ``theseus run`` CLI)
with the same strictness; ``to_yaml`` / ``from_yaml`` round-trip a config
through the YAML that the store records for every run.

>>> from dataclasses import dataclass, field
>>> @dataclass
... class Data:
...     max_tokens: int = -1
>>> @dataclass
... class Config:
...     data: Data = field(default_factory=Data)
>>> cfg = apply_overrides(structured(Config), ["data.max_tokens=1000"])
>>> cfg.data.max_tokens
1000
>>> from_yaml(Config, to_yaml(cfg)) == cfg
True
"""


import dataclasses
import decimal
import difflib
import math
import warnings
from collections.abc import Iterable
from typing import Any

import yaml
from omegaconf import AnyNode, DictConfig, FloatNode, IntegerNode, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from theseus.errors import BadInput


def _allow_int_to_float() -> None:
    """int -> float is lossless: ``q.config.data.val_pct = 0`` must not warn (omegaconf >= 2.4 does).

    Installed again by every ``structured()`` since test runners reset warning filters.
    """
    warnings.filterwarnings("ignore", message="Implicit conversion from int to float", category=FutureWarning)


_allow_int_to_float()

__all__ = ["ConfigError", "apply_overrides", "from_yaml", "keys", "merge", "structured", "to_dict", "to_yaml"]


class ConfigError(BadInput):
    """A config key that does not exist or a value of the wrong type; the message names the key's path.

    >>> issubclass(ConfigError, ValueError)
    True
    """


def structured(defaults: Any) -> DictConfig:
    """A struct-mode ``DictConfig`` of ``defaults`` (a dataclass type or instance).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     lr: float = 3e-4
    >>> cfg = structured(C)
    >>> cfg.lr
    0.0003
    >>> try:
    ...     cfg.lr = "fast"
    ... except ValueError as e:
    ...     print("full_key: lr" in str(e))
    True
    """
    if not (dataclasses.is_dataclass(defaults)):
        raise TypeError(f"config defaults must be a dataclass (type or instance), got {defaults!r}")
    _allow_int_to_float()
    cfg = OmegaConf.structured(defaults)
    OmegaConf.set_struct(cfg, True)
    return cfg


def keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Every key path of ``cfg``: leaves and sections, dotted.

    >>> keys(OmegaConf.create({"data": {"seed": 1}}))
    ['data', 'data.seed']
    """
    out = []
    for k in cfg.keys():
        path = f"{prefix}{k}"
        out.append(path)
        node = cfg._get_node(k)
        if isinstance(node, DictConfig) and not node._is_none():
            out += keys(node, path + ".")
    return out


def _closest(cfg: DictConfig, key: str) -> str:
    """'; did you mean ...?' for an unknown key: similar keys of the same section, else the
    same key in another section, else similar full paths."""
    every = keys(cfg)
    parent, _, leaf = key.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in every if k.rpartition(".")[0] == parent]
    near = [f"{parent}.{m}" if parent else m for m in difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.6)]
    if not near:
        near = [k for k in every if k.rpartition(".")[2] == leaf][:3]
    if not near:
        near = difflib.get_close_matches(key, every, n=3, cutoff=0.8)
    return f"; did you mean {', '.join(near)}?" if near else ""


def _exists(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` names a node of ``cfg``; a list item is named by its index (``data.mixture.0.rate``)."""
    node: Any = cfg
    for part in key.split("."):
        if isinstance(node, ListConfig) and not node._is_none() and part.isdigit() and int(part) < len(node):
            node = node._get_node(int(part))
            continue
        if not isinstance(node, DictConfig) or node._is_none() or part not in node:
            return False
        node = node._get_node(part)
    return True


class _Text(str):
    """An override's raw text: typed by the key it is assigned to (see ``_typed``)."""


def _typed(node: Any, text: str) -> Any:
    """The value of override ``text`` for config ``node``.

    Typed scalar keys take the text as is and OmegaConf converts it by the key's
    type (``1000`` for an int, ``true`` for a bool, ``1e-3`` for a float; a str
    key keeps ``yes`` or ``007`` verbatim). ``null`` is None. List and section
    keys parse YAML (``[a.txt, b.txt]``); a plain string given to a list key is a
    list of one. Untyped keys parse YAML scalars.

    >>> from omegaconf import OmegaConf
    >>> c = OmegaConf.create({"paths": ["x"], "n": 1})
    >>> _typed(c._get_node("paths"), "[a.txt, b.txt]"), _typed(c._get_node("paths"), "a.txt")
    (['a.txt', 'b.txt'], ['a.txt'])
    """
    if text == "null":
        return None
    if isinstance(node, (ListConfig, DictConfig)):
        if text.lstrip().startswith(("[", "{")):
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ConfigError(f"cannot parse {text!r}: {str(e).splitlines()[0]}") from None
        return [str(text)] if isinstance(node, ListConfig) else text
    if isinstance(node, AnyNode) and text:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        return value if isinstance(value, (int, float, bool, str)) else text
    if isinstance(node, IntegerNode):
        return _whole(text)
    if isinstance(node, FloatNode):
        return _finite_unless_spelt(text)
    return str(text)


def _finite_unless_spelt(text: str) -> str:
    """A float key's override as is, unless it is a number too large for a float (``1e400`` would be read
    as inf): a ``ConfigError``. ``inf`` and ``nan`` spelt out are taken as written.

    >>> _finite_unless_spelt("1e-3"), _finite_unless_spelt("inf")
    ('1e-3', 'inf')
    >>> try:
    ...     _finite_unless_spelt("1e400")
    ... except ConfigError as e:
    ...     print(e)
    1e400 is out of the range of a float
    """
    try:
        number = float(text)
    except ValueError:
        return str(text)
    if math.isinf(number) and "inf" not in text.lower():
        raise ConfigError(f"{text} is out of the range of a float")
    return str(text)


def _whole(text: str) -> int | str:
    """An int key's override: ``1e9`` or ``2.5e3`` is the int it writes; a number that is not a whole,
    finite int64 is a ``ConfigError``; plain ints (``1_000``) and non-numbers go on to OmegaConf as text.

    >>> _whole("1e9"), _whole("1_000")
    (1000000000, '1_000')
    >>> try:
    ...     _whole("1.5e0")
    ... except ConfigError as e:
    ...     print(e)
    1.5e0 is not a whole number (the key takes an int)
    """
    try:
        int(text)
        return str(text)  # OmegaConf converts a plain int itself
    except ValueError:
        pass
    try:
        number = decimal.Decimal(text.strip())  # exact, unlike float: 1.0000000000000001e16 stays odd
    except decimal.InvalidOperation:
        return str(text)
    if not number.is_finite():
        raise ConfigError(f"{text} is not a finite number (the key takes an int)")
    if number.adjusted() > 18 or abs(number) >= 2**63:  # adjusted(): the power of ten of its first digit
        raise ConfigError(f"{text} is out of the range of a 64-bit int (the key takes an int)")
    if number != number.to_integral_value():
        raise ConfigError(f"{text} is not a whole number (the key takes an int)")
    return int(number)


def apply_overrides(cfg: DictConfig, overrides: Iterable[str]) -> DictConfig:
    """Apply ``key=value`` overrides to ``cfg`` in place (and return it).

    Each value is converted by its key's type (``1000`` or ``1e9`` for an int key,
    ``true`` for a bool, ``[a.txt, b.txt]`` for a list; a plain string given to a
    list key is a list of one; ``null`` is None; a str key keeps the text verbatim).
    An unknown key or a value of the wrong type is a ``ConfigError`` naming the
    key's path (and close matches); ``cfg`` is left unchanged then.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     seed: int = 0
    >>> apply_overrides(structured(C), ["seed=7"]).seed
    7
    >>> try:
    ...     apply_overrides(structured(C), ["sed=7"])
    ... except ConfigError as e:
    ...     print(e)
    unknown config key 'sed'; did you mean seed?
    """
    items = []
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. data.max_tokens=1000)")
        key, _, text = item.partition("=")
        if not key.strip():
            raise ConfigError(f"override {item!r} has no key")
        items.append((key.strip(), _Text(text)))
    _update(cfg.copy(), items)  # all or nothing: check on a copy first
    return _update(cfg, items)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _update(cfg: DictConfig, items: list[tuple[str, Any]]) -> DictConfig:
    for key, value in items:
        if not _exists(cfg, key):
            raise ConfigError(f"unknown config key {key!r}{_closest(cfg, key)}")
        if isinstance(value, _Text):
            try:
                value = _typed(_node(cfg, key), value)
            except ConfigError as e:
                raise ConfigError(f"bad value for config key {key!r}: {e}") from None
        try:  # a list is merged so its items become the list's typed elements (a mixture's sources)
            OmegaConf.update(cfg, key, value, merge=isinstance(value, (list, ListConfig)))
        except OmegaConfBaseException as e:
            raise ConfigError(f"bad value for config key {key!r}: {_first_line(e)}") from None
    return cfg


def _node(cfg: DictConfig, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = node._get_node(int(part) if isinstance(node, ListConfig) else part)
    return node


def merge(cfg: DictConfig, values: Any) -> DictConfig:
    """A copy of ``cfg`` with ``values`` (a dict, DictConfig or YAML text) merged in, strictly.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     seed: int = 0
    >>> merge(structured(C), {"seed": 3}).seed
    3
    """
    if isinstance(values, str):
        try:
            values = yaml.safe_load(values) or {}
        except yaml.YAMLError as e:  # the YAML parser's answer to a config text the caller gave
            raise ConfigError(f"cannot parse the config YAML: {_first_line(e)}") from None
    if isinstance(values, DictConfig):
        values = OmegaConf.to_container(values)
    if not isinstance(values, dict):
        raise ConfigError(f"config values must be a mapping, got {type(values).__name__}")
    return _update(cfg.copy(), _flatten(values))


def _flatten(values: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _flatten(v, path + ".")
        else:
            out.append((path, v))
    return out


def to_yaml(cfg: DictConfig) -> str:
    """The YAML text of ``cfg`` (what the store records at seq 0 of a run).

    >>> print(to_yaml(OmegaConf.create({"data": {"seed": 2357}})), end="")
    data:
      seed: 2357
    """
    return OmegaConf.to_yaml(cfg, resolve=True)


def from_yaml(defaults: Any, text: str) -> DictConfig:
    """``structured(defaults)`` with the values of the YAML ``text`` applied, strictly.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     seed: int = 0
    >>> from_yaml(C, "seed: 5").seed
    5
    """
    return merge(structured(defaults), text)


def to_dict(cfg: DictConfig) -> dict:
    """A plain ``dict`` of ``cfg`` (resolved).

    >>> to_dict(OmegaConf.create({"a": {"b": 1}}))
    {'a': {'b': 1}}
    """
    return OmegaConf.to_container(cfg, resolve=True)
