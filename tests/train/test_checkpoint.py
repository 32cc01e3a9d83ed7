"""Checkpoints: round trips, resharding across device counts, crash safety, partial restore, checksums, GCS."""

import json
import os
import random
import socket
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest
from _subproc import gpt_params, leaf_hashes, result_of, run_python, start_python, train_state

from theseus.train import checkpoint as ckpt
from theseus.train.manifest import MANIFEST, read_manifest

TESTS = str(Path(__file__).parent)


def abstract(state):
    """ShapeDtypeStructs carrying each leaf's sharding: the usual restore target."""
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


@pytest.fixture(scope="module")
def state():
    return train_state(gpt_params())


@pytest.fixture(scope="module")
def saved(state, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("ckpt") / "node")
    ckpt.save(folder, state, {"config.yaml": "model:\n  n_embd: 32\n", "rng.json": b'{"seed": 0}'})
    return folder


def test_round_trip_bit_identical(state, saved):
    restored, report = ckpt.restore(saved, abstract(state), verify=True)
    assert report.exact and sorted(report.restored) == sorted(ckpt.leaf_paths(state))
    assert leaf_hashes(restored) == leaf_hashes(state)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(state)
    assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)
    assert restored["params"]["wpe"]["embedding"].dtype == jnp.bfloat16
    assert restored["step"].dtype == jnp.int32 and int(restored["step"]) == 3


def test_manifest_lists_every_file_and_nothing_is_pickled(saved):
    listed = read_manifest(saved)
    on_disk = {
        os.path.relpath(os.path.join(root, f), saved)
        for root, _, files in os.walk(saved)
        for f in files
    }
    assert on_disk == set(listed) | {MANIFEST}
    assert {"config.yaml", "rng.json", "checkpoint/index.json"} <= set(listed)
    assert "checkpoint/params/blocks_0/mlp/c_fc/kernel/c/0/0" in listed
    index = ckpt.read_index(saved)
    leaf = next(e for e in index["leaves"] if e["path"] == "params/wpe/embedding")
    assert (leaf["shape"], leaf["dtype"]) == ([16, 32], "bfloat16")
    assert json.loads(Path(saved, "checkpoint/index.json").read_text())["format"] == "theseus.checkpoint/1"


def test_restore_onto_shardings_and_arrays(state, saved):
    shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
    from_shardings, _ = ckpt.restore(saved, shardings)
    assert leaf_hashes(from_shardings) == leaf_hashes(state)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, state)
    from_arrays, _ = ckpt.restore(saved, zeros)
    assert leaf_hashes(from_arrays) == leaf_hashes(state)


def test_checkpointer_is_async_and_survives_donation(state, tmp_path):
    before = leaf_hashes(state)
    live = jax.tree_util.tree_map(jnp.copy, state)
    step = jax.jit(lambda s: jax.tree_util.tree_map(lambda x: x + 1, s), donate_argnums=0)
    committed = []
    with ckpt.Checkpointer() as checkpointer:
        checkpointer.save(str(tmp_path / "a"), live, {"job.json": "{}"}, on_commit=committed.append)
        live = step(live)  # training continues and donates the saved buffers
        live = step(live)
        checkpointer.save(str(tmp_path / "b"), live, on_commit=committed.append)  # waits for "a"
        assert committed == [str(tmp_path / "a")]
    assert committed == [str(tmp_path / "a"), str(tmp_path / "b")]
    restored, _ = ckpt.restore(str(tmp_path / "a"), abstract(state), verify=True)
    assert leaf_hashes(restored) == before


def test_background_errors_are_raised_on_next_save_or_wait(state, tmp_path):
    checkpointer = ckpt.Checkpointer()

    def fail(folder):
        raise RuntimeError(f"store refused {folder}")

    checkpointer.save(str(tmp_path / "a"), state, on_commit=fail)  # fails in the background thread
    with pytest.raises(RuntimeError, match="store refused"):
        checkpointer.save(str(tmp_path / "b"), state)
    checkpointer.save(str(tmp_path / "b"), state, on_commit=fail)
    with pytest.raises(RuntimeError, match="store refused"):
        checkpointer.wait()
    checkpointer.wait()  # each error is reported once


