"""Node identity: a moment in a run, addressed by name, nonce and seq."""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from dataclasses import dataclass
from functools import cached_property

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
_NONCE = re.compile(r"^[0-9a-f]{6}$")
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def normalize_name(name: str) -> str:
    """Return the full ``project.group.run`` name, validating every part.

    A bare run name gets the default project and group.

    >>> normalize_name("train-gpt")
    'general.default.train-gpt'
    >>> normalize_name("lm.ablations.rope-off")
    'lm.ablations.rope-off'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"run name must be a non-empty string, got {name!r}")
    parts = name.split(".")
    if len(parts) == 1:
        parts = ["general", "default", parts[0]]
    if len(parts) != 3:
        raise ValueError(
            f"run name {name!r} must be 'run' or 'project.group.run' (got {len(parts)} dot-separated parts)"
        )
    for part in parts:
        if not _PART.match(part):
            raise ValueError(
                f"run name {name!r}: part {part!r} may only hold letters, digits, '_' and '-' "
                "(no '/', '=', '..' or spaces) and must start with a letter or digit"
            )
    return ".".join(parts)


def check_nonce(nonce: str) -> str:
    """Return ``nonce`` if it is 6 lowercase hex characters, else raise ValueError.

    >>> check_nonce("949e88")
    '949e88'
    """
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise ValueError(f"nonce must be 6 lowercase hex characters, got {nonce!r}")
    return nonce


def encode_id(name: str, nonce: str, seq: int) -> str:
    """URL-safe base64 of ``name:nonce:seq`` without padding.

    >>> encode_id("general.default.train-gpt", "949e88", 0)
    'Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA'
    """
    raw = f"{name}:{nonce}:{seq}".encode()
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=").decode()


def decode_id(node_id: str) -> tuple[str, str, int]:
    """Inverse of :func:`encode_id`; a malformed id is a ValueError.

    >>> decode_id("Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA")
    ('general.default.train-gpt', '949e88', 0)
    """
    if not isinstance(node_id, str) or not node_id or not re.fullmatch(r"[A-Za-z0-9_\-]+", node_id):
        raise ValueError(f"malformed node id {node_id!r}: expected URL-safe base64 of 'name:nonce:seq'")
    try:
        raw = base64.urlsafe_b64decode(node_id + "=" * (-len(node_id) % 4)).decode()
        name, nonce, seq = raw.rsplit(":", 2)
        seq_int = int(seq)
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed node id {node_id!r}: expected URL-safe base64 of 'name:nonce:seq'") from e
    if seq_int < 0 or str(seq_int) != seq:
        raise ValueError(f"malformed node id {node_id!r}: seq {seq!r} is not a non-negative integer")
    try:
        normalize_name(name)
        check_nonce(nonce)
    except ValueError as e:
        raise ValueError(f"malformed node id {node_id!r}: {e}") from e
    return name, nonce, seq_int


@dataclass(frozen=True)
class Node:
    """A moment something happened in a run.

    >>> n = Node.start("train-gpt")
    >>> n.name, n.seq, n.parent
    ('general.default.train-gpt', 0, None)
    >>> m = n.next()
    >>> (m.seq, m.parent == n.id, m.nonce == n.nonce)
    (1, True, True)
    """

    name: str
    nonce: str
    seq: int
    parent: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "name", normalize_name(self.name))
        check_nonce(self.nonce)
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be a non-negative int, got {self.seq!r}")
        if self.parent is not None:
            decode_id(self.parent)

    @classmethod
    def start(cls, name: str, parent: str | Node | None = None) -> Node:
        """Seq 0 of a fresh lineage (new random nonce); ``parent`` marks a branch point.

        >>> Node.start("a.b.c").seq
        0
        """
        parent_id = parent.id if isinstance(parent, Node) else parent
        return cls(name, secrets.token_hex(3), 0, parent_id)

    @classmethod
    def from_id(cls, node_id: str, parent: str | None = None) -> Node:
        """The node an id names (the parent is not part of the id).

        >>> Node.from_id("Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA")
        Node(name='general.default.train-gpt', nonce='949e88', seq=0, parent=None)
        """
        name, nonce, seq = decode_id(node_id)
        return cls(name, nonce, seq, parent)

    @cached_property
    def id(self) -> str:
        """URL-safe id of this node (computed once; nodes are immutable)."""
        return encode_id(self.name, self.nonce, self.seq)

    @property
    def run(self) -> str:
        """The last part of the name.

        >>> Node("a.b.c", "949e88", 0).run
        'c'
        """
        return self.name.rsplit(".", 1)[1]

    def next(self) -> Node:
        """The following moment of the same lineage."""
        # called once per training step: name, nonce and parent id are already valid, so skip
        # __post_init__'s re-validation (a regex per name part, a base64 decode of the parent)
        own = self.__dict__
        parent = own.get("id")
        if parent is None:  # what the cached ``id`` property stores, without its lock
            parent = own["id"] = encode_id(own["name"], own["nonce"], own["seq"])
        node = object.__new__(Node)
        fields = node.__dict__
        fields["name"], fields["nonce"], fields["seq"], fields["parent"] = own["name"], own["nonce"], own["seq"] + 1, parent
        return node
