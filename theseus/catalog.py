"""The jobs and parts ``theseus jobs`` and ``theseus parts`` list, read without importing JAX.

The modules that register the built-in jobs and parts import JAX, Flax, Optax and
TensorStore, seconds of startup for a listing. So the built-in ones are read from
``catalog.json`` beside this module, which ``python -m theseus.catalog`` writes from the
live registries with a fingerprint of the theseus files that define them (each class, its
bases, its config dataclasses) and of the registries' own; those registered in this process
(by ``--import FILE``, or a module already imported) come from the registries themselves
and win over the file. When a fingerprinted file has changed since, the file is not
trusted: the listing loads the registries (slow, but not stale).
``python -m theseus.catalog --check`` fails when the file is out of date (a test runs it)::

    .venv/bin/python -m theseus.catalog           # rewrite catalog.json after changing a job or a part

>>> jobs("data/tokenize/py")
{'data/tokenize/pydoc': 'Tokenize the Python docs shipped with Python (offline, ~0.5 MB) as contiguous tokens.'}
>>> parts("loss")["loss"]["cross-entropy"][0]
'loss: z_loss=0.0'
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from theseus.errors import BadInput

__all__ = ["CATALOG", "built_in", "config_keys", "fingerprint", "jobs", "kinds", "live", "main", "parts"]

#: The built-in jobs and parts as listed: ``{"sources": {file: hash}, "jobs": {key: description}, "parts":
#: {kind: {name: [config, description]}}}``, files relative to the folder holding the package.
CATALOG = Path(__file__).with_name("catalog.json")
_TOP = Path(__file__).resolve().parents[1]  # the folder holding the theseus package


def config_keys(member: Any) -> str:
    """The config section ``member`` adds its fields to, and each field's default (nested sections by name).

    >>> from theseus.train.parts import get_part
    >>> config_keys(get_part("loss", "cross-entropy"))
    'loss: z_loss=0.0'
    """
    if member.Config is None:
        return "-"
    keys = []
    for f in dataclasses.fields(member.Config):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        keys.append(f.name if dataclasses.is_dataclass(default) else f"{f.name}={default!r}")
    return f"{member.section}: {', '.join(keys)}"


def _registered(module: str, function: str) -> Any:
    """What a registry holds so far (``theseus.jobs.registry`` or ``theseus.train.parts.parts``, called with
    ``load=False``), or nothing when its module was never imported: then nothing was registered, and the
    listing need not load it (it loads OmegaConf and loguru)."""
    registry = sys.modules.get(module)
    return getattr(registry, function)(load=False) if registry is not None else {}


def _rows(found_jobs: dict[str, Any], found_parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Registry entries as the catalog holds them (descriptions, and each part's config keys)."""
    return {"jobs": {key: cls.description for key, cls in found_jobs.items()},
            "parts": {kind: {name: [config_keys(member), member.description] for name, member in members.items()}
                      for kind, members in found_parts.items()}}


def fingerprint(files: list[str]) -> dict[str, str]:
    """File (relative to the folder holding the package) -> a hash of its bytes ("" when it is gone).

    >>> fingerprint(["theseus/catalog.py"])["theseus/catalog.py"] != fingerprint(["theseus/jobs.py"])["theseus/jobs.py"]
    True
    """
    out = {}
    for name in files:
        path = _TOP / name
        out[name] = hashlib.blake2b(path.read_bytes(), digest_size=12).hexdigest() if path.is_file() else ""
    return out


def built_in() -> dict[str, Any]:
    """The built-in jobs and parts: as ``catalog.json`` lists them while every source file it was written from
    is unchanged, else as the registries do (`live`: slow, as it imports JAX, but never stale).

    >>> from theseus.train.parts import KINDS
    >>> "gpt/train/pretrain" in built_in()["jobs"], list(built_in()["parts"]) == list(KINDS)
    (True, True)
    """
    stored = json.loads(CATALOG.read_text())
    if fingerprint(list(stored["sources"])) == stored["sources"]:
        return stored
    return live()


