"""Tensor ownership: partition() moves a tensor, live views block it, unpartition() gives it back.

Values are checked against NumPy on random data through SIMT kernels launched with
``kernel.op`` (tile kernels do not exist yet).
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import fearless as fl
from fearless.errors import AliasError, ArgumentTypeError, LaunchError, MovedError
from tests.runtime.lazy_kernels import add, axpy2d
from tests.support import random_array


def rand(shape, seed=0):
    return random_array(fl.f32, shape, seed)


def test_partition_fixes_tile_shape_and_grid():
    p = fl.zeros((100, 70, 3)).partition((32, 16, 2))
    assert (p.tile_shape, p.grid, p.shape, p.dtype, p.ndim) == \
        ((32, 16, 2), (4, 5, 2), (100, 70, 3), fl.f32, 3)
    assert fl.zeros(10, fl.i32).partition(4).grid == (3, 1, 1)          # an int for 1-d; x only
    assert fl.zeros((5, 64)).partition([5, 64]).grid == (1, 1, 1)      # dim0 -> x, dim1 -> y
    assert fl.zeros((6, 64)).partition((1, 64)).grid == (6, 1, 1)
    assert fl.zeros((0, 8)).partition((4, 4)).grid == (0, 2, 1)
    assert fl.zeros(3).partition(100).grid == (1, 1, 1)                # a tile larger than the tensor
    assert "grid=(3, 1, 1)" in repr(fl.zeros(9).partition(3))


@pytest.mark.parametrize("shape, tile, err, match", [
    ((8, 8), 4, ValueError, "rank 1, but the tensor has shape"),
    ((8,), (4, 4), ValueError, "rank 2"),
    ((8, 8), (4, 0), ValueError, "below 1"),
    ((2, 2, 2, 2), (1, 1, 1, 1), ValueError, "rank 1 to 3"),
    ((), (), ValueError, "rank 1 to 3"),
    ((8,), 2.0, TypeError, "tuple of ints"),
    ((8,), True, TypeError, "tuple of ints"),
])
def test_bad_tile_shapes_are_refused_and_move_nothing(shape, tile, err, match):
    t = fl.zeros(shape)
    with pytest.raises(err, match=match):
        t.partition(tile)
    t.numpy()  # still usable


def test_a_moved_tensor_refuses_every_use_but_its_metadata():
    t = fl.asarray(rand((4, 8)))
    p = t.partition((2, 4))
    assert (t.shape, t.dtype, t.strides, t.ndim, t.size) == ((4, 8), fl.f32, (8, 1), 2, 32)
    uses = {
        "numpy": lambda: t.numpy(), "index": lambda: t[1], "transpose": lambda: t.T,
        "host_view": lambda: t.host_view(), "dlpack": lambda: np.from_dlpack(t),
        "array": lambda: np.asarray(t), "data_ptr": lambda: t.data_ptr(),
        "partition": lambda: t.partition((2, 4)),
        "eager launch": lambda: axpy2d[axpy2d.prepare((4, 8))](2.0, t, fl.zeros((4, 8))),
        "lazy launch": lambda: axpy2d.op(axpy2d.prepare((4, 8)), 2.0, fl.zeros((4, 8)), t),
    }
    for name, use in uses.items():
        with pytest.raises(MovedError) as info:
            use()
        text = str(info.value)
        assert "Tensor(shape=(4, 8), dtype=f32" in text, name
        assert "moved into a Partition by .partition((2, 4))" in text, name
        assert ".sync()" in text and "unpartition()" in text, name
    assert issubclass(MovedError, LaunchError)
    with pytest.raises(MovedError) as info:
        axpy2d[axpy2d.prepare((4, 8))](2.0, t, fl.zeros((4, 8)))
    assert (info.value.kernel, info.value.param) == ("axpy2d", "x")
    assert p.unpartition().shape == (4, 8)


def test_unpartition_returns_a_fresh_tensor_over_the_same_memory_and_ends_the_partition():
    x = rand(1000, seed=1)
    out = fl.full(1000, np.nan, fl.f32)
    p = out.partition(128)
    op = add.op(add.prepare(1000), fl.asarray(x), fl.asarray(x), p)
    assert op.sync()[2] is p
    fresh = p.unpartition()
    assert fresh is not out and fresh.shape == out.shape
    np.testing.assert_array_equal(fresh.numpy(), x + x)
    for use in (p.unpartition, lambda: add.op(add.prepare(1000), fresh, fresh, p)):
        with pytest.raises(MovedError, match="was unpartitioned"):
            use()
    with pytest.raises(MovedError):
        out.numpy()  # the partitioned handle stays moved: use the one unpartition() returned
    assert "unpartitioned" in repr(p)
    q = fresh.partition(10)  # the fresh handle is the only live one: it partitions again
    assert q.grid == (100, 1, 1)


@pytest.mark.parametrize("make_view", [
    lambda t: t[2:], lambda t: t.T, lambda t: t[...], lambda t: t[::-1][1:],
])
def test_a_tensor_with_another_live_view_cannot_be_partitioned(make_view):
    t = fl.zeros((6, 6))
    v = make_view(t)
    with pytest.raises(AliasError, match="another view of its memory is alive") as info:
        t.partition((2, 2))
    assert "Tensor(shape=(6, 6), dtype=f32" in str(info.value)
    with pytest.raises(AliasError):
        v.partition(v.ndim * (1,))  # the view is blocked by t the same way
    del v
    gc.collect()
    t.partition((2, 2))  # the view is gone: t is the only handle


def test_a_view_alone_can_be_partitioned_and_short_lived_views_do_not_count():
    t = fl.asarray(rand(20))
    t[3:].numpy()          # a temporary view dies at once
    v = t[::2]
    del t
    p = v.partition(5)
    assert p.shape == (10,) and p.grid == (2, 1, 1)


def test_an_abandoned_partition_gives_its_tensor_back_even_while_its_handle_lives():
    """Partition.abandon (an autotuner's refused trial): a cancelled operation may still hold
    the partition's hidden handle; it is dead, so the tensor can be partitioned again."""
    t = fl.asarray(random_array(fl.f32, (64,)))
    p = t.partition(16)
    hidden = p._launch_tensor()          # what a cancelled operation's closure keeps
    p.abandon(t)
    again = t.partition(32)              # not "another view of its memory is alive"
    assert again.tile_shape == (32,) and hidden._moved is not None
    with pytest.raises(MovedError):
        p.unpartition()


def test_abandon_gives_back_only_the_tensor_the_partition_was_made_from():
    t = fl.asarray(random_array(fl.f32, (64,)))
    p = t.partition(16)
    other = fl.asarray(random_array(fl.f32, (64,))).partition(16)
    with pytest.raises(MovedError, match="not the tensor this partition was made from"):
        other.abandon(t)          # an unrelated partition cannot bring t back
    assert t._moved is not None
    p.abandon(t)
    assert t._moved is None


def test_host_views_and_dlpack_exports_block_a_partition_while_they_live():
    t = fl.zeros(8)
    h = t.host_view()
    with pytest.raises(AliasError, match="host_view"):
        t.partition(4)
    del h
    exported = np.from_dlpack(t)
    with pytest.raises(AliasError, match="DLPack"):
        t.partition(4)
    del exported
    gc.collect()
    t.partition(4)


def test_read_only_and_self_overlapping_tensors_cannot_be_partitioned():
    frozen = rand(8)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentTypeError, match="read-only"):
        fl.asarray(frozen).partition(4)
    broadcast = fl.asarray(np.lib.stride_tricks.as_strided(rand(4), (3, 4), (0, 4)))
    with pytest.raises(AliasError, match="share memory"):
        broadcast.partition((1, 4))


def test_foreign_memory_is_tracked_per_wrap_only():
    # Documented limit: two wraps of one NumPy array are two unrelated storages to fearless.
    a = np.zeros(8, np.float32)
    first, second = fl.asarray(a), fl.asarray(a)
    first.partition(4)
    second.numpy()


def test_partition_2d_output_through_an_op_matches_numpy():
    x = rand((37, 91), seed=3)
    p = fl.full((37, 91), np.nan, fl.f32).partition((8, 16))
    assert p.grid == (5, 6, 1)
    a, _, back = axpy2d.op(axpy2d.prepare((37, 91)), 1.5, fl.asarray(x), p).sync()
    assert a == 1.5 and back is p
    np.testing.assert_allclose(p.unpartition().numpy(), np.float32(1.5) * x + 1, rtol=1e-6)


@pytest.mark.gpu
def test_cuda_array_interface_of_a_moved_tensor_is_refused():
    t = fl.zeros(16)
    t.partition(4)
    with pytest.raises(MovedError):
        t.__cuda_array_interface__  # noqa: B018 - the property access is the test
