"""``kernel.launch_raw``: a raw launch skips the contract, not the types or the device's limits.

On the cpu backend the limits are those of the sm_80+ GPUs it stands in for
(``runtime.launch.device_limits``): a configuration any GPU refuses is refused here too, with a
ContractError naming the kernel, before anything runs.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.errors import ContractError
from fearless.runtime.launch import device_limits


@fl.kernel
def scale(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = 3.0 * x[i]


@fl.kernel
def scale2d(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = 3.0 * x[r, c]


@fl.kernel
def staged(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t, i = fl.thread.index_in_block(), fl.thread.index_1d()
    buf = fl.shared.dynamic(f32)
    if i < len(x):
        buf[t] = x[i]
    fl.sync_threads()
    if i < len(out):
        out[i] = 3.0 * buf[t]


def _inputs(n: int, seed: int = 0):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return x, fl.asarray(x), fl.full(n, np.nan, f32)


@pytest.mark.parametrize("grid, block, message", [
    ((4.125, 4.125), 128, "grid must be an int or a tuple of ints, got (4.125, 4.125)"),
    (40, 256.0, "block must be an int or a tuple of ints, got 256.0"),
    (40, (256, 1.5), "block must be an int or a tuple of ints"),
    (True, 256, "grid must be an int or a tuple of ints, got True"),
    ("40", 256, "grid must be an int or a tuple of ints"),
    (40, 0, "every block extent must be at least 1, got 0"),
    ((40, -1), 256, "every grid extent must be at least 1"),
    ((), 256, "grid () must have 1 to 3 axes"),
    ((2, 2, 2), (8, 8, 2), "have more than one thread along z, but the kernel does not use "
                           "fl.thread.index_3d()"),
    (5, 2048, "block (2048,) has 2048 threads; the device allows at most 1024"),
    (5, (64, 32), "block (64, 32) has 2048 threads"),
    ((1, 65536), (32, 1), "grid y = 65536 exceeds the device limit 65535"),
    (2**31, 1, f"grid x = {2**31} exceeds the device limit {2**31 - 1}"),
])
def test_a_raw_launch_outside_the_types_or_the_limits_is_refused_before_it_runs(grid, block,
                                                                                message):
    _, x, out = _inputs(10_000)
    with fl.unsafe(), pytest.raises(ContractError) as info:
        scale.launch_raw(grid, block, x, out)
    assert info.value.kernel == "scale"
    assert str(info.value).startswith("kernel 'scale': launch_raw: ")
    assert message in str(info.value)
    assert np.isnan(out.numpy()).all()  # nothing ran


def test_the_cpu_backend_keeps_the_limits_of_the_gpus_it_stands_in_for():
    limits = device_limits("cpu")
    assert limits.max_threads_per_block == 1024
    assert limits.max_block == (1024, 1024, 64)
    assert limits.max_grid == (2**31 - 1, 65535, 65535)


def test_raw_geometry_takes_ints_in_any_spelling_and_still_runs():
    n = 10_000
    xh, x, out = _inputs(n, seed=1)
    with fl.unsafe():
        scale.launch_raw(np.int64(40), [256], x, out)  # 40 x 256 = 10240 threads
    np.testing.assert_allclose(out.numpy(), 3.0 * xh.astype(np.float64), rtol=1e-6)


def test_a_shorter_grid_or_block_is_padded_with_ones_as_cuda_does():
    rng = np.random.default_rng(2)
    xh = rng.standard_normal((6, 40)).astype(np.float32)
    out = fl.full((6, 40), np.nan, f32)
    with fl.unsafe():
        scale2d.launch_raw(3, (16, 6), fl.asarray(xh), out)  # grid (3, 1): 6 rows x 48 cols
    np.testing.assert_allclose(out.numpy(), 3.0 * xh.astype(np.float64), rtol=1e-6)


def test_dynamic_shared_memory_of_a_raw_launch_is_given_and_checked():
    n = 1000
    xh, x, out = _inputs(n, seed=3)
    with fl.unsafe():
        with pytest.raises(ContractError, match="fl.shared.dynamic"):
            staged.launch_raw(4, 256, x, out)
        with pytest.raises(ContractError, match="shared= must be bytes of dynamic shared memory "
                                                "from 0 to the device's 101376, got -4"):
            staged.launch_raw(4, 256, x, out, shared=-4)
        with pytest.raises(ContractError, match="got 200000"):
            staged.launch_raw(4, 256, x, out, shared=200_000)
        assert np.isnan(out.numpy()).all()
        staged.launch_raw(4, 256, x, out, shared=256 * 4)
    np.testing.assert_allclose(out.numpy(), 3.0 * xh.astype(np.float64), rtol=1e-6)
