"""Raw readers get the store's answer: docs/reading-a-root.md runs (Polars, pyarrow, pandas and DuckDB,
on local and gs:// roots), and the README's and the tutorial's Polars recipes hold on roots whose nonces
look like numbers (``000777``, ``123456``, ``12e345``).

The roots are built by the page's own ``make_root`` (nodes rewritten out of file order, a key logged as
int and float, NaN, int64 above 2**53, a compaction caught half-way), so the page and these tests read
the same hard cases.
"""

from __future__ import annotations

import glob
import math
import os
from pathlib import Path

import gcsfs
import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.docs import _tutorial_blocks as blocks
from tests.docs.test_tutorials import child_env, run_tutorial
from theseus.store import Store

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reading-a-root.md"
README = REPO / "README.md"
TUTORIAL = REPO / "docs" / "tutorials" / "inspecting-runs.md"
README_ROOT = "/tmp/theseus-root"  # the root the README's snippets use
BUCKET = "theseus-tutorial-bucket"  # the bucket the page's gs:// blocks read (on the emulator)
NUMERIC_NONCES = ["000777", "123456", "12e345"]


def python_block(page: Path, needle: str) -> str:
    """The one runnable python block of ``page`` that contains ``needle``."""
    found = [b.code for b in blocks.parse(page.read_text(encoding="utf-8")) if b.lang == "python" and needle in b.code]
    assert len(found) == 1, f"{page.name}: {len(found)} python blocks contain {needle!r}"
    return found[0]


@pytest.fixture(scope="module")
def make_root():
    """The page's ``make_root(root, nonces)``: a root with one run per nonce and every hard case."""
    namespace: dict = {}
    exec(python_block(PAGE, "def make_root("), namespace)
    return namespace["make_root"]


def same(a: list, b: list) -> bool:
    """Equal lists of values, NaN equal to NaN, types compared too (1 is not 1.0 here)."""
    return len(a) == len(b) and all(
        type(x) is type(y) and (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)))
        for x, y in zip(a, b))


def test_same_compares_values_types_and_nan():
    assert same([1.0, math.nan, None], [1.0, math.nan, None])
    assert not same([1.0], [1]) and not same([math.nan], [1.0]) and not same([1.0], [1.0, 2.0])


@pytest.mark.parametrize("nonces", [[n] for n in NUMERIC_NONCES] + [NUMERIC_NONCES], ids="-".join)
def test_readme_and_tutorial_recipes_read_numeric_nonces_as_strings_and_fold_right(tmp_path, make_root, nonces):
    root = str(tmp_path / "root")
    make_root(root, nonces)

    namespace: dict = {}
    exec(python_block(README, "scan_parquet").replace(README_ROOT, root), namespace)
    log = namespace["log"]
    assert log.schema["name"] == log.schema["nonce"] == pl.String
    assert sorted(log["nonce"].unique()) == nonces

    recipe = blocks.substitute(python_block(TUTORIAL, "scan_parquet"), root, shell=False)
    for nonce in nonces:
        namespace = {"nonce": nonce}
        exec(recipe, namespace)
        loss = namespace["loss"]
        expected = Store(root).find().nonce(nonce).has("train/loss")
        assert loss["seq"].to_list() == [n.seq for n in expected.all()]
        assert same(loss["train/loss"].to_list(), expected.columns(keys=["train/loss"])["train/loss"])


def test_the_pages_roots_hold_every_hard_case(tmp_path, make_root):
    """What the page's recipes are checked on: without these cases a wrong recipe would pass."""
    root = str(tmp_path / "root")
    make_root(root, NUMERIC_NONCES)
    assert sorted(os.listdir(f"{root}/log/name=lab.sweep.lr")) == [f"nonce={n}" for n in NUMERIC_NONCES]
    run = f"{root}/log/name=lab.sweep.lr/nonce=000777"
    files = sorted(glob.glob(f"{run}/*.parquet"))  # the order a glob lists them in
    assert {os.path.basename(f)[:2] for f in files} == {"c-", "s-"}  # merged and merged-from, both present
    records = pl.concat([pl.from_arrow(pq.read_table(f).replace_schema_metadata(None)) for f in files])
    copies = records.group_by("node", "key", "stamp", "writer").len()
    assert copies["len"].max() == 2  # the half-way compaction: each record twice
    # in file order, the last record of some (node, key) is not its latest by (stamp, writer)
    last_listed = records.group_by("node", "key", maintain_order=True).agg(pl.col("stamp").last())
    latest = records.group_by("node", "key").agg(pl.col("stamp").max())
    assert last_listed.join(latest, on=["node", "key"]).filter(pl.col("stamp") != pl.col("stamp_right")).height > 0
    lr = records.filter(pl.col("key") == "lr")
    assert lr["float"].is_not_null().any() and lr["int"].is_not_null().any()
    assert records.filter(pl.col("key") == "train/tokens")["int"].min() > 2**53
    assert records.filter(pl.col("key") == "train/loss")["float"].is_nan().any()


@pytest.mark.slow
@pytest.mark.gcs
def test_reading_a_root_page_runs(tmp_path, gcs_emulator):
    """Every block of the page runs on fresh roots, each fold checked against the store's own answer;
    the gs:// blocks read the emulator (a hang of the pandas route fails on the timeout)."""
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
    if not fs.exists(BUCKET):  # the emulator lives for the session
        fs.mkdir(BUCKET)
    work = tmp_path / "work"
    work.mkdir()
    done = run_tutorial(PAGE, tmp_path / "root", work, child_env(tmp_path), timeout=300)
    tail = "\n".join(line for line in done.stdout.splitlines()[-80:] if "Task was destroyed" not in line)
    assert done.returncode == 0, tail
    assert f"{PAGE}: 13 blocks ran" in done.stdout, tail
