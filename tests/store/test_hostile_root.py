"""A damaged or hostile root: links out of it, FIFOs and devices in it, temporaries left in it.

Nothing is deleted through a link, nothing but a regular file is read (a FIFO would block
forever, a device never end), and what theseus refuses is reported by name.
"""

import json
import os
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from theseus.audit import audit, gc
from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()


def make_run(root) -> Node:
    """A run with its job record and two flushed segments; returns its seq-0 node."""
    store, first = Store(root), Node.start("hostile.root.run")
    with store.writer() as w:
        w.job(first, "doc/job", "{}")
        w.write(first, {"loss": 1.0})
    with store.writer() as w:
        w.write(first.next(), {"loss": 0.5})
    return first


def run_dir(root, node: Node) -> str:
    return f"{root}/log/name={node.name}/nonce={node.nonce}"


# -- item 3: gc never deletes through a link ---------------------------------------------


def test_gc_never_deletes_through_a_linked_objects_folder(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    first = make_run(root)
    crashed = Node(first.name, first.nonce, 7)  # a folder gc would delete if it were under the root
    os.makedirs(outside / crashed.id)
    (outside / crashed.id / "precious").write_bytes(b"not theseus'")
    os.symlink(outside, root / "objects")

    report = gc(str(root), min_age_s=0)
    assert report.deleted == ()
    assert [rel for rel, _ in report.kept] == ["objects"] and "symbolic link" in report.kept[0][1]
    assert (outside / crashed.id / "precious").read_bytes() == b"not theseus'"
    assert [p.kind for p in audit(str(root)).problems if p.path == "objects"] == ["link"]


def test_gc_reports_a_linked_object_folder_and_keeps_it(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    first = make_run(root)
    os.makedirs(outside / "checkpoint")
    (outside / "checkpoint" / "a").write_bytes(b"x")
    os.makedirs(root / "objects")
    linked = Node(first.name, first.nonce, 7)
    os.symlink(outside, root / "objects" / linked.id)
    crashed = Node(first.name, first.nonce, 8)  # a real unreferenced folder: still collected
    os.makedirs(root / "objects" / crashed.id)

    result = runner.invoke(app, ["gc", str(root), "--min-age", "0"])
    assert result.exit_code == 0, result.output
    assert f"kept objects/{linked.id}" in result.output and "symbolic link" in result.output
    assert f"deleted objects/{crashed.id}" in result.output
    assert (outside / "checkpoint" / "a").read_bytes() == b"x" and os.path.islink(root / "objects" / linked.id)
    assert not os.path.exists(root / "objects" / crashed.id)


def test_compaction_writes_and_deletes_nothing_through_a_link(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    make_run(root)
    os.makedirs(outside)
    (outside / "v-0000000000000000001-00000000.parquet").write_bytes(b"someone else's file")
    os.symlink(outside, root / "view")
    code, out = invoke_cli(["compact", str(root)])
    assert code == 2 and f"{root}/view is a symbolic link" in out
    assert os.listdir(outside) == ["v-0000000000000000001-00000000.parquet"]

    root = tmp_path / "second"
    run = run_dir(root, make_run(root))
    os.rename(run, outside / "run")
    os.symlink(outside / "run", run)  # a run folder that lives elsewhere: its segments are not merged away
    before = sorted(os.listdir(outside / "run"))
    code, out = invoke_cli(["compact", str(root)])
    assert code == 2 and f"{run} is a symbolic link" in out
    assert sorted(os.listdir(outside / "run")) == before


def invoke_cli(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, args, env={"COLUMNS": "400"})
    return result.exit_code, result.output.replace("\n", "")


# -- item 8: only regular files are read ---------------------------------------------------

# Runs in a child so that a regression hangs the child, not the test run: every reader of
# the root, each reporting (kind of error or exit code, whether the message names the bad file).
_READERS = r"""
import json, sys
from typer.testing import CliRunner
from theseus.cli import app
from theseus.store import Store
root, bad = sys.argv[1], sys.argv[2].rsplit("/", 1)[-1]
out = {}
try:
    Store(root).find().all()
    out["find"] = "no error"
except Exception as e:
    out["find"] = [type(e).__name__, bad in str(e)]
for command in (["ls"], ["audit", "--no-checksums"], ["audit"], ["compact"], ["gc", "--min-age", "0"]):
    result = CliRunner().invoke(app, [command[0], root, *command[1:]], env={"COLUMNS": "400"})
    text = result.output + (repr(result.exception) if result.exit_code not in (0, 1, 2) else "")
    out[" ".join(command)] = [result.exit_code, bad in text.replace("\n", "")]
print(json.dumps(out))
"""


def read_everything(root, bad) -> dict:
    done = subprocess.run([sys.executable, "-c", _READERS, str(root), str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_device_named_like_a_segment_hangs_nothing(tmp_path, kind):
    first = make_run(tmp_path)
    bad = f"{run_dir(tmp_path, first)}/s-9999999999999999999-evil0000-000000.parquet"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        os.symlink("/dev/zero", bad)
    found = read_everything(tmp_path, bad)
    assert found["find"] == ["CorruptSegment", True]
    assert found["ls"] == [2, True]
    assert found["audit --no-checksums"] == [1, True] and found["audit"] == [1, True]  # unreadable-segment
    assert found["compact"] == [2, True]
    assert found["gc --min-age 0"] == [2, True]  # refuses: the log cannot be read


def test_a_fifo_listed_in_a_manifest_hangs_no_audit(tmp_path):
    first = make_run(tmp_path)
    folder = tmp_path / "objects" / first.id
    os.makedirs(folder / "checkpoint")
    bad = folder / "checkpoint" / "a"
    os.mkfifo(bad)
    manifest = {"format": "theseus.manifest/1", "files": [{"path": "checkpoint/a", "size": 0, "sha256": "0" * 64}]}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    with Store(tmp_path).writer() as w:
        w.checkpoint(first, f"objects/{first.id}")
    found = read_everything(tmp_path, bad)
    assert found["audit"] == [1, True] and found["audit --no-checksums"][0] in (0, 1)


# -- item 18: temporaries of killed writers -----------------------------------------------


def test_audit_reports_and_gc_removes_old_temporaries(tmp_path):
    first = make_run(tmp_path)
    orphan = f"{run_dir(tmp_path, first)}/.s-0000000000000000001-dead0000-000001.parquet.0123abcd.tmp"
    with open(orphan, "wb") as f:
        f.write(b"half a segment")
    report = audit(str(tmp_path))
    assert report.ok  # invisible to readers: a warning, not an integrity failure
    [found] = [p for p in report.problems if p.kind == "temporary-file"]
    assert found.path == os.path.relpath(orphan, tmp_path) and found.severity == "warning"

    young = gc(str(tmp_path))  # just written: it may belong to a live writer
    assert young.temporaries == () and os.path.exists(orphan)
    assert any(rel == found.path and "temporary" in reason for rel, reason in young.kept)
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    assert gc(str(tmp_path), dry_run=True).temporaries == (found.path,) and os.path.exists(orphan)
    result = runner.invoke(app, ["gc", str(tmp_path)])
    assert result.exit_code == 0 and f"deleted {found.path}" in result.output and "1 temporary file" in result.output
    assert not os.path.exists(orphan)
    assert not [p for p in audit(str(tmp_path)).problems if p.kind == "temporary-file"]
    assert len(Store(tmp_path).find().nonce(first.nonce).all()) == 2  # the log is untouched
