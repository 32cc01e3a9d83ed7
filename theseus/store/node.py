"""Node identity: a moment in a run, addressed by name, nonce and seq."""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import threading
from operator import attrgetter

import numpy as np
import pyarrow as pa

from theseus.errors import BadInput

_PART_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_\-]*"
_PART = re.compile(rf"^{_PART_PATTERN}$")
# a full ``project.group.run`` name and a nonce, for one fullmatch each (listings check every folder)
FULL_NAME_PATTERN, NONCE_PATTERN = rf"{_PART_PATTERN}(?:\.{_PART_PATTERN}){{2}}", r"[0-9a-f]{6}"
_NONCE = re.compile(rf"^{NONCE_PATTERN}$")
_URLSAFE = bytes.maketrans(b"+/", b"-_")
MAX_SEQ = 2**63 - 1  # seqs are stored as int64
MAX_NAME = 255 - len("name=")  # a run's log folder, name=<name>, must fit in one file name (NAME_MAX)


def normalize_name(name: str) -> str:
    """Return the full ``project.group.run`` name, validating every part.

    A bare run name gets the default project and group.

    >>> normalize_name("train-gpt")
    'general.default.train-gpt'
    >>> normalize_name("lm.ablations.rope-off")
    'lm.ablations.rope-off'
    """
    if not isinstance(name, str) or not name:
        raise BadInput(f"run name must be a non-empty string, got {name!r}")
    parts = name.split(".")
    if len(parts) == 1:
        parts = ["general", "default", parts[0]]
    if len(parts) != 3:
        raise BadInput(
            f"run name {name!r} must be 'run' or 'project.group.run' (got {len(parts)} dot-separated parts)"
        )
    for part in parts:
        if not _PART.match(part):
            raise BadInput(
                f"run name {name!r}: part {part!r} may only hold letters, digits, '_' and '-' "
                "(no '/', '=', '..' or spaces) and must start with a letter or digit"
            )
    full = ".".join(parts)
    if len(full) > MAX_NAME:
        raise BadInput(f"run name {full[:40]}... is {len(full)} characters: the log's folder name=<name> "
                         f"allows at most {MAX_NAME}")
    return full


def check_nonce(nonce: str) -> str:
    """Return ``nonce`` if it is 6 lowercase hex characters, else raise ValueError.

    >>> check_nonce("949e88")
    '949e88'
    """
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise BadInput(f"nonce must be 6 lowercase hex characters, got {nonce!r}")
    return nonce


def encode_id(name: str, nonce: str, seq: int) -> str:
    """URL-safe base64 of ``name:nonce:seq`` without padding.

    >>> encode_id("general.default.train-gpt", "949e88", 0)
    'Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA'
    """
    return encode_id_bytes(f"{name}:{nonce}:{seq}".encode()).decode()


def decode_id(node_id: str) -> tuple[str, str, int]:
    """Inverse of :func:`encode_id`; a malformed id is a ValueError.

    >>> decode_id("Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA")
    ('general.default.train-gpt', '949e88', 0)
    """
    if not isinstance(node_id, str) or not node_id or not re.fullmatch(r"[A-Za-z0-9_\-]+", node_id):
        raise BadInput(f"malformed node id {node_id!r}: expected URL-safe base64 of 'name:nonce:seq'")
    try:
        raw = base64.urlsafe_b64decode(node_id + "=" * (-len(node_id) % 4)).decode()
        name, nonce, seq = raw.rsplit(":", 2)
        seq_int = int(seq)
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"malformed node id {node_id!r}: expected URL-safe base64 of 'name:nonce:seq'") from e
    if seq_int < 0 or str(seq_int) != seq:
        raise BadInput(f"malformed node id {node_id!r}: seq {seq!r} is not a non-negative integer")
    if seq_int > MAX_SEQ:
        raise BadInput(f"malformed node id {node_id!r}: seq {seq} does not fit int64 (at most {MAX_SEQ})")
    try:
        normalize_name(name)
        check_nonce(nonce)
    except ValueError as e:
        raise BadInput(f"malformed node id {node_id!r}: {e}") from e
    return name, nonce, seq_int


