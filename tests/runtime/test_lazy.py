"""Lazy DeviceOperations: ownership while pending, sync/cancel/drop, then/zip ordering, the
execution lock. SIMT kernels stand in for tile kernels through ``kernel.op``."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import fearless as fl
from fearless.errors import (
    AliasError,
    ArgumentTypeError,
    ContractError,
    KernelBoundsError,
    LaunchError,
    MovedError,
)
from fearless.runtime.stream import Stream
from tests.runtime.lazy_kernels import add, shifted
from tests.support import random_array

N = 1000
L = add.prepare(N)


def rand(shape, seed=0):
    return random_array(fl.f32, shape, seed)


def inputs(seed=0):
    a, b = rand(N, seed), rand(N, seed + 1)
    return a, b, fl.asarray(a), fl.asarray(b)


def recorder(log, name, result=None, **holds):
    """A DeviceOperation whose enqueue only records its name (for ordering tests)."""
    return fl.DeviceOperation(lambda stream: log.append(name), result, label=name, **holds)


def test_partition_op_sync_unpartition_matches_numpy():
    a, b, x, y = inputs()
    p = fl.full(N, np.nan, fl.f32).partition(256)
    op = add.op(L, x, y, p)
    assert isinstance(op, fl.DeviceOperation) and "pending" in repr(op)
    result = op.sync()
    assert result[0] is x and result[1] is y and result[2] is p  # you get back what you put in
    np.testing.assert_array_equal(p.unpartition().numpy(), a + b)
    assert "done" in repr(op)


def test_nothing_runs_before_sync():
    _, _, x, y = inputs()
    out = fl.full(N, np.nan, fl.f32)
    op = add.op(L, x, y, out)
    assert op.cancel() == (x, y, out)
    assert np.isnan(out.numpy()).all()


def test_a_bad_launch_raises_at_op_time_and_holds_nothing():
    _, _, x, y = inputs()
    p = fl.zeros(N + 1).partition(256)
    with pytest.raises(ContractError, match="covers"):
        add.op(L, x, y, p)            # the output is larger than the launch covers
    with pytest.raises(AliasError, match="overlaps"):
        add.op(L, x, y, x)            # the output aliases an input
    with pytest.raises(ArgumentTypeError, match="only read"):
        add.op(add.prepare(N + 1), p, fl.zeros(N + 1), fl.zeros(N + 1))
    assert p.unpartition().shape == (N + 1,)  # never moved by the refused calls
    x.partition(10)


def test_a_pending_op_holds_its_partition():
    _, _, x, y = inputs()
    p = fl.zeros(N).partition(100)
    op = add.op(L, x, y, p)
    for use in (p.unpartition, lambda: add.op(L, y, x, p)):
        with pytest.raises(MovedError, match="moved into a pending DeviceOperation") as info:
            use()
        assert ".sync()" in str(info.value)
    assert "held by" in repr(p) and p.shape == (N,)  # metadata stays readable
    op.sync()
    p.unpartition()


def test_shared_borrowed_inputs_may_be_read_but_not_written_or_partitioned():
    a, b, x, y = inputs()
    op = add.op(L, x, y, fl.zeros(N).partition(100))
    np.testing.assert_array_equal(x.numpy(), a)               # reading is fine
    np.testing.assert_array_equal(np.asarray(x[:10]), a[:10])
    assert not x.host_view().flags.writeable                   # ... through a read-only view
    other = fl.zeros(N)
    add[L](x, y, other)                                        # ... and as another kernel's input
    np.testing.assert_array_equal(other.numpy(), a + b)
    refusals = {
        "eager output": lambda: add[L](y, y, x),
        "lazy output": lambda: add.op(L, y, y, x[:]),
        "partition": lambda: x.partition(10),
        "dlpack": lambda: np.from_dlpack(x),
    }
    for name, use in refusals.items():
        with pytest.raises(AliasError, match="a pending DeviceOperation \\(kernel 'add'\\) reads "
                                             "this memory") as info:
            use()
        assert ".sync()" in str(info.value), name
    op.sync()
    add[L](y, y, x)  # free again after the sync
    np.testing.assert_array_equal(x.numpy(), b + b)
    assert x.host_view().flags.writeable


def test_a_written_plain_tensor_is_held_exclusively():
    a, b, x, y = inputs()
    out = fl.zeros(N)
    op = add.op(L, x, y, out)
    for use in (out.numpy, out[5:].numpy, out.host_view, lambda: add[L](out, y, fl.zeros(N)),
                lambda: add.op(L, x, y, out)):
        with pytest.raises(AliasError, match="writes this memory"):
            use()
    op.sync()
    np.testing.assert_array_equal(out.numpy(), a + b)


def test_an_operation_runs_once():
    _, _, x, y = inputs()
    op = add.op(L, x, y, fl.zeros(N))
    op.sync()
    for again in (op.sync, lambda: op.sync_on(fl.current_stream()), op.cancel, lambda: op.then(id),
                  lambda: fl.zip(op), lambda: fl.graph(op)):
        with pytest.raises(MovedError, match="already ran"):
            again()


def test_cancel_and_dropping_give_the_arguments_back():
    _, _, x, y = inputs()
    p = fl.zeros(N).partition(100)
    op = add.op(L, x, y, p)
    assert op.cancel()[2] is p
    with pytest.raises(MovedError, match="cancelled"):
        op.sync()
    op = add.op(L, x, y, p)
    del op
    gc.collect()
    x.partition(10)   # no pending reader any more
    p.unpartition()   # no holder any more


def test_a_failing_enqueue_gives_ownership_back():
    x = fl.zeros(8)
    p = fl.zeros(8).partition(4)

    def boom(stream):
        raise RuntimeError("driver said no")
    op = fl.DeviceOperation(boom, (x, p), reads=[x], partitions=[p])
    with pytest.raises(RuntimeError, match="driver said no"):
        op.sync()
    p.unpartition()
    x.partition(4)
    with pytest.raises(MovedError, match="failed"):
        op.sync()


def test_a_deferred_kernel_error_surfaces_at_sync_and_gives_ownership_back():
    x = fl.asarray(rand(64))
    p = fl.zeros(64).partition(16)
    op = shifted.op(shifted.prepare(64), x, p)
    with pytest.raises(KernelBoundsError, match="index 64"):
        op.sync()
    np.testing.assert_array_equal(p.unpartition().numpy()[:63], x.numpy()[1:])
    x.partition(8)


def test_the_constructor_takes_all_or_nothing():
    held, free = fl.zeros(4).partition(2), fl.zeros(4).partition(2)
    first = fl.DeviceOperation(lambda s: None, partitions=[held])
    with pytest.raises(MovedError):
        fl.DeviceOperation(lambda s: None, partitions=[free, held])
    free.unpartition()  # not left held by the refused operation
    first.cancel()


def test_then_runs_in_order_on_one_stream_and_hands_over_ownership():
    a, b, x, y = inputs(5)
    p1, p2 = fl.zeros(N).partition(128), fl.full(N, np.nan, fl.f32).partition(128)
    log = []

    def second(result):
        _, y_, part = result
        log.append("callback")
        return add.op(L, part.unpartition(), y_, p2)   # the first output feeds the second op
    op = add.op(L, x, y, p1).then(second)
    assert log == []                                    # callbacks run at sync, not before
    t1, y_back, p2_back = op.sync()
    assert log == ["callback"] and y_back is y and p2_back is p2
    np.testing.assert_array_equal(t1.numpy(), a + b)
    np.testing.assert_array_equal(p2.unpartition().numpy(), (a + b) + b)


def test_zip_then_first_last_keep_order():
    log = []
    op = fl.zip(recorder(log, "a", 1), recorder(log, "b", 2)).then(
        lambda r: fl.zip(recorder(log, "c", r[0] + r[1]), recorder(log, "d", "x")))
    assert op.sync() == (3, "x") and log == ["a", "b", "c", "d"]
    assert recorder(log, "e", (1, 2, 3)).first().sync() == 1
    assert recorder(log, "f", (1, 2, 3)).last().sync() == 3
    assert recorder(log, "g", 4).then(lambda v: v * 10).sync() == 40  # a plain value ends it
    assert log[4:] == ["e", "f", "g"]


def test_zip_and_then_move_their_operations_in():
    log = []
    a, b = recorder(log, "a"), recorder(log, "b")
    z = fl.zip(a, b)
    for use in (a.sync, b.cancel, lambda: fl.zip(a)):
        with pytest.raises(MovedError, match="fl.zip"):
            use()
    c = recorder(log, "c")
    with pytest.raises(MovedError, match="itself"):
        fl.zip(c, c)
    with pytest.raises(TypeError):
        fl.zip(c, 3)
    chain = c.then(lambda r: None)
    with pytest.raises(MovedError, match="then"):
        c.sync()
    assert z.cancel() == (None, None) and chain.cancel() is None
    assert log == []


def test_sync_on_another_stream():
    a, b, x, y = inputs()
    out = fl.zeros(N)
    add.op(L, x, y, out).sync_on(Stream())
    np.testing.assert_array_equal(out.numpy(), a + b)


def test_no_nested_sync_numpy_or_eager_launch_inside_a_callback():
    _, _, x, y = inputs()
    other = add.op(L, x, y, fl.zeros(N))
    nested = {
        "sync": lambda r: other.sync(),
        "numpy": lambda r: r[0].numpy(),
        "synchronize": lambda r: fl.synchronize(),
        "eager launch": lambda r: add[L](x, y, fl.zeros(N)),
        "graph": lambda r: fl.graph(other),
    }
    for callback in nested.values():
        p = fl.zeros(N).partition(100)
        with pytest.raises(LaunchError, match="inside a running DeviceOperation"):
            add.op(L, x, y, p).then(callback).sync()
        p.unpartition()  # ownership came back although the chain failed
    assert other.cancel()[0] is x  # the refused nested sync did not consume it


def test_the_launcher_api_builds_operations_from_closures():
    # What the tile-kernel launcher will do: check, then hand an enqueue closure over.
    x = fl.asarray(rand(16))
    p = fl.zeros(16).partition(4)
    tensor = p._launch_tensor()
    assert (tensor.shape, p.tile_shape, p.grid) == ((16,), (4,), (4, 1, 1))
    seen = []

    def enqueue(stream):
        seen.append(stream)
        tensor._raw_view()[:] = x._raw_view() * 2   # the "kernel"
    op = fl.DeviceOperation(enqueue, (p, x), reads=[x], partitions=[p], label="kernel 'tile'")
    with pytest.raises(MovedError, match="kernel 'tile'"):
        p._launch_tensor()
    s = Stream()
    assert op.sync_on(s) == (p, x) and seen == [s]
    np.testing.assert_array_equal(p.unpartition().numpy(), x.numpy() * 2)


# -- what an enqueue leaves for the stream to hold ---------------------------------------------

class _Leaf:  # an enqueued leaf: its result is (usually) its argument tuple
    def __init__(self, result, reads=()):
        self._result, self._reads, self._writes, self._partitions = result, list(reads), [], []


def test_a_stream_holds_only_what_its_own_frees_do_not_order():
    """Fearless memory allocated on the stream is freed in its order once dropped: nothing to
    hold. Foreign arrays, memory of another stream (or host memory, no home), and operations
    whose result is not their argument tuple are held until the GPU is done."""
    from fearless.runtime.lazy import _held_by_stream
    home, foreign = fl.zeros(8), np.zeros(3)
    home._storage.home = 0x10
    other2 = fl.zeros(8)
    other2._storage.home = 0x20
    part = fl.zeros(8)
    part._storage.home = 0x10
    p = part.partition(4)
    leaf = _Leaf((p, home, other2, foreign, 2.0, np.float32(1), 3, True, None))
    def held(ops, stream):
        return [id(x) for x in _held_by_stream(ops, stream)]
    assert held([leaf], 0x10) == [id(other2), id(foreign)]
    assert held([leaf], 0x20) == [id(p._tensor), id(home), id(foreign)]
    opaque = _Leaf(None)
    assert held([opaque, _Leaf((home,))], 0x10) == [id(opaque)]
    # a tensor the operation declared it reads but left out of its result is held all the same
    assert held([_Leaf((home,), reads=[other2])], 0x10) == [id(other2)]
    p.unpartition()
