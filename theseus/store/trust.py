"""What a root's records may point at and hold: the rules audit and resume share.

A root may come from a stranger (DESIGN.md invariants 4 and 6), so a checkpoint
record is followed only to a plain path inside the root, and a recorded config
is read only as plain data: YAML without tags, and no interpolation that calls a
resolver (``${oc.env:...}``, ``${oc.decode:...}``, custom ones), which would
read the environment or run code. ``theseus audit`` reports what these rules
refuse; resuming from such a node raises the same message.

>>> checkpoint_path("objects/Z2VuZXJhbC5kZWZhdWx0LmE6MTIzNDU2OjA")
'objects/Z2VuZXJhbC5kZWZhdWx0LmE6MTIzNDU2OjA'
>>> plain_config("training: {lr: 0.1}\\nopt: {lr: '${training.lr}'}", "node x")
{'training': {'lr': 0.1}, 'opt': {'lr': '${training.lr}'}}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import fsspec
import yaml

from theseus.errors import BadInput
from theseus.store import fs as rootfs

__all__ = ["checkpoint_folder", "checkpoint_path", "plain_config"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same safety, faster


def checkpoint_path(path: object) -> str:
    """``path`` (a checkpoint record's value) when it is a plain root-relative path, else ValueError.

    Refused: absolute paths, URLs, backslashes, empty, ``.`` and ``..`` parts.

    >>> checkpoint_path("objects/../../outside_ckpt")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: checkpoint path 'objects/../../outside_ckpt' is not a plain path inside the root (no '..', '.', absolute path or URL); not followed
    """  # noqa: E501 - a doctest's expected output, printed on one line
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or path.startswith("/") or "://" in path or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise BadInput(f"checkpoint path {path!r} is not a plain path inside the root "
                         "(no '..', '.', absolute path or URL); not followed")
    return path


def checkpoint_folder(fs: fsspec.AbstractFileSystem, root: str, path: object) -> str:
    """The folder (a path of ``fs``) of checkpoint ``path`` under ``root``; ValueError when it leaves the root.

    Besides :func:`checkpoint_path`, on a local root the folder must still be inside
    the root once links are resolved (a linked ``objects/<id>`` is not followed).

    >>> import tempfile
    >>> fs, root = rootfs.open_root(tempfile.mkdtemp())
    >>> checkpoint_folder(fs, root, "objects/x") == root + "/objects/x"
    True
    """
    folder = f"{root}/{checkpoint_path(path)}"
    if rootfs.is_local(fs):
        real_root, real = os.path.realpath(root), os.path.realpath(folder)
        if os.path.commonpath([real_root, real]) != real_root:
            raise BadInput(f"checkpoint path {path!r} leads outside the root through a link (to {real}); "
                             "not followed")
    return folder


def plain_config(text: str, where: str) -> Any:
    """The YAML ``text`` of a config read from a root, as plain data; ValueError naming ``where`` otherwise.

    Refused: any YAML tag (``!!python/object/apply:...``, ``!!binary``...), text that is
    not YAML, and string values whose OmegaConf interpolation calls a resolver (it
    would reach outside the config); plain references such as ``${training.lr}`` stay.

    >>> plain_config("dataset: ${oc.env:HOME}", "node x")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: config of node x is not plain data: dataset = '${oc.env:HOME}' calls a resolver (only references to other keys are allowed)
    """  # noqa: E501 - a doctest's expected output, printed on one line
    try:
        for token in yaml.scan(text, Loader=_LOADER):
            if isinstance(token, yaml.TagToken):
                handle, suffix = token.value
                raise BadInput(f"config of {where} is not plain data: YAML tag {(handle or '') + suffix} "
                                 f"at line {token.start_mark.line + 1} (tags are refused)")
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise BadInput(f"config of {where} is not valid YAML: {str(e).splitlines()[0]}") from None
    for key, value in _strings(data, ""):
        if "${" in value and _calls_resolver(value):
            raise BadInput(f"config of {where} is not plain data: {key} = {value!r} calls a resolver "
                             "(only references to other keys are allowed)")
    return data


def _strings(data: Any, prefix: str) -> Iterator[tuple[str, str]]:
    """``(dotted key, value)`` of every string value in nested dicts and lists."""
    if isinstance(data, str):
        yield prefix, data
    elif isinstance(data, dict):
        for k, v in data.items():
            yield from _strings(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _strings(v, f"{prefix}[{i}]")


def _calls_resolver(value: str) -> bool:
    """Whether OmegaConf would call a resolver to resolve ``value`` (or cannot parse it at all).

    >>> _calls_resolver("${a.b}"), _calls_resolver("${a.${oc.env:X}}"), _calls_resolver("${")
    (False, True, True)
    """
    # lazily: OmegaConf's grammar parser (antlr) loads only when a config is checked
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser

    try:
        todo = [grammar_parser.parse(value)]
    except GrammarParseError:
        return True  # OmegaConf would fail on it too: not plain data
    while todo:
        node = todo.pop()
        if isinstance(node, OmegaConfGrammarParser.InterpolationResolverContext):
            return True
        todo.extend(getattr(node, "children", None) or [])
    return False
