"""Tensor-parallel Linear layers: the sharding math with world_size simulated on the numpy backend
(ShardGroup(["cpu"] * n)), a one-device group as a no-op, and NCCL on machines with several GPUs."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn
from ember.backends import cuda_backend as C
from ember.nn.parallel import ColumnParallelLinear, RowParallelLinear, ShardGroup


def _linear(i, o, seed, bias=True):
    ember.manual_seed(seed)
    return nn.Linear(i, o, bias=bias)


def _x(*shape):
    return ember.tensor(np.random.default_rng(1).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("world", [1, 2, 4])
def test_column_and_row_parallel_equal_linear(world):
    g = ShardGroup(["cpu"] * world)
    lin = _linear(16, 24, 0)
    x = _x(3, 5, 16)
    with ember.no_grad():
        want = lin(x).numpy()
        col = ColumnParallelLinear(lin, g)(x)
        row = RowParallelLinear(lin, g)(x)
        shards = ColumnParallelLinear(lin, g, gather_output=False)(x)
    assert len(shards) == world and all(tuple(s.shape) == (3, 5, 24 // world) for s in shards)
    np.testing.assert_allclose(col.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(row.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world", [2, 4])
def test_swiglu_mlp_with_fused_gate_up_matches_dense(world):
    """Llama's MLP layout: fused gate|up column-parallel (per segment), down row-parallel; one all-reduce."""
    g = ShardGroup(["cpu"] * world)
    h, d = 32, 16
    gate_up, down = _linear(d, 2 * h, 2, bias=False), _linear(h, d, 3, bias=True)
    x = _x(2, 7, d)
    with ember.no_grad():
        gu = gate_up(x)
        want = down(F.silu(gu[..., :h]) * gu[..., h:]).numpy()
        parts = ColumnParallelLinear(gate_up, g, segments=(h, h), gather_output=False)(x)  # (2, 7, 2h/world) each
        acts = [F.silu(p[..., : h // world]) * p[..., h // world:] for p in parts]
        got = RowParallelLinear(down, g, input_is_parallel=True)(acts).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_qkv_shards_hold_whole_heads():
    """Llama's fused q|k|v projection split per segment: shard r gets query heads [rH/w, (r+1)H/w) and the
    matching kv heads, so each shard can run attention on its own heads (o_proj then row-parallel)."""
    H, K, hd, dim, world = 4, 2, 3, 8, 2
    g = ShardGroup(["cpu"] * world)
    qkv = _linear(dim, (H + 2 * K) * hd, 7, bias=False)
    x = _x(1, 5, dim)
    with ember.no_grad():
        full = qkv(x).numpy().reshape(1, 5, H + 2 * K, hd)              # heads: H query, K key, K value
        parts = ColumnParallelLinear(qkv, g, segments=(H * hd, K * hd, K * hd), gather_output=False)(x)
    h, k = H // world, K // world
    for r, p in enumerate(parts):
        want = np.concatenate([full[:, :, r * h:(r + 1) * h], full[:, :, H + r * k:H + (r + 1) * k],
                               full[:, :, H + K + r * k:H + K + (r + 1) * k]], axis=2)
        np.testing.assert_allclose(p.numpy().reshape(1, 5, h + 2 * k, hd), want, rtol=1e-6, atol=1e-6)


def test_one_device_group_is_a_no_op():
    g = ShardGroup(["cpu"])
    parts = [_x(4)]
    assert g.all_reduce(parts)[0] is parts[0]  # nothing copied, nothing summed
    lin = _linear(8, 6, 4)
    col = ColumnParallelLinear(lin, g)
    assert col.shards[0][0].shape == lin.weight.shape
    with ember.no_grad():
        np.testing.assert_array_equal(col(_x(2, 8)).numpy(), lin(_x(2, 8)).numpy())


def test_all_reduce_sums_every_shard():
    g = ShardGroup(["cpu"] * 3)
    parts = [ember.tensor([1.0, 2.0]) * (r + 1) for r in range(3)]
    out = g.all_reduce(parts)
    assert len(out) == 3
    for o in out:
        np.testing.assert_array_equal(o.numpy(), [6.0, 12.0])
    with pytest.raises(ValueError, match="all_reduce got 2 parts for 3 devices"):
        g.all_reduce(parts[:2])


def test_uneven_splits_are_refused_with_sizes():
    g = ShardGroup(["cpu"] * 3)
    with pytest.raises(ValueError, match="output segment of Linear of size 8 does not split evenly over 3 devices"):
        ColumnParallelLinear(_linear(4, 8, 5), g)
    with pytest.raises(ValueError, match="in_features of Linear of size 4 does not split evenly over 3"):
        RowParallelLinear(_linear(4, 9, 5), g)
    with pytest.raises(ValueError, match=r"segments \(4, 3\) do not add up to out_features 9"):
        ColumnParallelLinear(_linear(4, 9, 5), g, segments=(4, 3))
    with pytest.raises(ValueError, match="at least one device"):
        ShardGroup([])


@pytest.mark.skipif(C.device_count() < 2, reason=f"NCCL all-reduce needs 2+ CUDA GPUs; this machine has {C.device_count()}")
def test_nccl_tensor_parallel_on_two_gpus():
    g = ShardGroup(["cuda:0", "cuda:1"])
    lin = _linear(64, 128, 6)
    x = _x(4, 64)
    with ember.no_grad():
        want = lin(x).numpy()
        got = RowParallelLinear(lin, g)(x.to("cuda")).numpy()
    assert g._comms is not None, "NCCL did not load: the summing fallback ran instead"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_parallel_is_nn_code_not_imported_by_ember():
    import subprocess
    import sys
    code = "import sys, ember; ember.zeros(2); assert 'ember.nn.parallel' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
