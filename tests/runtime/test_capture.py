"""fl.capture(): a block's eager launches recorded into a Graph and replayed.

Most cases run on both backends (the cuda case is marked ``gpu``): on the cpu backend the
capture records the enqueue closures, on cuda it is a stream capture. Values are small
integers, so every sum is exact in f32 and the reference is exact.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.errors import AliasError, KernelBoundsError, LaunchError, MovedError
from tests.runtime.lazy_kernels import add, shifted
from tests.support import BACKENDS, exact_ints

N = 1000
L = add.prepare(N)


@ft.kernel
def affine(o: ft.Out[fl.f32], x: ft.In[fl.f32], s: fl.f32):
    o.store(ft.load_like(x, o) * s + 1.0)


@fl.kernel
def gather(x: fl.Slice[fl.f32], pos: fl.Slice[fl.i32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[pos[0]] + x[i]


def ints(shape, seed):
    return exact_ints(shape, seed)


def write(t, values):
    """Write ``values`` into ``t`` in place between replays (a host view on cpu, a kernel on
    cuda)."""
    if t.backend == "cpu":
        t.host_view()[...] = values
    else:
        add[add.prepare(t.shape[0])](fl.asarray(values), fl.zeros(t.shape, t.dtype), t)


def write_pos(pos, value):
    if pos.backend == "cpu":
        pos.host_view()[0] = value
    else:
        from fearless.runtime import memory
        memory.copy_host_to_device(pos.data_ptr(), np.array([value], np.int32), 4)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_captured_launches_run_at_each_replay_not_at_capture(backend):
    a, b = ints(N, 1), ints(N, 2)
    x, y = fl.asarray(a.copy()), fl.asarray(b)
    pos = fl.asarray(np.array([3], np.int32))
    out = fl.full(N, np.nan, fl.f32)
    with fl.capture() as g:
        mid = fl.full(N, np.nan, fl.f32)                # a temporary made inside the block
        add[L](x, y, mid)                               # eager SIMT launch: captured
        part = fl.full(N, np.nan, fl.f32).partition(128)
        affine(part, mid, 2.0).enqueue()                # enqueued tile operation: captured
        tmp = part.unpartition()
        gather[gather.prepare(N)](tmp, pos, out)
        ptrs = (mid.data_ptr(), tmp.data_ptr())
    assert isinstance(g, fl.Graph) and g.replays == 0
    for t in (mid, tmp, out):
        assert np.isnan(t.numpy()).all()                # nothing ran at capture
    for step in range(4):
        a2 = ints(N, 10 + step)
        write(x, a2)                                    # inputs change in place between replays
        write_pos(pos, step * 7)
        g.replay()
        want_tmp = (a2 + b) * 2 + 1
        np.testing.assert_array_equal(mid.numpy(), a2 + b)
        np.testing.assert_array_equal(tmp.numpy(), want_tmp)
        np.testing.assert_array_equal(out.numpy(), want_tmp[step * 7] + want_tmp)
    assert (mid.data_ptr(), tmp.data_ptr()) == ptrs and g.replays == 4
    g.sync()
    assert g.release() is None


def _alternating_adds(v, one, steps: int, launch, tile: int):
    """``steps`` eager launches, tile (even steps) and SIMT (odd) alternately, each adding 1 to
    the previous one's output into a new tensor; returns the last output."""
    n = v.shape[0]
    for k in range(steps):
        if k % 2:
            nxt = fl.empty(n)
            add[launch](v, one, nxt)
        else:
            p = fl.empty(n).partition(tile)
            affine(p, v, 1.0).enqueue()
            nxt = p.unpartition()
        v = nxt
    return v


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_replays_keep_the_order_of_the_block(backend):
    """Each launch reads the one before: 40 steps, alternately SIMT and tile, each +1."""
    a = ints(N, 3)
    x = fl.asarray(a.copy())  # a stays the reference: x is written in place below
    one = fl.ones(N)
    with fl.capture() as g:
        last = _alternating_adds(x, one, 40, L, 256)
    for r in range(3):
        write(x, a + r)
        g.replay()
        np.testing.assert_array_equal(last.numpy(), a + r + 40)
    g.release()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_waits_and_host_reads_are_refused_inside_the_block(backend):
    x, out = fl.asarray(ints(N, 4)), fl.zeros(N)
    other = fl.graph(add.op(L, x, x, out))
    with fl.capture() as g:
        add[L](x, x, out)
        op = add.op(L, x, x, fl.zeros(N))
        refused = [lambda: out.numpy(), fl.synchronize, fl.current_stream().synchronize,
                   op.sync, other.replay, other.sync, g.replay, lambda: fl.graph(op),
                   lambda: fl.stream(fl.Stream()).__enter__(), lambda: fl.capture().__enter__(),
                   fl.Event, lambda: fl.current_stream().wait(fl.Stream())]
        if backend == "cpu":
            refused.append(out.host_view)
        for use in refused:
            with pytest.raises(LaunchError, match="fl.capture|being captured"):
                use()
        op.cancel()
    g.replay()
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 2)
    g.release()
    other.release()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_an_exception_in_the_block_leaves_no_graph(backend):
    x, out = fl.asarray(ints(N, 5)), fl.full(N, np.nan, fl.f32)
    before = fl.current_stream()
    with pytest.raises(ValueError, match="inside the block"):
        with fl.capture() as g:
            add[L](x, x, out)
            raise ValueError("inside the block")
    assert fl.current_stream() is before
    for use in (g.replay, g.sync, g.release):
        with pytest.raises(MovedError, match="never made"):
            use()
    assert np.isnan(out.numpy()).all()                # the captured launch never ran
    out.partition(100).unpartition()                  # nothing pinned
    out = fl.zeros(N)
    add[L](x, x, out)                                 # eager launches run again
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 2)


