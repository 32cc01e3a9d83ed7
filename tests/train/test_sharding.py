"""Sharding rules: mesh construction, FSDP / ZeRO-1 / TP layouts, bad layouts, topology description."""

import jax
import jax.numpy as jnp
import pytest
from _subproc import gpt_params, run_python
from jax.sharding import PartitionSpec as P

from theseus.train.sharding import (
    ShardConfig,
    describe,
    key_path_names,
    make_mesh,
    param_partition_spec,
    state_shardings,
)


def test_make_mesh_single_device():
    mesh = make_mesh()
    assert mesh.axis_names == ("data", "model")
    assert dict(mesh.shape) == {"data": 1, "model": 1}


def test_make_mesh_rejects_tp_not_dividing_devices():
    with pytest.raises(ValueError, match="tp=2 does not divide the device count 1"):
        make_mesh(tp=2)


def test_shard_config_rejects_tp_not_dividing_n_head():
    with pytest.raises(ValueError, match="tp=4 does not divide n_head=6"):
        ShardConfig(tp=4, n_head=6)


def test_config_and_mesh_must_agree():
    with pytest.raises(ValueError, match="tp=2 but the mesh's model axis has 1"):
        param_partition_spec(("wte", "embedding"), (8, 4), ShardConfig(tp=2), make_mesh())