def test_unsupported_location_fails_before_writing(state):
    with pytest.raises(ValueError, match="unsupported checkpoint location 'memory://bucket/node'"):
        ckpt.save("memory://bucket/node", state)


def test_interrupted_save_is_cleared_and_redone(state, tmp_path):
    folder = tmp_path / "again"
    ckpt.save(str(folder), state)
    os.remove(folder / MANIFEST)  # as if killed just before the commit
    (folder / "checkpoint" / "stale-garbage").write_bytes(b"x")
    ckpt.save(str(folder), state)
    assert "checkpoint/stale-garbage" not in read_manifest(str(folder))
    assert not (folder / "checkpoint" / "stale-garbage").exists()
    restored, _ = ckpt.restore(str(folder), abstract(state), verify=True)
    assert leaf_hashes(restored) == leaf_hashes(state)


def test_refuses_to_overwrite_a_checkpoint(state, saved):
    with pytest.raises(ValueError, match="already holds a complete checkpoint"):
        ckpt.save(saved, state)


def test_refuses_bad_sidecar_names(state, tmp_path):
    for name in ["../x", "/abs", "MANIFEST.json", "checkpoint/x.json"]:
        with pytest.raises(ValueError, match=r"relative path|reserved"):
            ckpt.save(str(tmp_path / "c"), state, {name: b""})


def test_incomplete_checkpoint_is_refused(state, tmp_path):
    folder = str(tmp_path / "partial")
    ckpt.save(folder, state)
    os.remove(os.path.join(folder, MANIFEST))
    assert not ckpt.is_complete(folder)
    with pytest.raises(FileNotFoundError, match=f"incomplete checkpoint: no MANIFEST.json in {folder}"):
        ckpt.restore(folder, abstract(state))


def test_corrupt_byte_is_found_by_verify(state, tmp_path):
    folder = str(tmp_path / "corrupt")
    ckpt.save(folder, state)
    chunk = os.path.join(folder, "checkpoint/params/blocks_1/attn/c_proj/kernel/c/0/0")
    with open(chunk, "r+b") as f:
        f.seek(17)
        byte = f.read(1)
        f.seek(17)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ValueError, match=r"corrupt file .*params/blocks_1/attn/c_proj/kernel/c/0/0: sha256"):
        ckpt.restore(folder, abstract(state), verify=True)
    restored, _ = ckpt.restore(folder, abstract(state), verify=False)  # without verify the flipped byte goes through
    assert leaf_hashes(restored) != leaf_hashes(state)


def test_missing_chunk_is_found_by_verify(state, tmp_path):
    folder = str(tmp_path / "missing")
    ckpt.save(folder, state)
    os.remove(os.path.join(folder, "checkpoint/step/c"))
    with pytest.raises(ValueError, match=r"missing file .*checkpoint/step/c"):
        ckpt.restore(folder, abstract(state), verify=True)


def test_partial_restore_reports_exactly_the_differences(state, saved):
    params = gpt_params(vocab=80, layers=3)  # wte grows 64 -> 80, blocks_2 is new
    target = train_state(params, step=0)
    changed = {"params/wte/embedding", "opt_state/0/mu/wte/embedding", "opt_state/0/nu/wte/embedding"}
    new = {name for name in ckpt.leaf_paths(target) if "blocks_2" in name}
    with pytest.raises(ValueError, match=r"not in checkpoint: .*blocks_2.*shape/dtype mismatch: .*wte/embedding"):
        ckpt.restore(saved, target)

    restored, report = ckpt.restore(saved, target, partial=True)
    assert set(report.missing) == new
    assert set(report.mismatched) == changed
    assert "(64, 32) float32" in report.mismatched["params/wte/embedding"]
    assert report.unused == []
    assert set(report.restored) == set(ckpt.leaf_paths(state)) - changed
    ours, theirs, init = leaf_hashes(restored), leaf_hashes(state), leaf_hashes(target)
    for name in report.restored:
        assert ours[name] == theirs[name], name
    for name in new | changed:
        assert ours[name] == init[name], name
    assert "missing from checkpoint (initialised)" in str(report)

    smaller = {"params": {"wte": state["params"]["wte"]}}
    _, report = ckpt.restore(saved, abstract(smaller), partial=True)
    assert report.restored == ["params/wte/embedding"] and "step" in report.unused