def test_the_graph_pins_what_it_touches_until_release():
    x, out = fl.asarray(ints(N, 6)), fl.zeros(N)
    with fl.capture() as g:
        part = fl.zeros(N).partition(128)
        add[L](x, x, out)
        affine(part, x, 3.0).enqueue()
    assert "Graph" in repr(g) and "0 replays" in repr(g)
    for t in (x, out):
        with pytest.raises(AliasError, match="keeps pointers"):
            t.partition(100)
    fresh = part.unpartition()                         # the partition came back at enqueue
    with pytest.raises(AliasError, match="keeps pointers"):
        fresh.partition(100)
    pending = add.op(L, x, x, out)                      # a pending write of the graph's output
    with pytest.raises(AliasError, match="cannot write it"):
        g.replay()
    pending.cancel()
    g.replay()
    np.testing.assert_array_equal(fresh.numpy(), x.numpy() * 3 + 1)
    g.release()
    for use in (g.replay, g.release):
        with pytest.raises(MovedError, match="released"):
            use()
    x.partition(100)
    fresh.partition(100)


def test_a_dropped_graph_unpins():
    out = fl.zeros(N)
    with fl.capture() as g:
        add[L](fl.ones(N), fl.ones(N), out)
    del g
    gc.collect()
    out.partition(100)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_bounds_errors_surface_at_each_replays_sync(backend):
    x, out = fl.asarray(ints(64, 7)), fl.zeros(64)
    with fl.capture() as g:
        shifted[shifted.prepare(64)](x, out)
    for _ in range(2):
        g.replay()
        with pytest.raises(KernelBoundsError, match="index 64"):
            fl.synchronize()
    g.release()


@pytest.mark.gpu
def test_a_300_launch_capture_replayed_100_times():
    """A decode-step-sized graph: 300 launches (SIMT and tile alternating, each +1 on the
    previous one's output), temporaries allocated inside, a position read from device
    memory; replayed 100 times with the input and position written in place."""
    n = 4096
    launch = add.prepare(n)
    a = ints(n, 8)
    x, one = fl.asarray(a.copy()), fl.ones(n)
    pos = fl.asarray(np.array([0], np.int32))
    out = fl.full(n, np.nan, fl.f32)
    with fl.capture() as g:
        v = _alternating_adds(x, one, 299, launch, 512)
        gather[gather.prepare(n)](v, pos, out)
    assert np.isnan(out.numpy()).all()
    for r in range(100):
        write(x, a + r)
        write_pos(pos, (r * 37) % n)
        g.replay()
        if r % 10 == 9 or r < 2:
            want = a + r + 299
            np.testing.assert_array_equal(out.numpy(), want[(r * 37) % n] + want)
    assert g.replays == 100
    g.release()


def test_replays_follow_the_stream_order_rules():
    """Graph.replay's order checks over stand-in CUDA streams (tests/runtime/test_enqueue.py):
    the first replay on a stream checks every storage, later ones (nothing written anywhere
    since) only move the shared writer record on: both must refuse unordered use."""
    from fearless.errors import StreamOrderError
    from fearless.runtime.stream import Stream, check_order
    from tests.runtime.test_enqueue import _Core, _point
    s1, s2 = (Stream(_Core(h), _wrap=True) for h in (0x10, 0x20))
    x, out = fl.asarray(ints(N, 9)), fl.zeros(N)
    with fl.capture() as g:
        add[L](x, x, out)
    with fl.stream(s1):
        g.replay()
        g.replay()
    with pytest.raises(StreamOrderError, match="'out' was written"):
        check_order(s2, "reader", ["out"], [out], [False])
    with fl.stream(s2), pytest.raises(StreamOrderError, match="graph's output"):
        g.replay()                                   # out last written on s1, unordered
    s2.wait(_point(s1))
    with fl.stream(s2):
        g.replay()
    with pytest.raises(StreamOrderError):
        check_order(s1, "reader", ["out"], [out], [False])
    s1.wait(_point(s2))
    check_order(s1, "reader", ["out"], [out], [False])
    with fl.stream(s2):
        g.replay()                                   # nothing recorded a write since: O(1)
    with pytest.raises(StreamOrderError):            # ... and still newer than s1's wait
        check_order(s1, "reader", ["out"], [out], [False])
    with fl.stream(s1), pytest.raises(StreamOrderError):
        g.launch().enqueue()                         # a replay as an operation: the same rules
    s1.wait(_point(s2))
    with fl.stream(s1):
        g.replay()
    check_order(s1, "writer", ["out"], [out], [True])  # another write of out on s1 ...
    with fl.stream(s1):
        g.replay()                                   # ... so out's record is made again
    s2.wait(_point(s1))
    check_order(s2, "reader", ["out"], [out], [False])
    with fl.stream(s1):
        g.replay()                                   # O(1) again: newer than s2's wait
    with pytest.raises(StreamOrderError):
        check_order(s2, "reader", ["out"], [out], [False])
    s1.wait(_point(s2))
    synced = []
    s1.core.sync = lambda: synced.append(s1)
    with fl.stream(s1):
        g.launch().enqueue()
    g.release()                                      # waits for the enqueued replay's stream
    assert s1 in synced
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 2)


