"""Graphs: capture once, replay with inputs changed in place, ownership for the graph's life.

The cpu backend records the enqueue closures and replays them; the ``gpu`` tests check the same
on a CUDA graph (stream capture) and skip without a GPU.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import fearless as fl
from fearless.errors import AliasError, KernelBoundsError, LaunchError, MovedError
from tests.runtime.lazy_kernels import add, axpy2d, shifted
from tests.support import random_array

N = 1000
L = add.prepare(N)


def rand(shape, seed=0):
    return random_array(fl.f32, shape, seed)


def update(t, values):
    """Write ``values`` into ``t`` in place (a kernel on cuda; a host view on cpu)."""
    if t.backend == "cpu":
        t.host_view()[...] = values
    else:
        zero = fl.zeros(t.shape)
        add[add.prepare(t.shape[0])](fl.asarray(values), zero, t)


def test_replays_see_inputs_updated_in_place():
    a, b = rand(N, 1), rand(N, 2)
    x, y, out = fl.asarray(a.copy()), fl.asarray(b), fl.full(N, np.nan, fl.f32)
    g = fl.graph(add.op(L, x, y, out))
    assert isinstance(g, fl.Graph) and g.replays == 0
    assert np.isnan(out.numpy()).all()            # capturing runs nothing
    g.sync()
    np.testing.assert_array_equal(out.numpy(), a + b)
    for step in range(3):
        new = rand(N, 10 + step)
        update(x, new)                            # between replays the inputs are free
        assert g.launch().sync() is None
        np.testing.assert_array_equal(out.numpy(), new + b)
    assert g.replays == 4
    assert g.release() == (x, y, out)


def test_a_graph_holds_its_partitions_until_release():
    x = rand((37, 91), 4)
    xt = fl.asarray(x.copy())
    p = fl.full((37, 91), np.nan, fl.f32).partition((8, 32))
    g = fl.graph(axpy2d.op(axpy2d.prepare((37, 91)), 2.0, xt, p))
    g.sync()
    with pytest.raises(MovedError, match="moved into a Graph") as info:
        p.unpartition()
    assert "graph.release()" in str(info.value)
    update(xt, x * 3)
    g.sync()
    a, xt_back, p_back = g.release()
    assert a == 2.0 and xt_back is xt and p_back is p
    np.testing.assert_allclose(p.unpartition().numpy(), np.float32(2.0) * (x * 3) + 1, rtol=1e-6)


def test_a_then_chain_is_captured_once_and_replayed_whole():
    a, b = rand(N, 5), rand(N, 6)
    x, y = fl.asarray(a.copy()), fl.asarray(b)
    mid, out = fl.zeros(N), fl.full(N, np.nan, fl.f32)
    calls = []

    def second(result):
        calls.append(1)
        return add.op(L, result[2], y, out)       # mid + y
    g = fl.graph(add.op(L, x, y, mid).then(second))
    assert calls == [1]                           # the callback ran at capture
    g.sync()
    np.testing.assert_array_equal(out.numpy(), (a + b) + b)
    update(x, b)
    g.sync()
    assert calls == [1]                           # and never again
    np.testing.assert_array_equal(out.numpy(), (b + b) + b)
    g.release()


def test_a_partition_unpartitioned_during_capture_stays_owned_by_the_graph():
    a, b = rand(N, 7), rand(N, 8)
    x, y, out = fl.asarray(a), fl.asarray(b), fl.zeros(N)
    got = {}

    def second(result):
        got["mid"] = result[2].unpartition()
        return add.op(L, got["mid"], y, out)
    g = fl.graph(add.op(L, x, y, fl.zeros(N).partition(100)).then(second))
    with pytest.raises(AliasError, match="keeps pointers"):
        got["mid"].partition(10)                  # its memory is still written at each replay
    g.sync()
    np.testing.assert_array_equal(out.numpy(), a + b + b)
    g.release()
    got["mid"].partition(10)


def test_graph_ownership_refusals():
    _, _, x, y = fl.zeros(1), fl.zeros(1), fl.asarray(rand(N)), fl.asarray(rand(N, 1))
    out = fl.zeros(N)
    op = add.op(L, x, y, out)
    g = fl.graph(op)
    with pytest.raises(MovedError, match="fl.graph"):
        op.sync()
    with pytest.raises(AliasError, match="keeps pointers"):
        x.partition(10)                           # pinned: the graph's pointers are baked in
    replay = g.launch()
    with pytest.raises(AliasError, match="replay of a Graph"):
        add[L](y, y, x)                           # a pending replay reads x
    with pytest.raises(LaunchError, match="replay is pending"):
        g.release()
    replay.sync()
    with pytest.raises(MovedError, match="already ran"):
        replay.sync()
    g.close()
    for use in (g.launch, g.sync, g.release):
        with pytest.raises(MovedError, match="released"):
            use()
    x.partition(10)
    with pytest.raises(TypeError):
        fl.graph(3)


def test_a_failed_capture_gives_ownership_back():
    p = fl.zeros(N).partition(100)
    x = fl.zeros(N)

    def bad(result):
        raise ValueError("callback failed")
    with pytest.raises(ValueError, match="callback failed"):
        fl.graph(add.op(L, x, x, p).then(bad))
    p.unpartition()
    x.partition(10)


def test_bounds_errors_surface_at_every_replay():
    x, p = fl.asarray(rand(64)), fl.zeros(64).partition(16)
    g = fl.graph(shifted.op(shifted.prepare(64), x, p))
    for _ in range(2):
        with pytest.raises(KernelBoundsError, match="index 64"):
            g.sync()
    g.release()[1].unpartition()


def test_dropping_a_graph_gives_its_partitions_back():
    p = fl.zeros(N).partition(100)
    g = fl.graph(add.op(L, fl.zeros(N), fl.zeros(N), p))
    del g
    gc.collect()
    p.unpartition()


@pytest.mark.gpu
def test_cuda_graph_replays_with_inputs_updated_in_place():
    a, b = rand(N, 1), rand(N, 2)
    x, y, out = fl.asarray(a), fl.asarray(b), fl.full(N, np.nan, fl.f32)
    p = fl.full(N, np.nan, fl.f32).partition(256)
    g = fl.graph(fl.zip(add.op(L, x, y, out), add.op(L, y, y, p)))
    assert np.isnan(out.numpy()).all()
    for step in range(3):
        new = rand(N, 10 + step)
        update(x, new)
        g.sync()
        np.testing.assert_array_equal(out.numpy(), new + b)
    (_, _, out_back), (_, _, p_back) = g.release()
    assert out_back is out and p_back is p
    np.testing.assert_array_equal(p.unpartition().numpy(), b + b)


@pytest.mark.gpu
def test_cuda_graph_then_chain_and_bounds_errors_per_replay():
    a, b = rand(N, 3), rand(N, 4)
    x, y, mid, out = fl.asarray(a), fl.asarray(b), fl.zeros(N), fl.zeros(N)
    g = fl.graph(add.op(L, x, y, mid).then(lambda r: add.op(L, r[2], y, out)))
    g.sync()
    g.sync()
    np.testing.assert_array_equal(out.numpy(), a + b + b)
    g.release()
    bad = fl.graph(shifted.op(shifted.prepare(64), fl.asarray(rand(64)), fl.zeros(64)))
    for _ in range(2):
        with pytest.raises(KernelBoundsError, match="index 64"):
            bad.sync()
    bad.release()


def test_eager_replays_run_in_order_and_report_at_the_sync(backend):
    """graph.replay() enqueues and returns; the outputs read after it hold the last replay's
    values; ten replays, inputs updated in place between them, each ordered on the stream."""
    a, b = rand(N, 5), rand(N, 6)
    x, y, out = fl.asarray(a), fl.asarray(b), fl.full(N, np.nan, fl.f32)
    g = fl.graph(add.op(L, x, y, out))
    for step in range(10):
        new = rand(N, 20 + step)
        update(x, new)
        assert g.replay() is None
    np.testing.assert_array_equal(out.numpy(), new + b)
    assert g.replays == 10
    assert g.release() == (x, y, out)
    with pytest.raises(MovedError, match="released"):
        g.replay()
    bad = fl.graph(shifted.op(shifted.prepare(64), fl.asarray(rand(64)), fl.zeros(64)))
    bad.replay()
    with pytest.raises(KernelBoundsError, match="index 64"):
        fl.synchronize()
    bad.replay()
    with pytest.raises(KernelBoundsError, match="index 64"):
        bad.release()  # the replay in flight reports before the graph ends
    bad.release()


def test_an_eager_replay_is_refused_while_an_operation_holds_its_memory(backend):
    x, y, out = fl.asarray(rand(N, 7)), fl.asarray(rand(N, 8)), fl.zeros(N)
    g = fl.graph(add.op(L, x, y, out))
    pending = add.op(L, y, y, out)  # writes out: the graph may not write it meanwhile
    with pytest.raises(AliasError, match="cannot write it"):
        g.replay()
    pending.cancel()
    g.replay()
    g.release()