def test_partial_restore_needs_a_value_for_what_it_cannot_restore(saved):
    target = {"params": {"new": jax.ShapeDtypeStruct((2,), jnp.float32)}}
    with pytest.raises(ValueError, match="cannot restore params/new .* holds no value"):
        ckpt.restore(saved, target, partial=True)


def test_streamed_views_are_saved_as_their_contiguous_copies_and_read_back_checked(tmp_path):
    import ml_dtypes
    import numpy as np

    from theseus.train import manifest as mf

    matrix = np.random.default_rng(0).standard_normal((300, 70)).astype(ml_dtypes.bfloat16)
    leaves = {"params/kernel": matrix.T, "params/bias": np.arange(5, dtype=np.float32)[::2], "step": np.int32(3)}
    folders = {}
    for kind, transform in (("views", lambda a: a), ("copies", np.ascontiguousarray)):
        folders[kind] = str(tmp_path / kind)  # a scalar stays one (ascontiguousarray makes it 1-d)
        ckpt.save_streamed(folders[kind], iter([(k, transform(v) if np.ndim(v) else v) for k, v in leaves.items()]))
    files = [{e.path: e for e in read_manifest(folders[kind]).values()} for kind in folders]
    assert [e.sha256 for e in files[0].values()] == [e.sha256 for e in files[1].values()]  # the same bytes
    sealed = mf.Sealed(folders["views"])
    entries = {e["path"]: e for e in ckpt.read_index(folders["views"])["leaves"]}
    for name, value in leaves.items():
        back = ckpt.read_leaf(sealed, entries[name])
        assert back.dtype == value.dtype and back.tobytes() == np.ascontiguousarray(value).tobytes()
    chunk = Path(folders["views"]) / "checkpoint/params/kernel/c/0/0"
    raw = bytearray(chunk.read_bytes())
    raw[100] ^= 1
    chunk.write_bytes(bytes(raw))
    with pytest.raises(mf.DamagedFolder, match="corrupt file"):
        ckpt.read_leaf(mf.Sealed(folders["views"]), entries["params/kernel"])


def test_docstring_examples_run():
    import doctest

    from theseus.train import manifest

    for module in (ckpt, manifest):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted >= 3, module.__name__  # the file helpers are store.fs's


# --- several devices, in subprocesses -------------------------------------------------

SAVE_FSDP_8 = """
import sys; sys.path.insert(0, {tests!r})
import jax
from _subproc import gpt_params, train_state, leaf_hashes
from theseus.train import checkpoint as ckpt
from theseus.train.sharding import ShardConfig, make_mesh, state_shardings

state = train_state(gpt_params())
state = jax.device_put(state, state_shardings(state, ShardConfig(fsdp=True), make_mesh()))
kernel = state["params"]["blocks_0"]["mlp"]["c_fc"]["kernel"]
assert kernel.addressable_shards[0].data.shape == (32, 16), kernel.sharding
ckpt.save({folder!r}, state, {{"config.yaml": "x: 1"}})
emit(leaf_hashes(state))
"""

RESTORE = """
import sys; sys.path.insert(0, {tests!r})
import jax
from _subproc import gpt_params, train_state, leaf_hashes
from theseus.train import checkpoint as ckpt
from theseus.train.sharding import ShardConfig, make_mesh, state_shardings

shapes = jax.eval_shape(lambda: train_state(gpt_params()))
shardings = state_shardings(shapes, ShardConfig(tp={tp}), make_mesh(tp={tp}))
target = jax.tree_util.tree_map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
restored, report = ckpt.restore({folder!r}, target, verify=True)
same = jax.tree_util.tree_map(lambda a, sh: a.sharding == sh, restored, shardings)
kernel = restored["params"]["blocks_0"]["mlp"]["c_fc"]["kernel"]
emit({{"hashes": leaf_hashes(restored), "same_sharding": all(jax.tree_util.tree_leaves(same)),
       "devices": jax.device_count(), "c_fc_shard": list(kernel.addressable_shards[0].data.shape)}})
"""