def test_the_count_of_held_claims_returns_to_zero():
    """Graph.replay skips its per-tensor checks while no claim is held anywhere
    (ownership.any_held): every way an operation ends must give its claims back."""
    from fearless.runtime import ownership
    base = ownership._held[0]
    x, out = fl.asarray(ints(N, 10)), fl.zeros(N)
    op = add.op(L, x, x, out)
    assert ownership._held[0] == base + 2 and ownership.any_held()
    op.cancel()
    add.op(L, x, x, out).enqueue()
    add.op(L, x, x, out).sync()
    with pytest.warns(RuntimeWarning, match="dropped"):
        add.op(L, x, x, out)
        gc.collect()
    g = fl.graph(add.op(L, x, x, out))              # pins are not counted
    assert ownership._held[0] == base
    g.launch().sync()
    g.release()
    assert ownership._held[0] == base


class _Builder:  # cuda.core's GraphBuilder, as graph.begin_cuda uses it
    def __init__(self, log):
        from tests.runtime.test_enqueue import _Core
        self.log, self.stream = log, _Core(0x99)

    def end_building(self):
        self.log.append("end")

    def complete(self):
        self.log.append("complete")
        return self

    def launch(self, core):  # the executable graph's launch
        self.log.append(("graph launch", core.handle))

    def close(self):
        self.log.append("close")


class _Words:  # dispatch.ErrorWords of the capture stream, with no launch checked
    owners: list = []

    def check(self):
        pass


def test_the_cuda_capture_flow_over_stand_ins(monkeypatch):
    """The cuda branch of fl.capture without a GPU: launches inside the block go to the
    capturing stream at capture (stream capture records them), memory is made on the stream
    current before the block, a replay launches the executable graph once, and a failed block
    ends the capture and closes the builder."""
    from fearless.runtime import capture as capture_, device, dispatch, graph as graph_, \
        memory, pack
    from fearless.runtime.stream import Stream
    from tests.runtime.test_enqueue import _Core, _plan_op
    log = []
    monkeypatch.setattr(pack, "launch", lambda *a: log.append(("launch", a[4])))
    monkeypatch.setattr(graph_, "current_backend", lambda: "cuda")

    def begin():
        builder = _Builder(log)
        stream = Stream(builder.stream, _wrap=True, _leases=False)
        dispatch._words[id(stream)] = _Words()
        log.append("begin")
        return builder, stream
    monkeypatch.setattr(capture_, "begin_cuda", begin)
    origin = Stream(_Core(0x10), _wrap=True)
    x = fl.asarray(ints(64, 11))
    part = fl.zeros(64).partition(16)
    with fl.stream(origin):
        with fl.capture() as g:
            _plan_op(part, x, 2.0).enqueue()
            _plan_op(part, x, 3.0).enqueue()
            with monkeypatch.context() as m:
                m.setattr(device, "current_backend", lambda: "cuda")
                assert memory.cuda_stream() is origin    # not the capturing stream
        assert log == ["begin", ("launch", 0x99), ("launch", 0x99), "end", "complete"]
        del log[:]
        g.replay()
        g.replay()
        assert log == [("graph launch", 0x10)] * 2
        assert part.unpartition() is not None           # given back at enqueue; memory pinned
        g.release()
    assert log[-1] == "close"
    del log[:]
    with fl.stream(origin), pytest.raises(RuntimeError, match="inside"):
        with fl.capture() as bad:
            _plan_op(fl.zeros(64).partition(16), x, 2.0).enqueue()
            raise RuntimeError("inside the block")
    assert log == ["begin", ("launch", 0x99), "end", "close"]  # ended, never completed
    with pytest.raises(MovedError, match="never made"):
        bad.replay()
