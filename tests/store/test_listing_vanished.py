"""A listed segment that vanished (a compaction retired it) is told by the error's type, never its message."""

import os

import polars as pl
import pytest

from theseus.store import CorruptSegment, Node, Store
from theseus.store.listing import list_segments, retry_vanished, vanished


def test_a_missing_file_is_vanished_whoever_raises_it(tmp_path):
    store = Store(tmp_path)
    with store.writer() as w:
        w.write(Node.start("proj.vanish.run"), {"loss": 1.0})
    [path] = list_segments(store.fs, store.path())
    frame = pl.scan_parquet([path])
    os.remove(path)  # retired between the listing and the read
    with pytest.raises(Exception) as polars_error:
        frame.collect()
    with pytest.raises(Exception) as os_error:
        open(path, "rb")
    assert vanished(polars_error.value) and vanished(os_error.value)


@pytest.mark.parametrize("error", [
    pl.exceptions.ComputeError("parquet: No such file or directory in the page index"),
    OSError("object not found in the footer's dictionary"),
    CorruptSegment("corrupt or truncated segment s-1.parquet: no such file"),
    ValueError("no such file"),
])
def test_an_error_that_only_mentions_a_missing_file_is_not_vanished(error):
    assert not vanished(error)


def test_retry_vanished_retries_a_missing_file_and_raises_anything_else_at_once():
    tries = []

    def gone_twice():
        tries.append(1)
        if len(tries) < 3:
            raise FileNotFoundError("log/name=a/nonce=b/s-1.parquet")
        return "read"

    assert retry_vanished(gone_twice) == "read" and len(tries) == 3

    calls = []

    def damaged():
        calls.append(1)
        raise pl.exceptions.ComputeError("No such file or directory: said by a damaged segment's message")

    with pytest.raises(pl.exceptions.ComputeError):
        retry_vanished(damaged)
    assert len(calls) == 1  # read once: a message that mentions a missing file is not a missing file