def _defining_files(classes: list[type], modules: list[str]) -> set[str]:
    """The theseus files (relative to the folder holding the package) that define ``classes``, their bases,
    their ``Config`` dataclasses and the dataclasses of those configs' sections, and the files of ``modules``:
    what a listed description, section or default is written in."""
    files, seen, todo = set(), set(), list(classes)
    while todo:
        cls = todo.pop()
        if cls in seen or not isinstance(cls, type):
            continue
        seen.add(cls)
        modules.append(cls.__module__)
        todo.extend(cls.__mro__[1:])
        todo.append(getattr(cls, "Config", None))
        if dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                default = f.default if f.default is not dataclasses.MISSING else (
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
                todo.append(type(default) if dataclasses.is_dataclass(default) else None)
    for name in modules:
        path = Path(getattr(sys.modules.get(name), "__file__", None) or "/").resolve()
        if path.is_relative_to(_TOP / "theseus"):
            files.add(str(path.relative_to(_TOP)))
    return files


def live() -> dict[str, Any]:
    """The built-in jobs and parts as their registries list them, and a fingerprint of the theseus files
    that define them (`_defining_files`) and of the registries' own: imports every module that registers
    one (JAX included), so run it in a process that registered nothing else.

    >>> found = live(); found["parts"]["optimizer"]["adamw"][1].startswith("AdamW with decoupled weight decay")
    True
    >>> {"theseus/train/optimizers.py", "theseus/jobs.py", "theseus/catalog.py"} <= set(found["sources"])
    True
    """
    jobs_module, parts_module = importlib.import_module("theseus.jobs"), importlib.import_module("theseus.train.parts")
    found_jobs, found_parts = jobs_module.registry(), parts_module.parts()
    classes = [*found_jobs.values(), *(member for members in found_parts.values() for member in members.values())]
    registries = ["theseus.jobs", "theseus.train.parts", *jobs_module.JOB_MODULES, *parts_module.PART_MODULES]
    files = _defining_files(classes, registries) | {"theseus/catalog.py"}
    return {"sources": fingerprint(sorted(files)), **_rows(found_jobs, found_parts)}


def jobs(prefix: str = "") -> dict[str, str]:
    """Key -> description of the jobs whose key starts with ``prefix``, sorted: the built-in ones and those
    registered in this process, without importing the built-in jobs' modules.

    >>> list(jobs("data/tokenize/a"))
    ['data/tokenize/addition', 'data/tokenize/alpaca']
    """
    found = {**built_in()["jobs"], **_rows(_registered("theseus.jobs", "registry"), {})["jobs"]}
    return {key: found[key] for key in sorted(found) if key.startswith(prefix)}


def kinds() -> list[str]:
    """The kinds of parts, in the order ``theseus parts`` lists them (``theseus.train.parts.KINDS``).

    >>> kinds()[:2]
    ['model', 'optimizer']
    """
    return list(json.loads(CATALOG.read_text())["parts"])


def parts(kind: str | None = None) -> dict[str, dict[str, tuple[str, str]]]:
    """Kind -> name -> (config keys, description) of the parts of ``kind`` (or of every kind, in the order of
    ``KINDS``), names sorted: the built-in ones and those registered in this process, without importing
    the built-in parts' modules. An unknown kind is a ValueError naming the kinds.

    >>> parts("schedule")["schedule"]["wsd"][0]
    'optimization: warmup_pct=0.005, decay_pct=0.01, final_lr_frac=0.01'
    """
    stored = built_in()["parts"]
    every = list(stored)
    if kind is not None and kind not in every:
        raise BadInput(f"unknown part kind {kind!r}; the kinds are {', '.join(every)}")
    current = _rows({}, _registered("theseus.train.parts", "parts"))["parts"]
    out = {}
    for each in every if kind is None else (kind,):
        found = {**stored.get(each, {}), **current.get(each, {})}
        out[each] = {name: tuple(found[name]) for name in sorted(found)}
    return out


def main(argv: list[str]) -> int:
    """Rewrite ``catalog.json`` from the live registries; with ``--check``, only say whether it is up to date
    (exit 1 and the entries that differ when not). Run it in a fresh process (``python -m``).

    >>> main(["--fix"])
    2
    """
    if argv not in ([], ["--check"]):
        print("usage: python -m theseus.catalog [--check]", file=sys.stderr)
        return 2
    current = live()
    if argv:
        stored = json.loads(CATALOG.read_text())
        stale = [f"jobs {key}" for key in sorted({*current["jobs"], *stored["jobs"]})
                 if current["jobs"].get(key) != stored["jobs"].get(key)]
        stale += [f"parts {kind}/{name}" for kind in {**current["parts"], **stored["parts"]}
                  for name in sorted({*current["parts"].get(kind, {}), *stored["parts"].get(kind, {})})
                  if current["parts"].get(kind, {}).get(name) != stored["parts"].get(kind, {}).get(name)]
        stale += [f"source {name}" for name in sorted({*current["sources"], *stored["sources"]})
                  if current["sources"].get(name) != stored["sources"].get(name)]
        if stale:
            print(f"{CATALOG} is out of date ({'; '.join(stale)}): run python -m theseus.catalog", file=sys.stderr)
            return 1
        return 0
    CATALOG.write_text(json.dumps(current, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
