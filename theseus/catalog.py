"""The jobs and parts ``theseus jobs`` and ``theseus parts`` list, read without importing JAX.

The modules that register the built-in jobs and parts import JAX, Flax, Optax and
TensorStore, seconds of startup for a listing. So the built-in ones are read from
``catalog.json`` beside this module, which ``python -m theseus.catalog`` writes from the
live registries with a fingerprint of every theseus source file they were read from; those
registered in this process (by ``--import FILE``, or a module already imported) come from
the registries themselves and win over the file. When a fingerprinted file has changed
since, the file is not trusted: the listing loads the registries (slow, never stale).
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
import json
import sys
from pathlib import Path
from typing import Any

from theseus.jobs import registry
from theseus.train.parts import KINDS, Part
from theseus.train.parts import parts as registered_parts

__all__ = ["CATALOG", "built_in", "config_keys", "fingerprint", "jobs", "live", "main", "parts"]

#: The built-in jobs and parts as listed: ``{"sources": {file: hash}, "jobs": {key: description}, "parts":
#: {kind: {name: [config, description]}}}``, files relative to the folder holding the package.
CATALOG = Path(__file__).with_name("catalog.json")
_TOP = Path(__file__).resolve().parents[1]  # the folder holding the theseus package


def config_keys(member: type[Part]) -> str:
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

    >>> "gpt/train/pretrain" in built_in()["jobs"], list(built_in()["parts"]) == list(KINDS)
    (True, True)
    """
    stored = json.loads(CATALOG.read_text())
    if fingerprint(list(stored["sources"])) == stored["sources"]:
        return stored
    return live()


def live() -> dict[str, Any]:
    """The built-in jobs and parts as their registries list them, and the theseus source files loaded to list
    them: imports every module that registers one (JAX included), so run it in a process that registered
    nothing else.

    >>> found = live(); found["parts"]["optimizer"]["adamw"][1].startswith("AdamW with decoupled weight decay")
    True
    >>> "theseus/train/optimizers.py" in found["sources"]
    True
    """
    rows = _rows(registry(), registered_parts())
    files = {str(Path(module.__file__).resolve().relative_to(_TOP)) for name, module in list(sys.modules.items())
             if name.split(".")[0] == "theseus" and getattr(module, "__file__", None)}
    return {"sources": fingerprint(sorted(files | {"theseus/catalog.py"})), **rows}


def jobs(prefix: str = "") -> dict[str, str]:
    """Key -> description of the jobs whose key starts with ``prefix``, sorted: the built-in ones and those
    registered in this process, without importing the built-in jobs' modules.

    >>> list(jobs("data/tokenize/a"))
    ['data/tokenize/addition', 'data/tokenize/alpaca']
    """
    found = {**built_in()["jobs"], **_rows(registry(load=False), {})["jobs"]}
    return {key: found[key] for key in sorted(found) if key.startswith(prefix)}


def parts(kind: str | None = None) -> dict[str, dict[str, tuple[str, str]]]:
    """Kind -> name -> (config keys, description) of the parts of ``kind`` (or of every kind, in the order of
    ``KINDS``), names sorted: the built-in ones and those registered in this process, without importing
    the built-in parts' modules. An unknown kind is a ValueError naming the kinds.

    >>> parts("schedule")["schedule"]["wsd"][0]
    'optimization: warmup_pct=0.005, decay_pct=0.01, final_lr_frac=0.01'
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown part kind {kind!r}; the kinds are {', '.join(KINDS)}")
    stored, current = built_in()["parts"], _rows({}, registered_parts(load=False))["parts"]
    out = {}
    for each in KINDS if kind is None else (kind,):
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
        stale += [f"parts {kind}/{name}" for kind in KINDS
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