def test_fsdp_on_8_devices_restores_on_1_device_and_on_tp_mesh(tmp_path):
    folder = str(tmp_path / "fsdp8")
    saved = run_python(SAVE_FSDP_8.format(tests=TESTS, folder=folder), devices=8)
    assert len(read_manifest(folder)) > 100
    # the kernel [32, 128] was saved as 8 chunks of [32, 16]
    assert ckpt.read_index(folder)["leaves"][0]["path"] == "opt_state/0/count"
    kernel = next(e for e in ckpt.read_index(folder)["leaves"] if e["path"] == "params/blocks_0/mlp/c_fc/kernel")
    assert kernel["chunk_shape"] == [32, 16]

    one = start_python(RESTORE.format(tests=TESTS, folder=folder, tp=1), devices=1)
    tp = start_python(RESTORE.format(tests=TESTS, folder=folder, tp=2), devices=8)
    on_one, on_tp = result_of(one), result_of(tp)
    assert on_one["devices"] == 1 and on_tp["devices"] == 8
    assert on_one["hashes"] == saved and on_tp["hashes"] == saved
    assert on_one["same_sharding"] and on_tp["same_sharding"]
    assert on_tp["c_fc_shard"] == [32, 64]  # TP over 2: output dim split


MULTIHOST = """
import sys; sys.path.insert(0, {tests!r})
import jax
jax.distributed.initialize("127.0.0.1:{port}", num_processes=2, process_id={pid})
from _subproc import gpt_params, train_state
from theseus.train import checkpoint as ckpt
from theseus.train.sharding import ShardConfig, make_mesh, state_shardings

host = train_state(gpt_params())  # same values on both processes (deterministic)
shardings = state_shardings(host, ShardConfig(fsdp=True), make_mesh())
state = jax.tree_util.tree_map(
    lambda x, sh: jax.make_array_from_callback(x.shape, sh, lambda idx, x=x: jax.device_get(x)[idx]), host, shardings)
committed = []
with ckpt.Checkpointer(barrier_timeout_s=120) as checkpointer:
    checkpointer.save({folder!r}, state, {{"job.json": "{{}}"}}, on_commit=committed.append)
emit({{"process": jax.process_index(), "devices": jax.device_count(), "committed": committed}})
"""


@pytest.mark.slow
def test_two_processes_save_their_own_shards(tmp_path, state):
    folder = str(tmp_path / "multihost")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = [MULTIHOST.format(tests=TESTS, port=port, pid=pid, folder=folder) for pid in (0, 1)]
    procs = [start_python(c, devices=4) for c in code]
    results = [result_of(p, timeout=240) for p in procs]
    assert [r["devices"] for r in results] == [8, 8]
    assert [r["committed"] for r in results] == [[folder], [folder]]
    listed = read_manifest(folder)
    assert {"checkpoint/process-00000.json", "checkpoint/process-00001.json"} <= set(listed)
    mine = json.loads(Path(folder, "checkpoint/process-00001.json").read_text())["files"]
    assert "checkpoint/params/wte/embedding/c/7/0" in {f["path"] for f in mine}  # FSDP row block 7 is on process 1
    restored, _ = ckpt.restore(folder, abstract(state), verify=True)
    assert leaf_hashes(restored) == leaf_hashes(state)


# --- crashes ---------------------------------------------------------------------------

SAVE_LOOP = """
import sys; sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp
from _subproc import train_state
from theseus.train import checkpoint as ckpt

state = train_state({{"a": jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024),
                      "b": jnp.ones((512, 1024), jnp.bfloat16),
                      "c": jnp.linspace(0, 1, 4 * 256 * 1024).reshape(4, 256, 1024)}})
print("ready", flush=True)
with ckpt.Checkpointer() as checkpointer:
    for i in range(1000):
        checkpointer.save(f"{root}/ckpt-{{i:04d}}", state, {{"job.json": "{{}}"}},
                          on_commit=lambda f: print("saved", f, flush=True))
"""


def _largish_state():
    return train_state({
        "a": jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024),
        "b": jnp.ones((512, 1024), jnp.bfloat16),
        "c": jnp.linspace(0, 1, 4 * 256 * 1024).reshape(4, 256, 1024),
    })


