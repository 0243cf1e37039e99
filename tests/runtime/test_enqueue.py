"""DeviceOperation.enqueue(): eager enqueue of a lazy operation, ownership back at once.

Results and ordering run on both backends (the cuda case is marked ``gpu``); the stream-order
rules of a CUDA stream are checked without a GPU through the tile fast path with stand-ins for
the driver (as ``test_streams.py`` does).
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.errors import KernelBoundsError, LaunchError, MovedError, StreamOrderError
from fearless.kernel import tile_fast
from fearless.runtime.stream import Stream
from tests.runtime.lazy_kernels import add, shifted
from tests.support import BACKENDS, random_array

N = 1000
L = add.prepare(N)


def rand(shape, seed=0):
    return random_array(fl.f32, shape, seed)


@ft.kernel
def affine(o: ft.Out[fl.f32], x: ft.In[fl.f32], s: fl.f32):
    o.store(ft.load_like(x, o) * s + 1.0)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_enqueued_tile_operations_chain_on_one_stream(backend):
    """Each enqueue returns at once with its arguments; the next operation, on the same
    stream, reads the first one's output: the values show the order."""
    a = rand(N, 1)
    x = fl.asarray(a)
    p = fl.full(N, np.nan, fl.f32).partition(256)
    got = affine(p, x, 2.0).enqueue()
    assert got[0] is p and got[1] is x and got[2] == 2.0
    mid = p.unpartition()                          # given back at once: usable now
    q = fl.full(N, np.nan, fl.f32).partition(128)
    affine(q, mid, 3.0).enqueue()
    again = affine(q, mid, -1.0).enqueue()[0]      # q enqueued, then used again at once
    out = again.unpartition().numpy()              # numpy() waits for the stream
    ref = (a.astype(np.float64) * 2 + 1) * -1 + 1
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-5)  # two f32 roundings of |x|<100


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_enqueued_simt_operations_and_eager_launches_interleave(backend):
    a, b = rand(N, 2), rand(N, 3)
    x, y = fl.asarray(a), fl.asarray(b)
    mid, out = fl.full(N, np.nan, fl.f32), fl.full(N, np.nan, fl.f32)
    assert add.op(L, x, y, mid).enqueue() == (x, y, mid)
    add[L](mid, y, out)                            # an eager launch after it, same stream
    add.op(L, out, x, mid).enqueue()
    add.op(L, mid, mid, out).enqueue()
    np.testing.assert_array_equal(out.numpy(), ((a + b) + b + a) * 2)
    other = fl.full(N, np.nan, fl.f32)
    assert fl.zip(add.op(L, x, y, mid), add.op(L, y, y, other)).enqueue() == \
        ((x, y, mid), (y, y, other))
    np.testing.assert_array_equal(mid.numpy(), a + b)
    np.testing.assert_array_equal(other.numpy(), b + b)


def test_an_operation_enqueues_once_and_not_inside_a_callback():
    x, out = fl.asarray(rand(N)), fl.zeros(N)
    op = add.op(L, x, x, out)
    op.enqueue()
    for use in (op.enqueue, op.sync, op.cancel):
        with pytest.raises(MovedError, match="already ran"):
            use()
    inner = []

    def callback(result):
        inner.append(add.op(L, x, x, out))
        inner[0].enqueue()
    with pytest.raises(LaunchError, match="enqueue.*inside a running DeviceOperation"):
        add.op(L, x, x, fl.zeros(N)).then(callback).sync()
    inner[0].cancel()


def test_a_then_chain_enqueues_in_order():
    a, b = rand(N, 4), rand(N, 5)
    x, y, mid, out = fl.asarray(a), fl.asarray(b), fl.zeros(N), fl.zeros(N)
    result = add.op(L, x, y, mid).then(lambda r: add.op(L, r[2], y, out)).enqueue()
    assert result == (mid, y, out)
    np.testing.assert_array_equal(out.numpy(), a + b + b)


def test_a_bounds_error_surfaces_at_the_next_sync():
    x, out = fl.asarray(rand(64)), fl.zeros(64)
    shifted.op(shifted.prepare(64), x, out).enqueue()   # returns: the check is deferred
    with pytest.raises(KernelBoundsError, match="index 64"):
        fl.synchronize()
    out.partition(16)                                   # ownership came back at the enqueue


# -- stream order without a GPU: the tile fast path over stand-ins for the driver --------------

class _Core:  # a CUDA stream stand-in: the order checks read only fearless's bookkeeping
    def __init__(self, handle):
        self.handle = handle

    def sync(self):
        pass


class _Fill:
    def fill(self, a, word=0, threads=0):
        return 0


class _Loaded:  # a LoadedTile stand-in
    function, grouped, name, pdl, stream_k = 7, False, "affine", False, ()
    params = _Fill()


def _plan_op(part, x, s):
    found = tile_fast.signature(affine.params, (part, x, s), affine.per_sm)
    assert found is not None
    plan = tile_fast.TilePlan("affine", list(affine.params), _Loaded(), {2: fl.f32})
    return plan.operation(found[3], found[1], found[2])


def test_a_partition_enqueued_on_one_stream_is_refused_on_another_until_ordered(monkeypatch):
    from fearless.runtime import pack
    launched = []
    monkeypatch.setattr(pack, "launch", lambda *a: launched.append(a[4]))
    s1, s2 = (Stream(_Core(h), _wrap=True) for h in (0x10, 0x20))
    x = fl.asarray(rand(64))
    part = fl.zeros(64).partition(16)
    with fl.stream(s1):
        assert _plan_op(part, x, 2.0).enqueue()[0] is part
        assert s1._batch[-1] is not None                  # the operation is leased to s1
        _plan_op(part, x, 3.0).enqueue()                  # the same stream: ordered
    with fl.stream(s2):
        op = _plan_op(part, x, 4.0)
        with pytest.raises(StreamOrderError, match="'o' was written by a launch on"):
            op.enqueue()
    assert launched == [0x10, 0x10]                       # nothing reached s2
    with pytest.raises(MovedError, match="failed when it ran"):
        op.enqueue()
    with fl.stream(s1):
        e = _point(s1)
    s2.wait(e)                                            # ordered now
    with fl.stream(s2):
        _plan_op(part, x, 5.0).enqueue()
    assert launched == [0x10, 0x10, 0x20]
    part.unpartition()                                    # the failed enqueue gave it back


def _point(stream):  # an Event without the driver: the point of `stream` reached so far
    e = fl.Event.__new__(fl.Event)
    e.stream, e.handle, e.knows = stream, None, {**stream.seen, stream: stream.seq}
    return e


@pytest.mark.gpu
def test_enqueued_partitions_on_two_cuda_streams_need_an_event():
    a = rand(1 << 16, 6)
    x = fl.asarray(a)
    s1, s2 = fl.Stream(), fl.Stream()
    part = fl.full(a.shape, np.nan, fl.f32).partition(1024)
    with fl.stream(s1):
        for k in range(5):
            affine(part, x, float(k)).enqueue()
    with fl.stream(s2):
        with pytest.raises(StreamOrderError):
            affine(part, x, 9.0).enqueue()
    with fl.stream(s1):
        e = fl.Event()
    s2.wait(e)
    with fl.stream(s2):
        affine(part, x, 7.0).enqueue()
    fl.synchronize()
    np.testing.assert_allclose(part.unpartition().numpy(), a * np.float32(7) + 1, rtol=1e-6)