def describe(node_id: str) -> str:
    """How messages name a node: ``node <id> (<name>:<nonce>:<seq>)``, or ``node <id>`` when the id is
    malformed (a message about a bad folder must not fail on a bad id).

    >>> describe("Z2VuZXJhbC5kZWZhdWx0LmE6YWJjMTIzOjM"), describe("??")
    ('node Z2VuZXJhbC5kZWZhdWx0LmE6YWJjMTIzOjM (general.default.a:abc123:3)', 'node ??')
    """
    try:
        name, nonce, seq = decode_id(node_id)
    except ValueError:
        return f"node {node_id}"
    return f"node {node_id} ({name}:{nonce}:{seq})"


def draw_nonce() -> str:
    """A random nonce (3 random bytes in hex); :meth:`Node.start` draws through it.

    >>> len(draw_nonce()) == 6 and check_nonce(draw_nonce()) is not None
    True
    """
    return secrets.token_hex(3)


_MAX_DRAWN = 100_000  # nonces drawn and never written: the oldest are forgotten (then checked as named lineages)
_drawn: dict[str, str] = {}  # nonce -> name of each new lineage this process drew, not yet claimed by a writer
_drawn_lock = threading.Lock()


def drew(name: str, nonce: str) -> bool:
    """Note that this process drew ``nonce`` for a new lineage of ``name``; False when it already
    holds that nonce for a lineage not yet claimed (the caller draws again).

    >>> drew("doc.nonces.draw", "0d0d0d"), drew("doc.nonces.other", "0d0d0d")
    (True, False)
    """
    with _drawn_lock:
        if nonce in _drawn:
            return False
        if len(_drawn) >= _MAX_DRAWN:
            del _drawn[next(iter(_drawn))]
        _drawn[nonce] = name
        return True


def take_drawn(name: str, nonce: str) -> bool:
    """Whether ``name:nonce`` is a new lineage this process drew and no writer claimed yet; it is
    forgotten here (from now on the root arbitrates it).

    >>> n = Node.start("doc.nonces.take")
    >>> take_drawn(n.name, n.nonce), take_drawn(n.name, n.nonce)
    (True, False)
    """
    with _drawn_lock:
        if _drawn.get(nonce) == name:
            del _drawn[nonce]
            return True
        return False


# a forked child shares the parent's drawn lineages: there they are named lineages, not new ones
os.register_at_fork(after_in_child=_drawn.clear)

_PREVIOUS = object()  # a node's parent is the node one seq before it in its lineage (made by next())