def test_key_path_names_of_optax_state():
    import optax

    state = {"opt_state": optax.adamw(1e-3).init({"w": jnp.zeros(2)})}
    names = [key_path_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    assert names == [("opt_state", "0", "count"), ("opt_state", "0", "mu", "w"), ("opt_state", "0", "nu", "w")]


def test_single_device_everything_replicated():
    state = {"params": gpt_params(), "step": jnp.int32(0)}
    shardings = state_shardings(state, ShardConfig(fsdp=True), make_mesh())
    assert all(s.spec == P(*[None] * len(s.spec)) for s in jax.tree_util.tree_leaves(shardings))


def test_describe_single_process():
    assert describe(make_mesh(), ShardConfig()) == {
        "shard": {"tp": 1, "fsdp": False, "zero": True},
        "device_count": 1,
        "local_device_count": 1,
        "process_count": 1,
        "is_main": True,
        "replicas": 1,
        "local_replicas": 1,
    }


def test_docstring_examples_run():
    import doctest

    from theseus.train import sharding

    result = doctest.testmod(sharding)
    assert result.failed == 0 and result.attempted > 5


# One subprocess with 8 CPU devices checks every layout; each case reports, per leaf,
# the spec and the shape of the first addressable shard after device_put.
LAYOUTS = """
import sys
sys.path.insert(0, {tests!r})
import jax
from _subproc import gpt_params, train_state
from theseus.train.checkpoint import leaf_paths
from theseus.train.sharding import ShardConfig, make_mesh, state_shardings, describe

state = train_state(gpt_params(vocab=64, block=16, d=32, layers=1))
out = {{}}
cases = [("fsdp", 1, True, False), ("zero", 1, False, True), ("tp", 2, False, True), ("none", 1, False, False)]
for label, tp, fsdp, zero in cases:
    cfg, mesh = ShardConfig(tp=tp, fsdp=fsdp, zero=zero), make_mesh(tp=tp)
    placed = jax.device_put(state, state_shardings(state, cfg, mesh))
    out[label] = {{
        name: [list(leaf.sharding.spec), list(leaf.addressable_shards[0].data.shape)]
        for name, leaf in zip(leaf_paths(placed), jax.tree_util.tree_leaves(placed))
    }}
    out[label + "/describe"] = describe(mesh, cfg)

errors = {{}}
bad = train_state(gpt_params(vocab=64, block=16, d=32, layers=1, ffn=30))
try:
    state_shardings(bad, ShardConfig(tp=4), make_mesh(tp=4))
except ValueError as e:
    errors["ffn"] = str(e)
try:
    make_mesh(tp=3)
except ValueError as e:
    errors["mesh"] = str(e)
out["errors"] = errors
emit(out)
"""


@pytest.fixture(scope="module")
def layouts(request):
    return run_python(LAYOUTS.format(tests=str(request.path.parent)), devices=8)


def test_fsdp_shards_largest_divisible_dim_over_data(layouts):
    fsdp = layouts["fsdp"]
    assert fsdp["params/wte/embedding"] == [["data", None], [8, 32]]  # [64, 32]: 64 is the largest
    assert fsdp["params/blocks_0/mlp/c_fc/kernel"] == [[None, "data"], [32, 16]]  # [32, 128]
    assert fsdp["params/blocks_0/mlp/c_proj/kernel"] == [["data", None], [16, 32]]  # [128, 32]
    assert fsdp["params/blocks_0/ln_1/scale"] == [["data"], [4]]
    assert fsdp["opt_state/0/mu/blocks_0/mlp/c_fc/kernel"] == [[None, "data"], [32, 16]]
    assert fsdp["opt_state/0/count"] == [[], []]
    assert fsdp["step"] == [[], []]


def test_zero1_replicates_params_and_shards_adam_moments(layouts):
    zero = layouts["zero"]
    assert zero["params/blocks_0/mlp/c_fc/kernel"] == [[None, None], [32, 128]]
    assert zero["params/wte/embedding"] == [[None, None], [64, 32]]
    assert zero["opt_state/0/mu/blocks_0/mlp/c_fc/kernel"] == [[None, "data"], [32, 16]]
    assert zero["opt_state/0/nu/wte/embedding"] == [["data", None], [8, 32]]
    assert zero["opt_state/0/nu/wpe/embedding"] == [[None, "data"], [16, 4]]  # bfloat16 [16, 32]


def test_tensor_parallel_megatron_layout(layouts):
    tp = layouts["tp"]  # mesh 4 (data) x 2 (model), ZeRO-1
    assert tp["params/blocks_0/mlp/c_fc/kernel"] == [[None, "model"], [32, 64]]
    assert tp["params/blocks_0/mlp/c_fc/bias"] == [["model"], [64]]
    assert tp["params/blocks_0/mlp/c_proj/kernel"] == [["model", None], [64, 32]]
    assert tp["params/blocks_0/mlp/c_proj/bias"] == [[None], [32]]
    assert tp["params/blocks_0/attn/c_attn/kernel"] == [[None, "model"], [32, 48]]
    assert tp["params/blocks_0/attn/c_attn/bias"] == [["model"], [48]]
    assert tp["params/blocks_0/attn/c_proj/kernel"] == [["model", None], [16, 32]]
    assert tp["params/wte/embedding"] == [[None, None], [64, 32]]
    # ZeRO-1 on top of TP: the moment keeps the TP dim and adds "data" on a free one
    assert tp["opt_state/0/mu/blocks_0/mlp/c_fc/kernel"] == [["data", "model"], [8, 64]]
    assert tp["opt_state/0/mu/blocks_0/mlp/c_proj/kernel"] == [["model", "data"], [64, 8]]


def test_no_sharding_when_neither_fsdp_nor_zero(layouts):
    assert layouts["none"]["opt_state/0/mu/wte/embedding"] == [[None, None], [64, 32]]


def test_bad_layouts_name_leaf_and_shape(layouts):
    err = layouts["errors"]["ffn"]
    # c_fc's bias [30] comes first in flatten order; its kernel [32, 30] fails the same way
    assert err.startswith("cannot shard params/blocks_0/mlp/c_fc/bias with shape (30,)"), err
    assert "not divisible by tp=4" in err
    assert "tp=3 does not divide the device count 8" in layouts["errors"]["mesh"]


def test_describe_multi_device(layouts):
    assert layouts["tp/describe"]["replicas"] == 4
    assert layouts["tp/describe"]["local_replicas"] == 4
    assert layouts["tp/describe"]["device_count"] == 8
    assert layouts["fsdp/describe"]["shard"] == {"tp": 1, "fsdp": True, "zero": False}