@pytest.mark.slow
def test_kill_9_during_saves_leaves_complete_or_refused_folders(tmp_path):
    rng = random.Random(1234)
    runs = 0
    # SIGKILL the saving process at random moments: at least 3 times, and until one kill
    # has landed mid-save (a kill between two saves leaves no folder behind)
    while runs < 3 or (runs < 8 and all(ckpt.is_complete(str(p)) for p in tmp_path.glob("run*/ckpt-*"))):
        proc = start_python(SAVE_LOOP.format(tests=TESTS, root=str(tmp_path / f"run{runs}")), devices=1)
        assert proc.stdout.readline().strip() == "ready"
        assert proc.stdout.readline().startswith("saved")  # at least one complete checkpoint
        time.sleep(rng.uniform(0.0, 0.4))
        proc.kill()
        proc.communicate()
        runs += 1

    state = _largish_state()
    expected = leaf_hashes(state)
    complete = incomplete = 0
    for folder in sorted(str(p) for p in tmp_path.glob("run*/ckpt-*")):
        if ckpt.is_complete(folder):
            restored, _ = ckpt.restore(folder, abstract(state), verify=True)
            assert leaf_hashes(restored) == expected, folder
            complete += 1
        else:
            with pytest.raises(FileNotFoundError, match="incomplete checkpoint: no MANIFEST.json"):
                ckpt.restore(folder, abstract(state))
            incomplete += 1
    assert complete >= runs and 1 <= incomplete <= runs


# --- GCS (emulator) ----------------------------------------------------------------------


GCS_ROUND_TRIP = """
import sys; sys.path.insert(0, {tests!r})
import gcsfs, jax
from _subproc import gpt_params, train_state, leaf_hashes
from theseus.train import checkpoint as ckpt
from theseus.train.manifest import read_manifest

gcsfs.GCSFileSystem().mkdir("theseus-test-ckpt")
state = train_state(gpt_params(layers=0))
folder = "gs://theseus-test-ckpt/root/objects/node"
ckpt.save(folder, state, {{"config.yaml": "a: 1"}})
target = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
restored, report = ckpt.restore(folder, target, verify=True)
listed = gcsfs.GCSFileSystem().find("theseus-test-ckpt/root/objects/node")
emit({{"same": leaf_hashes(restored) == leaf_hashes(state), "exact": report.exact,
       "objects": len(listed), "manifest": len(read_manifest(folder))}})
"""


@pytest.mark.gcs
def test_gcs_round_trip(gcs_emulator):
    env = {
        "STORAGE_EMULATOR_HOST": gcs_emulator,  # gcsfs
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "TENSORSTORE_GCS_HTTP_URL": gcs_emulator,  # TensorStore's gcs driver
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # no credential lookup
    }
    out = run_python(GCS_ROUND_TRIP.format(tests=TESTS), devices=1, env=env)
    assert out["same"] and out["exact"]
    assert out["objects"] == out["manifest"] + 1


def test_a_streamed_save_with_several_leaves_in_flight_restores_them_and_a_failure_commits_nothing(tmp_path,
                                                                                                  monkeypatch):
    import numpy as np

    monkeypatch.setattr(ckpt, "_STREAM_BYTES", 1000)  # a few leaves written and hashed at once, the oldest waited
    rng = np.random.default_rng(0)
    leaves = {f"params/w{i}": rng.standard_normal((i + 1, 100)).astype(np.float32) for i in range(6)}
    folder = str(tmp_path / "ckpt")
    ckpt.save_streamed(folder, iter([*leaves.items(), ("step", np.int32(3))]))
    target = {"params": {k.split("/")[1]: jnp.zeros(v.shape) for k, v in leaves.items()}, "step": jnp.int32(0)}
    restored, _ = ckpt.restore(folder, target)
    assert all(np.array_equal(restored["params"][k.split("/")[1]], v) for k, v in leaves.items())
    assert int(restored["step"]) == 3

    def failing():
        yield from leaves.items()
        raise RuntimeError("the source ended early")

    broken = str(tmp_path / "broken")
    with pytest.raises(RuntimeError, match="ended early"):
        ckpt.save_streamed(broken, failing())
    assert not ckpt.is_complete(broken) and not os.path.exists(os.path.join(broken, MANIFEST))
