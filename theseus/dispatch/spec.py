"""The launch spec: what every process of a launched run needs to know, as plain data.

A ``LaunchSpec`` names the job (registry key and run name), its full resolved
config (YAML text), the root every process writes to, where to restore from
(``base_node`` + ``resume``), the nonce of the lineage the run writes (chosen
by the launcher, so every process agrees on the node ids), the code revision
and the uv dependency groups to sync, extra environment variables, and the
user's experiments the job needs (``theseus.experiments``: files as source
text, or module names).

It travels as JSON: ``to_json()`` / ``LaunchSpec.from_json(text)``. Loading
checks every field's type and refuses unknown fields and executes nothing (no
pickles), so a spec from a stranger is safe to read; the bootstrap that runs
it imports its experiments, as it runs the code shipped with it.

>>> spec = LaunchSpec("gpt/train/pretrain", "train-gpt", "training:\\n  tokens: 100\\n", "/tmp/root",
...                   nonce="949e88", revision="abc123", groups=("cpu",))
>>> LaunchSpec.from_json(spec.to_json()) == spec
True
>>> spec.first_node().id
'Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA'
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from theseus.errors import BadInput
from theseus.experiments import Experiment
from theseus.store.node import Node, check_nonce, decode_id

__all__ = ["FORMAT", "LaunchSpec"]

FORMAT = "theseus.launch/1"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """One launched run, as plain data (see the module docstring).

    - ``job_key``: a registry key (``gpt/train/pretrain``); ``run_name``: ``run`` or
      ``project.group.run``.
    - ``config_yaml``: the job's full resolved config as YAML.
    - ``root``: the folder or ``gs://`` URL every process writes to.
    - ``base_node``: a node id to restore from (``None``: a fresh run); ``resume``:
      continue that node's lineage (True, the nonce is the base's) or branch from it.
    - ``nonce``: the lineage this launch writes; every process uses it.
    - ``revision``: the code revision (git commit) shipped; ``groups``: uv groups to sync.
    - ``env``: extra environment variables for every process.
    - ``experiments``: the user's experiments (``theseus.experiments.Experiment``) every
      process imports, in order, before it builds the job.
    - ``auto_resume``: a start of this spec that finds its lineage already written (a
      requeued SLURM job, a relaunch after preemption) resumes it from its latest
      committed checkpoint instead of starting over (`theseus.dispatch.bootstrap`).

    >>> LaunchSpec("data/tokenize/pydoc", "tok", "", "/tmp/r", nonce="abcdef").resume
    False
    >>> LaunchSpec("data/tokenize/pydoc", "tok", "", "/tmp/r", nonce="xyz")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: launch spec field 'nonce': nonce must be 6 lowercase hex characters, got 'xyz'
    """

    job_key: str
    run_name: str
    config_yaml: str
    root: str
    base_node: str | None = None
    resume: bool = False
    nonce: str = ""
    revision: str = ""
    groups: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    experiments: tuple[Experiment, ...] = ()
    auto_resume: bool = False

    def __post_init__(self) -> None:
        for name in ("job_key", "run_name", "config_yaml", "root", "revision"):
            _check_type(name, getattr(self, name), str)
        if not self.job_key or not self.run_name or not self.root:
            empty = next(n for n in ("job_key", "run_name", "root") if not getattr(self, n))
            raise BadInput(f"launch spec field {empty!r} must not be empty")
        _check_type("resume", self.resume, bool)
        _check_type("auto_resume", self.auto_resume, bool)
        if self.base_node is not None:
            _check_type("base_node", self.base_node, str)
            _field("base_node", decode_id, self.base_node)
        elif self.resume:
            raise BadInput("launch spec: resume=True needs a base_node to resume from")
        nonce = self.nonce or self._default_nonce()
        _field("nonce", check_nonce, nonce)
        _field("run_name", Node.start, self.run_name)
        if self.resume and nonce != decode_id(self.base_node)[1]:
            raise BadInput(f"launch spec: resume=True continues the lineage of {self.base_node}, so the nonce "
                             f"must be {decode_id(self.base_node)[1]!r}, got {nonce!r} (use resume=False to branch)")
        groups = tuple(self.groups) if isinstance(self.groups, (list, tuple)) else self.groups
        _check_type("groups", groups, tuple)
        for group in groups:
            if not isinstance(group, str) or not _GROUP.match(group):
                raise BadInput(f"launch spec field 'groups': {group!r} is not a uv dependency group name")
        _check_type("env", self.env, Mapping)
        for key, value in self.env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key) or not isinstance(value, str):
                raise BadInput(f"launch spec field 'env': {key!r}={value!r} is not NAME=string")
        experiments = tuple(self.experiments) if isinstance(self.experiments, (list, tuple)) else self.experiments
        _check_type("experiments", experiments, tuple)
        for experiment in experiments:
            if not isinstance(experiment, Experiment):
                raise BadInput(f"launch spec field 'experiments': a {type(experiment).__name__} is not an Experiment")
        object.__setattr__(self, "nonce", nonce)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "experiments", experiments)
        object.__setattr__(self, "env", dict(self.env))

    def _default_nonce(self) -> str:
        if self.base_node is not None and self.resume:
            return decode_id(self.base_node)[1]
        return secrets.token_hex(3)

    def first_node(self) -> Node:
        """The first node this launch writes: seq 0 of a fresh run or branch, ``base.next()`` when resuming.

        Its artifact folder holds the launch's process logs (``logs/process-<i>.log``).

        >>> base = Node("a.b.c", "abcdef", 4)
        >>> LaunchSpec("k/x", "c", "", "/r", base_node=base.id, resume=True).first_node().seq
        5
        >>> LaunchSpec("k/x", "c", "", "/r", base_node=base.id, nonce="012345").first_node().parent == base.id
        True
        """
        if self.base_node is None:
            return Node(self.run_name, self.nonce, 0)
        base = Node.from_id(self.base_node)
        if self.resume:
            return base.next()
        return Node(self.run_name, self.nonce, 0, base.id)

    def replace(self, **changes: Any) -> LaunchSpec:
        """A copy with ``changes`` (specs are immutable).

        >>> LaunchSpec("k/x", "c", "", "/r", nonce="abcdef").replace(root="/s").root
        '/s'
        """
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, with a ``format`` tag.

        >>> LaunchSpec("k/x", "c", "", "/r", nonce="abcdef").to_dict()["format"]
        'theseus.launch/1'
        """
        data = {"format": FORMAT}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "experiments":
                value = [experiment.to_dict() for experiment in value]
            data[f.name] = list(value) if isinstance(value, tuple) else dict(value) if f.name == "env" else value
        return data

    def to_json(self) -> str:
        """The spec as JSON text (sorted keys, so equal specs give equal text).

        >>> '"job_key": "k/x"' in LaunchSpec("k/x", "c", "", "/r", nonce="abcdef").to_json()
        True
        """
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> LaunchSpec:
        """The spec of ``to_dict()`` data; unknown or missing fields and wrong types are errors.

        >>> LaunchSpec.from_dict({"format": "theseus.launch/1", "job_key": "k/x", "run_name": "c",
        ...                       "config_yaml": "", "root": "/r", "colour": "red"})
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: launch spec has unknown field(s) colour; known: auto_resume, base_node, config_yaml, env, experiments, groups, job_key, nonce, resume, revision, root, run_name
        """  # noqa: E501 - a doctest's expected output, printed on one line
        if not isinstance(data, dict):
            raise BadInput(f"a launch spec is a JSON object, got {type(data).__name__}")
        data = dict(data)
        fmt = data.pop("format", None)
        if fmt != FORMAT:
            raise BadInput(f"not a theseus launch spec: format {fmt!r}, expected {FORMAT!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInput(f"launch spec has unknown field(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        missing = sorted(n for n in ("job_key", "run_name", "config_yaml", "root") if n not in data)
        if missing:
            raise BadInput(f"launch spec is missing field(s) {', '.join(missing)}")
        if isinstance(data.get("groups"), list):
            data["groups"] = tuple(data["groups"])
        if isinstance(data.get("experiments"), list):
            try:
                data["experiments"] = tuple(Experiment.from_dict(e) for e in data["experiments"])
            except ValueError as e:
                raise BadInput(f"launch spec field 'experiments': {e}") from None
        return cls(**data)

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchSpec:
        """Parse ``to_json()`` text (JSON only: nothing in it is executed).

        >>> LaunchSpec.from_json("[1, 2]")
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: a launch spec is a JSON object, got list
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise BadInput(f"a launch spec must be JSON: {e}") from None
        return cls.from_dict(data)


def _check_type(name: str, value: Any, kind: type) -> None:
    if not isinstance(value, kind):
        raise BadInput(f"launch spec field {name!r} must be {kind.__name__}, got {type(value).__name__} {value!r}")


def _field(name: str, check: Any, value: Any) -> None:
    try:
        check(value)
    except ValueError as e:
        raise BadInput(f"launch spec field {name!r}: {e}") from None
