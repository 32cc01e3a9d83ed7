"""A damaged or forged segment or view is refused by readers and reported by `theseus audit`
(issue 15, items 9 and 10)."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import CorruptSegment, Node, Store
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA

runner = CliRunner()


def write_run(root, steps: int = 3) -> Node:
    """One run of ``steps`` nodes with loss 10 + seq, in one segment."""
    start = node = Node.start("proj.integrity.run")
    with Store(root).writer() as w:
        for i in range(steps):
            w.write(node, {"loss": 10.0 + i})
            node = node.next()
    return start


def only_segment(root) -> str:
    [path] = Store(root)._segments()
    return path


def rewrite_footer(path: str, edit) -> None:
    """Rewrite a segment with its footer's ``{keys, index}`` (parsed JSON, or raw bytes) changed by ``edit``."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    keys, index = edit(json.loads(meta[KEYS_METADATA]), json.loads(meta[INDEX_METADATA]))
    meta[KEYS_METADATA] = keys if isinstance(keys, bytes) else json.dumps(keys).encode()
    if index is None:
        meta.pop(INDEX_METADATA)
    else:
        meta[INDEX_METADATA] = json.dumps(index).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def audit_cli(root) -> tuple[int, str]:
    result = runner.invoke(app, ["audit", str(root)])
    return result.exit_code, result.output


def shift_seqs(keys, index):
    index["blocks"]["loss"][2] += 1000
    index["blocks"]["loss"][3] += 1000
    return keys, index


def huge_block(keys, index):
    index["blocks"]["loss"][1] = 10**12
    return keys, index


def string_bounds(keys, index):
    index["blocks"]["loss"][0:2] = ["0", "3"]
    return keys, index


@pytest.mark.parametrize("forge", [shift_seqs, huge_block, string_bounds])
def test_a_forged_segment_index_is_refused_and_audited(tmp_path, forge):
    start = write_run(tmp_path)
    path = only_segment(tmp_path)
    rewrite_footer(path, forge)
    store = Store(tmp_path)
    for query in (lambda: store.find().nonce(start.nonce).seq(1000).select(keys=["loss"]),
                  lambda: store.find().nonce(start.nonce).select(keys=["loss"]),
                  lambda: Store(tmp_path).find().sort("loss").select(keys=["loss"])):
        with pytest.raises(CorruptSegment, match=os.path.basename(path)):
            query()
    code, output = audit_cli(tmp_path)
    assert code == 1 and os.path.basename(path) in output


def test_a_forged_seq_range_within_the_files_seqs_is_refused(tmp_path):
    """Statistics cannot catch a key's range moved inside the file's: the seqs a reader reads do."""
    start = node = Node.start("proj.integrity.two")
    with Store(tmp_path).writer() as w:
        for i in range(6):
            w.write(node, {"loss": 10.0 + i, **({"early": 1.0} if i < 3 else {})})
            node = node.next()
    path = only_segment(tmp_path)

    def move(keys, index):
        index["blocks"]["early"][2:4] = [3, 5]
        return keys, index

    rewrite_footer(path, move)
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):
        Store(tmp_path).find().nonce(start.nonce).select(keys=["early"])
    code, output = audit_cli(tmp_path)
    assert code == 1 and os.path.basename(path) in output