class Node:
    """A moment something happened in a run: ``Node(name, nonce, seq, parent=None)``.

    Immutable and compared by all four fields. A node made by :meth:`next` computes its
    parent's id only when it is read, so a training loop pays nothing per step for it
    (the writer encodes a whole flush of ids at once with :func:`lineage_columns`).

    >>> n = Node.start("train-gpt")
    >>> n.name, n.seq, n.parent
    ('general.default.train-gpt', 0, None)
    >>> m = n.next()
    >>> (m.seq, m.parent == n.id, m.nonce == n.nonce)
    (1, True, True)
    >>> m == Node(m.name, m.nonce, 1, n.id)
    True
    """

    # read-only properties over private slots: assigning ``node.seq`` raises AttributeError,
    # while next() fills a new node at the speed of plain slot stores
    __slots__ = ("_name", "_nonce", "_seq", "_parent", "_id")
    name = property(attrgetter("_name"), doc="The full ``project.group.run`` name.")
    nonce = property(attrgetter("_nonce"), doc="6 hex characters naming one lineage of the run.")
    seq = property(attrgetter("_seq"), doc="The position in the lineage (the training step).")

    def __init__(self, name: str, nonce: str, seq: int, parent: str | None = None):
        name = normalize_name(name)
        check_nonce(nonce)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise BadInput(f"seq must be a non-negative int, got {seq!r}")
        if seq > MAX_SEQ:
            raise BadInput(f"seq must fit int64 (at most {MAX_SEQ}), got {seq}")
        if parent is not None:
            decode_id(parent)
        self._name, self._nonce, self._seq, self._parent, self._id = name, nonce, int(seq), parent, None

    @classmethod
    def start(cls, name: str, parent: str | Node | None = None) -> Node:
        """Seq 0 of a fresh lineage (new random nonce); ``parent`` marks a branch point.

        The nonce is one this process has not drawn before; a writer's first record of the
        lineage claims it in its root, and refuses it when another lineage there holds it
        (``theseus.store.nonces``).

        >>> a, b = Node.start("a.b.c"), Node.start("a.b.c")
        >>> a.seq, a.nonce != b.nonce
        (0, True)
        """
        parent_id = parent.id if isinstance(parent, Node) else parent
        name = normalize_name(name)
        while True:
            nonce = draw_nonce()
            if drew(name, nonce):
                return cls(name, nonce, 0, parent_id)

    @classmethod
    def from_id(cls, node_id: str, parent: str | None = None) -> Node:
        """The node an id names (the parent is not part of the id).

        >>> Node.from_id("Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA")
        Node(name='general.default.train-gpt', nonce='949e88', seq=0, parent=None)
        """
        name, nonce, seq = decode_id(node_id)
        return cls(name, nonce, seq, parent)

    @property
    def id(self) -> str:
        """URL-safe id of this node (computed once; nodes are immutable)."""
        node_id = self._id
        if node_id is None:
            node_id = self._id = encode_id(self._name, self._nonce, self._seq)
        return node_id

    @property
    def parent(self) -> str | None:
        """The id of the node this one follows or branches from (None at the start of a lineage)."""
        parent = self._parent
        if parent is _PREVIOUS:
            parent = self._parent = encode_id(self._name, self._nonce, self._seq - 1)
        return parent

    @property
    def run(self) -> str:
        """The last part of the name.

        >>> Node("a.b.c", "949e88", 0).run
        'c'
        """
        return self.name.rsplit(".", 1)[1]

    def next(self) -> Node:
        """The following moment of the same lineage.

        >>> Node("a.b.c", "949e88", 4).next().seq
        5
        """
        # called once per training step: name and nonce are already valid, and the parent's
        # id is only encoded when someone reads it
        if self._seq >= MAX_SEQ:
            raise BadInput(f"seq {self._seq + 1} of {self._name} does not fit int64 (at most {MAX_SEQ})")
        node = _new_node(Node)
        node._name = self._name
        node._nonce = self._nonce
        node._seq = self._seq + 1
        node._parent = _PREVIOUS
        node._id = None
        return node

    def _fields(self) -> tuple[str, str, int, str | None]:
        return self.name, self.nonce, self.seq, self.parent

    def __eq__(self, other: object) -> bool:
        if type(other) is not Node:
            return NotImplemented
        return self is other or self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Node(name={self.name!r}, nonce={self.nonce!r}, seq={self.seq!r}, parent={self.parent!r})"

    def __reduce__(self):
        return Node, self._fields()

    def __copy__(self) -> Node:
        return self

    def __deepcopy__(self, memo: dict) -> Node:
        return self


_new_node = object.__new__
_FEW_IDS = 16
_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)  # a seq below 10**k has at most k digits


