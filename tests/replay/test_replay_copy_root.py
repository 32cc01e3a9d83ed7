"""Copy the root: a root copied anywhere (another folder, gs:// and back) resumes bitwise like the original,
a whole training job runs on a gs:// root, and nothing in a root holds an absolute path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import gcs_bucket_root
from tests.replay._replay_helpers import continue_run, train_run
from theseus.quick import quick
from theseus.replay.verify import verify
from theseus.store import Store

STEPS, MORE = 8, 12  # train 8 steps (checkpoints at 4 and 8), then continue the same lineage to 12


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A trained root, a pristine copy of it taken before anything else happens, and the
    continuation in the original place: (original, snapshot, nonce, (losses, params hash, state hash))."""
    base = tmp_path_factory.mktemp("copy-root")
    orig, snapshot = str(base / "orig"), str(base / "snapshot")
    # one layer, one checkpoint: few files, since the GCS emulator is slow per object
    nonce = train_run(orig, steps=STEPS, checkpoint_interval=STEPS, layers=1)
    shutil.copytree(orig, snapshot)
    reference = continue_run(orig, nonce, MORE)
    assert sorted(reference[0]) == list(range(STEPS + 1, MORE + 1))
    return orig, snapshot, nonce, reference


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


@pytest.mark.slow
def test_cp_r_to_another_absolute_path_continues_bitwise(original, tmp_path):
    orig, snapshot, nonce, reference = original
    there = str(tmp_path / "somewhere" / "else" / "root")
    shutil.copytree(snapshot, there)
    away = orig + ".away"
    os.rename(orig, away)  # nothing may reach back into the original place
    try:
        losses, params, state = continue_run(there, nonce, MORE)
    finally:
        os.rename(away, orig)
    assert losses == reference[0]  # every continued loss, bitwise
    assert (params, state) == reference[1:]  # every parameter and optimizer leaf, bitwise
    # `theseus verify` of the copy: the resumed job's config (12 steps) replays seqs 9..12 bitwise
    tip = Store(there).find().nonce(nonce).seq(STEPS).first()
    assert verify(there, tip.id, steps=MORE - STEPS).status == "bitwise"


@pytest.mark.slow
@pytest.mark.gcs
def test_root_through_gcs_and_back_and_training_on_gcs(original, gcs_emulator, tmp_path, monkeypatch):
    import gcsfs

    _, snapshot, nonce, reference = original
    monkeypatch.setenv("THESEUS_DATA_CACHE", str(tmp_path / "data-cache"))  # where gs:// datasets are fetched
    gs_root = gcs_bucket_root(gcs_emulator)
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
    fs.put(snapshot, gs_root, recursive=True)
    back = str(tmp_path / "back")
    fs.get(gs_root, back, recursive=True)
    assert _files(back) == _files(snapshot)  # the round trip is a complete copy

    assert continue_run(back, nonce, MORE) == reference  # resumed from the copy: bitwise
    assert continue_run(gs_root, nonce, MORE) == reference  # resumed and trained ON gs://: bitwise
    store = Store(gs_root)
    tip = store.find().nonce(nonce).seq(STEPS).first()
    verdict = verify(gs_root, tip.id, steps=MORE - STEPS)  # `theseus verify` on a gs:// root
    assert verdict.status == "bitwise" and verdict.replayed == reference[0]
    # the continued run's checkpoint landed on gs:// and is referenced relatively
    last = store.find().nonce(nonce).checkpoint().last()
    assert last.seq == MORE and store.record(last)["_checkpoint"] == f"objects/{last.id}"
    fs.invalidate_cache()
    assert fs.exists(f"{gs_root}/objects/{last.id}/MANIFEST.json")


def _strings(value):
    """Every string inside a parsed JSON/YAML value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _absolute_paths(root, needles: set[str]) -> tuple[list[str], set[str]]:
    """Files of ``root`` holding one of ``needles`` (raw bytes, or a decoded Parquet/JSON/YAML string),
    or a string value that is an absolute path; and the file extensions seen."""
    found, kinds = [], set()
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            kinds.add(os.path.splitext(name)[1])
            data = open(path, "rb").read()
            found += [f"{rel}: {n}" for n in sorted(needles) if n.encode() in data]
            strings = []
            if name.endswith(".parquet"):  # column chunks may be compressed: read the values
                strings = list(_parquet_strings(path))
            elif name.endswith(".json"):
                strings = list(_strings(json.loads(data)))
            elif name.endswith((".yaml", ".yml")):
                strings = list(_strings(yaml.safe_load(data)))
            found += [f"{rel}: {s!r}" for s in strings
                      if s.startswith(("/", "file://")) or any(n in s for n in needles)]
    return found, kinds


def _parquet_strings(path: str):
    table = pq.read_table(path)
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            yield from (s for s in column.to_pylist() if s is not None)


@pytest.mark.slow
def test_nothing_in_a_root_holds_an_absolute_path(tmp_path):
    root = tmp_path / "abs-root"
    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc").config.data.max_samples = 40
        q.create()()
        q.build("gpt/train/pretrain", "train-gpt")
        q.config.merge_with({
            "data": {"dataset": "pydoc"},
            "architecture": {"n_embd": 32, "n_layers": 1, "n_head": 2, "block_size": 16},
            "training": {"batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 16 * 4, "validation_steps": 1},
            "logging": {"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2},
        })
        q.create()()
    found, kinds = _absolute_paths(root, {str(root), os.path.realpath(root), str(tmp_path)})
    assert found == []
    # what was scanned: the log, the data meta.json, checkpoint sidecars and zarr metadata, the arrays
    assert {".parquet", ".json", ".yaml", ".npy"} <= kinds
    assert os.path.exists(root / "data" / "pydoc" / "meta.json")
    objects = os.listdir(root / "objects")
    assert objects and all(os.path.exists(root / "objects" / o / "job.json") for o in objects)
    # and the scan does catch one
    (root / "objects" / objects[0] / "note.json").write_text(json.dumps({"where": "/elsewhere/x"}))
    assert _absolute_paths(root, {str(root)})[0] == [f"objects/{objects[0]}/note.json: '/elsewhere/x'"]
