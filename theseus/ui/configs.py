"""Runs' configs: the YAML text, a dotted key's value, and the differences between two configs.

>>> flat = flatten(yaml.safe_load("training:\\n  lr: 0.1\\n  steps: 10\\n"))
>>> flat
{'training.lr': 0.1, 'training.steps': 10}
>>> diff(flat, {"training.lr": 0.2, "training.steps": 10})
[{'key': 'training.lr', 'this': 0.1, 'other': 0.2}]
"""

from __future__ import annotations

from typing import Any

import yaml

from theseus.audit import flatten
from theseus.store import schema
from theseus.ui.follow import RunLog

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader where built: the same tags, faster

__all__ = ["config_text", "config_value", "diff", "flatten", "run_config"]


def config_text(run: RunLog) -> str | None:
    """The run's latest config as YAML text (None when it recorded none).

    >>> config_text(RunLog("a", "abcdef")) is None
    True
    """
    return run.latest(schema.CONFIG)


def run_config(run: RunLog) -> dict[str, Any]:
    """The run's latest config, flattened to dotted keys (empty when none or unreadable).

    >>> run_config(RunLog("a", "abcdef"))
    {}
    """
    text = config_text(run)
    try:
        tree = yaml.load(text, Loader=SAFE_LOADER) if text else None
    except yaml.YAMLError:
        return {}
    return flatten(tree) if isinstance(tree, dict) else {}


def config_value(flat: dict[str, Any], key: str) -> Any:
    """The value at dotted ``key`` (a whole section as a dict of its keys), None when absent.

    >>> config_value({"a.b": 1, "a.c": 2}, "a.b"), config_value({"a.b": 1, "a.c": 2}, "a")
    (1, {'b': 1, 'c': 2})
    """
    if key in flat:
        return flat[key]
    section = {k[len(key) + 1:]: v for k, v in flat.items() if k.startswith(key + ".")}
    return section or None


def diff(this: dict[str, Any], other: dict[str, Any]) -> list[dict[str, Any]]:
    """The dotted keys whose values differ, sorted, with both values (None where absent).

    >>> diff({"a": 1}, {"b": 2})
    [{'key': 'a', 'this': 1, 'other': None}, {'key': 'b', 'this': None, 'other': 2}]
    """
    return [{"key": k, "this": this.get(k), "other": other.get(k)}
            for k in sorted(set(this) | set(other)) if this.get(k) != other.get(k)]
