"""A local segment's theseus footer entries, from one read of the file's end.

A cold ``Store.runs()`` of a root that was never compacted needs the footer entries of every
segment, and for small files the cost of opening each through a Parquet library (decoding its
whole footer, building its schema) is most of the query. A segment's footer is Thrift (compact
protocol) at the file's end: ``<footer> <4-byte length> PAR1``; each key-value entry in it is a
``KeyValue`` struct, ``0x18 <varint length> <key> 0x18 <varint length> <value> 0x00``. This
module reads the last ``TAIL`` bytes with one ``pread`` and finds the theseus entries there
without decoding the rest of the footer. Nothing else in a segment's footer can hold such a
struct for a theseus key (the only other strings are column names, the writer's name and the
seq/stamp statistics, and the entries' JSON values have no control characters), and an entry
found more than once is not trusted: the caller then reads the footer whole, as it does for
anything this module cannot read, and the entries found are checked like any footer's.
"""

from __future__ import annotations

import os
import stat

TAIL = 1 << 13  # most segment footers fit: one read
_MAGIC = b"PAR1"
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def footer_bytes(path: str) -> bytes | None:
    """The Thrift footer of a local Parquet file (None when ``path`` is not a regular file or not
    Parquet). Never blocks on a FIFO and never follows a link (both are None).

    >>> import io, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = tempfile.mkdtemp() + "/t.parquet"
    >>> pq.write_table(pa.table({"a": [1]}).replace_schema_metadata({"theseus.keys": "{}"}), path)
    >>> b"theseus.keys" in footer_bytes(path), footer_bytes(tempfile.mkdtemp())
    (True, None)
    """
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise
    except OSError:  # a link (O_NOFOLLOW), no permission...: the whole read names it
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size < 12:
            return None
        size = info.st_size
        tail = os.pread(fd, min(TAIL, size), size - min(TAIL, size))
        if len(tail) < 12 or tail[-4:] != _MAGIC:
            return None
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 12 > size:
            return None
        if length + 8 > len(tail):
            tail = os.pread(fd, length + 8, size - length - 8)
            if len(tail) != length + 8:
                return None
        return tail[len(tail) - length - 8:-8]
    finally:
        os.close(fd)


def entry(footer: bytes, key: bytes) -> bytes | None:
    """The value of the key-value entry ``key`` in a Thrift footer: None when it has none, or when
    ``key``'s struct appears more than once or is malformed (the caller then reads the footer whole).

    >>> entry(b"..\\x18\\x03abc\\x18\\x02{}\\x00..", b"abc"), entry(b"\\x18\\x03abc\\x18\\x05{}\\x00", b"abc")
    (b'{}', None)
    """
    needle = b"\x18" + _varint(len(key)) + key + b"\x18"
    at = footer.find(needle)
    if at < 0 or footer.find(needle, at + 1) >= 0:
        return None
    at += len(needle)
    length, shift = 0, 0
    while at < len(footer) and shift < 35:
        byte = footer[at]
        at += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    else:
        return None
    stop = at + length
    if stop >= len(footer) or footer[stop] != 0:  # the struct ends right after its value
        return None
    return footer[at:stop]


def _varint(n: int) -> bytes:
    """``n`` as a Thrift (ULEB128) varint.

    >>> _varint(12), _varint(300)
    (b'\\x0c', b'\\xac\\x02')
    """
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7