def encode_ids(name: str, nonce: str, seqs: np.ndarray) -> pa.StringArray:
    """:func:`encode_id` of every seq of one lineage at once, as an Arrow string array.

    Base64 encodes 3 bytes at a time, so the whole 3-byte groups of ``name:nonce:``
    are encoded once; only the groups that hold digits are encoded per seq.

    >>> encode_ids("general.default.train-gpt", "949e88", np.array([0, 10])).to_pylist()
    ['Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA', 'Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MTA']
    """
    seqs = np.asarray(seqs, np.int64)
    if seqs.size and seqs.min() < 0:
        raise BadInput("seq must be non-negative")
    if len(seqs) <= _FEW_IDS:  # a commit's flush: one id at a time costs less than the vector setup
        return pa.array([encode_id(name, nonce, seq) for seq in seqs.tolist()], pa.string())
    prefix = f"{name}:{nonce}:".encode()
    whole = len(prefix) - len(prefix) % 3
    head = np.frombuffer(encode_id_bytes(prefix[:whole]), np.uint8)
    rest = np.frombuffer(prefix[whole:], np.uint8)
    digits = np.searchsorted(_POW10, seqs, side="right") + 1
    widths = len(head) + (4 * (len(rest) + digits) + 2) // 3  # unpadded base64 length of each id
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum(widths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    for length in np.flatnonzero(np.bincount(digits)).tolist():
        rows = np.flatnonzero(digits == length)
        tail = _base64url(_decimal_rows(rest, seqs[rows], length))
        encoded = np.empty((len(rows), len(head) + tail.shape[1]), np.uint8)
        encoded[:, :len(head)] = head
        encoded[:, len(head):] = tail
        if rows[-1] - rows[0] + 1 == len(rows):  # one contiguous run of rows (sorted seqs)
            data[offsets[rows[0]]:offsets[rows[-1] + 1]] = encoded.ravel()
        else:
            data[(offsets[rows][:, None] + np.arange(encoded.shape[1])).ravel()] = encoded.ravel()
    return pa.StringArray.from_buffers(len(seqs), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def encode_id_bytes(raw: bytes) -> bytes:
    """URL-safe base64 of ``raw`` without padding.

    >>> encode_id_bytes(b"a:b:1")
    b'YTpiOjE'
    """
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=")


def _decimal_rows(prefix: np.ndarray, seqs: np.ndarray, length: int) -> np.ndarray:
    """Rows of ``prefix`` followed by each seq in ``length`` decimal digits (bytes)."""
    raw = np.empty((len(seqs), len(prefix) + length), np.uint8)
    raw[:, :len(prefix)] = prefix
    rest = seqs.copy()
    for column in range(raw.shape[1] - 1, len(prefix) - 1, -1):
        raw[:, column] = 48 + rest % 10
        rest //= 10
    return raw


def _base64url(raw: np.ndarray) -> np.ndarray:
    """URL-safe base64 without padding of each row of a uint8 matrix.

    The rows are zero-padded to whole 3-byte groups and encoded in one ``binascii`` call;
    each keeps the characters of its unpadded width (zero bytes pad a group exactly as
    base64's own padding bits do).

    >>> bytes(_base64url(np.frombuffer(b"a:b:1", np.uint8).reshape(1, -1))[0])
    b'YTpiOjE'
    """
    rows, width = raw.shape
    padded = np.zeros((rows, -(-width // 3) * 3), np.uint8)
    padded[:, :width] = raw
    encoded = np.frombuffer(binascii.b2a_base64(padded.tobytes(), newline=False).translate(_URLSAFE), np.uint8)
    return encoded.reshape(rows, -1)[:, :(4 * width + 2) // 3]


def lineage_columns(name: str, nonce: str, seqs: np.ndarray,
                    set_parents: dict[int, str | None] | None = None) -> tuple[pa.DictionaryArray, pa.DictionaryArray]:
    """Ids and parent ids of the nodes ``seqs`` of one lineage, as dictionary arrays over one dictionary.

    A node's parent is the node one seq before it (as :meth:`Node.next` makes it), except
    at the rows in ``set_parents``: ``{row: parent id, or None for no parent}``.

    >>> ids, parents = lineage_columns("a.b.c", "949e88", np.array([0, 1, 2]), {0: None})
    >>> ids.to_pylist() == [Node("a.b.c", "949e88", s).id for s in (0, 1, 2)]
    True
    >>> parents.to_pylist() == [None, ids[0].as_py(), ids[1].as_py()]
    True
    """
    n = len(seqs)
    previous = np.ones(n, bool)
    if set_parents:
        previous[list(set_parents)] = False
    chained = seqs if set_parents is None else seqs[previous]
    if chained.size and chained.min() < 1:
        raise BadInput("a node at seq 0 has no previous node: give its parent")
    wanted = np.concatenate([seqs, chained - 1])
    lo, hi = int(wanted.min()), int(wanted.max())
    if hi - lo < 2 * len(wanted):  # the usual case: a dense range of seqs, coded by offset
        unique = np.arange(lo, hi + 1)
        node_codes = (seqs - lo).astype(np.int32)
        parent_codes = np.where(previous, node_codes - 1, 0).astype(np.int32)
    else:
        unique = np.unique(wanted)
        node_codes = np.searchsorted(unique, seqs).astype(np.int32)
        parent_codes = np.zeros(n, np.int32)
        parent_codes[previous] = np.searchsorted(unique, chained - 1)
    extra_ids: dict[str, int] = {}  # set parent ids (branch points, nodes read back) after the encoded ones
    has_parent = previous
    if set_parents:
        has_parent = previous.copy()
        for row, parent in set_parents.items():
            if parent is not None:
                parent_codes[row] = len(unique) + extra_ids.setdefault(parent, len(extra_ids))
                has_parent[row] = True
    dictionary = encode_ids(name, nonce, unique)
    if extra_ids:
        dictionary = pa.concat_arrays([dictionary, pa.array(list(extra_ids), pa.string())])
    ids = pa.DictionaryArray.from_arrays(pa.array(node_codes), dictionary)
    parents = pa.DictionaryArray.from_arrays(pa.array(parent_codes, mask=~has_parent), dictionary)
    return ids, parents
