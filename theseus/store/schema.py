"""The log's fixed row layout, user-key rules and value typing.

The log is stored long: one row per (record, key). Every segment has the same
columns, so ``polars.scan_parquet("<root>/log/**/*.parquet", hive_partitioning=True,
hive_schema={"name": pl.String, "nonce": pl.String})`` reads any root (the partitions
declared strings: a nonce may look like a number), while user keys stay typed: a value
lands in the column of its type (``float``, ``int``, ``bool`` or ``str``).
``docs/reading-a-root.md`` has the recipes for other readers and the fold.
"""

from __future__ import annotations

import math
import numbers
import re

import numpy as np
import pyarrow as pa

from theseus.errors import BadInput

# Reserved keys start with "_" and are only written through the writer's methods.
JOB = "_job"
JOB_SOURCE = "_job_source"  # where the job's class came from: "module:qualname" or "/path/file.py:qualname"
CONFIG = "_config"
STATUS = "_status"
ERROR = "_error"
FINISHED = "_finished"
CHECKPOINT = "_checkpoint"
CLAIM = "_claim"  # a resume's claim to continue a lineage at this node (see store.claim)
ARTIFACTS = "_artifacts"  # the node's artifact folder holds published files (analyses): gc keeps it
RETIRED = "_retired"  # why the node's checkpoint was retired (retention): final, no reader restores it again
# a person's marks on a run (theseus tag / note / hide): the latest record of each is the run's
TAGS = "_tags"  # the run's whole tag set, a JSON list of names (theseus.store.marks)
NOTE = "_note"
HIDDEN = "_hidden"  # true: ls and the UI leave the run out unless asked
RESERVED = {JOB: "str", JOB_SOURCE: "str", CONFIG: "str", STATUS: "str", ERROR: "str", FINISHED: "bool",
            CHECKPOINT: "str", CLAIM: "str", ARTIFACTS: "str", TAGS: "str", NOTE: "str", HIDDEN: "bool",
            RETIRED: "str"}
#: reserved keys whose value is a root-relative folder that gc must keep
FOLDER_KEYS = (CHECKPOINT, ARTIFACTS)

TYPES = ("float", "int", "bool", "str")

SEGMENT_SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("seq", pa.int64()),
        ("parent", pa.string()),
        ("stamp", pa.int64()),
        ("writer", pa.string()),
        ("key", pa.string()),
        ("float", pa.float64()),
        ("int", pa.int64()),
        ("bool", pa.bool_()),
        ("str", pa.string()),
    ]
)

# Parquet footer metadata: {key: type} of the keys a segment holds.
KEYS_METADATA = b"theseus.keys"
# Parquet footer metadata: where each key's rows are (see segments.Footer).
INDEX_METADATA = b"theseus.index"

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-./:@]*$")


def check_user_key(key: object) -> str:
    """Validate a user key such as ``train/loss``.

    >>> check_user_key("train/loss")
    'train/loss'
    """
    if not isinstance(key, str) or not _KEY.match(key) or len(key) > 256:
        raise BadInput(
            f"invalid key {key!r}: keys are 1-256 characters of letters, digits and '_-./:@', "
            "starting with a letter or digit (keys starting with '_' are reserved)"
        )
    return key


def value_type(key: str, value: object, objects_hint: str = "store.objects(node)") -> str:
    """The log type of a scalar value, or a ValueError for anything else.

    >>> value_type("train/loss", 2.5), value_type("step", 3), value_type("ok", True)
    ('float', 'int', 'bool')
    """
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        if not -(2**63) <= int(value) < 2**63:
            raise BadInput(f"value of {key!r} ({value}) does not fit in int64")
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value_type(key, value.item(), objects_hint)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return "float"
    kind = type(value).__name__
    shape = getattr(value, "shape", None)
    what = f"{kind} of shape {tuple(shape)}" if shape is not None else kind
    raise BadInput(
        f"value of {key!r} is a {what}, not a scalar (bool, int, float or str); "
        f"store arrays, trees and files as artifacts under {objects_hint}"
    )


def compatible(known: str, new: str) -> bool:
    """Whether a key typed ``known`` may also take ``new`` (int and float mix).

    >>> compatible("float", "int"), compatible("str", "float")
    (True, False)
    """
    return known == new or {known, new} == {"int", "float"}


def merge_types(a: str, b: str) -> str:
    """The read type of a key seen with types a and b (never fails).

    >>> merge_types("int", "float"), merge_types("str", "int")
    ('float', 'str')
    """
    if a == b:
        return a
    if {a, b} == {"int", "float"}:
        return "float"
    return "str"


def to_python(kind: str, value: object):
    """Convert a scalar to the plain Python type stored in column ``kind``."""
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    if kind == "bool":
        return bool(value)
    return str(value)


def is_nan(value: object) -> bool:
    """True for float NaN (stored as a value; NaN losses are facts too)."""
    return isinstance(value, float) and math.isnan(value)
