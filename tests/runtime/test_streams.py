"""Streams, events, leases and the launch fast path (runtime/stream.py, runtime/plan.py).

The cpu cases check the API and the fast path's admission rules; the gpu cases check that
launches land on the chosen stream (fearless, torch), that every buffer a launch uses outlives
the GPU's use of it when the caller drops it at once, and that repeat launches through a plan
compute the same values and refuse the same inputs as the first.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import sanitize
from fearless.compiler.info import KernelInfo, ParamInfo
from fearless.errors import AliasError, ArgumentTypeError, ContractError, LaunchError, \
    MovedError
from fearless.runtime import args as views_
from fearless.runtime.plan import LaunchPlan
from fearless.runtime.tensor import overlaps

rng = np.random.default_rng(7)


@fl.kernel
def scale(x: fl.Slice[fl.f32], a: fl.f32, out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * a + 1.0


def test_a_stream_block_sends_launches_to_its_stream_and_nests():
    s, t = fl.Stream(), fl.Stream()
    outer = fl.current_stream()
    with fl.stream(s) as chosen:
        assert chosen is s and fl.current_stream() is s
        with fl.stream(t):
            assert fl.current_stream() is t
        assert fl.current_stream() is s
    assert fl.current_stream() is outer


def test_a_stream_block_refuses_what_is_not_a_stream():
    with pytest.raises(LaunchError, match="takes a fearless Stream or a CUDA stream"):
        with fl.stream(3):
            pass


def test_a_kernel_error_on_another_stream_surfaces_at_fl_synchronize():
    s = fl.Stream()
    x = fl.asarray(rng.standard_normal(8).astype(np.float32))
    out = fl.zeros(8)
    with fl.stream(s):
        scale[scale.prepare(8)](x, 2.0, out)
    fl.synchronize()
    np.testing.assert_allclose(out.numpy(), x.numpy() * 2 + 1, rtol=1e-6)


def _plan(*params):
    info = KernelInfo(tuple(params))
    return LaunchPlan("k", info, 0, (1,), (32,), 0, None)


def test_the_fast_path_admits_only_what_the_slow_path_checked():
    plan = _plan(ParamInfo("x", fl.f32, 1), ParamInfo("out", fl.f32, 1, written=True,
                                                      disjoint=True))
    x, out = fl.zeros(16), fl.zeros(16)
    views = [views_.of_tensor(x), views_.of_tensor(out)]
    assert not plan.admits(views)  # no shapes checked yet
    plan.shapes = ((16,), (16,))
    assert plan.admits(views)
    assert not plan.admits([views_.of_tensor(fl.zeros(17)), views[1]])  # new shapes
    assert not plan.admits([views_.of_tensor(out), views[1]])  # out also read: aliasing
    half = fl.zeros(32)
    assert not plan.admits([views_.of_tensor(half[8:24]), views_.of_tensor(half[:16])])
    out.partition(4)  # moved
    assert not plan.admits(views)


def test_a_written_view_that_overlaps_itself_is_flagged():
    b = overlaps((3, 4), (0, 1))  # a broadcast row: every row the same memory
    assert b and not overlaps((3, 4), (4, 1)) and overlaps((2, 2), (1, 1))


class _Fill:  # a ParamBuffer stand-in that records what each launch would pack
    def __init__(self):
        self.packed = []

    def fill(self, a, word, threads):
        self.packed.append((list(a), word, threads))
        return 0


def test_the_generated_fast_launch_admits_and_packs_what_the_plan_does(monkeypatch):
    """runtime/fastcall.py against LaunchPlan.admits/run, without a GPU: the same arguments are
    admitted, the same values packed, the same writes recorded; anything else falls back."""
    from fearless.runtime import device as device_, fastcall, pack
    x, out = fl.asarray(rng.standard_normal(16).astype(np.float32)), fl.zeros(16)
    half, moved, other, longer = fl.zeros(32), fl.zeros(16), fl.zeros(16), fl.zeros(17)
    moved.partition(4)
    launched = []
    monkeypatch.setattr(pack, "launch", lambda *a: launched.append(a))
    monkeypatch.setattr(device_, "_chosen", "cuda")  # the tensors above live on the cpu
    plan = LaunchPlan("k", KernelInfo((ParamInfo("x", fl.f32, 1), ParamInfo("a", fl.f32),
                                       ParamInfo("out", fl.f32, 1, written=True,
                                                 disjoint=True))), 7, (1,), (32,), 0, _Fill())
    views = [views_.of_tensor(x), 2.5, views_.of_tensor(out)]
    plan.shapes = ((16,), (16,))
    fast = fastcall.build(plan, (x, 2.5, out), views)
    s1, s2 = (Stream(_Core(h), _wrap=True) for h in (0x10, 0x20))
    with fl.stream(s1):
        assert fast((x, 2.5, out))
        plan.run((x, 2.5, out), views, s1)
        assert plan.params.packed[0] == plan.params.packed[1]
        assert [c[:5] for c in launched] == [(7, (1, 1, 1), (32, 1, 1), 0, 0x10)] * 2
        assert out._storage.writer == (s1, 2) and s1._batch[-1] == (x, 2.5, out)
        for refused in [(x, 2, out), (x, 2.5), (out, 2.5, out), (x, 2.5, longer),
                        (half[8:24], 2.5, half[:16]), (np.zeros(16, np.float32), 2.5, out),
                        (x, 2.5, moved)]:
            assert not fast(refused), refused  # the general path decides these
    with fl.stream(s2):  # out was written on s1, unordered: the plan's full check refuses
        with pytest.raises(StreamOrderError):
            fast((out, 1.0, other))
    assert len(launched) == 2


# -- gpu --------------------------------------------------------------------------------------

def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


@pytest.mark.gpu
def test_repeat_launches_on_torch_tensors_are_right_and_checked():
    torch = _torch()
    n = 1000
    launch = scale.prepare(n)
    for k in range(50):
        x = torch.randn(n, device="cuda")
        out = torch.full((n,), float("nan"), device="cuda")
        scale[launch](x, float(k), out)
        torch.testing.assert_close(out, x * np.float32(k) + 1)
    assert len(launch._plans) == 1  # one signature: one plan, reused
    x = torch.randn(n, device="cuda")
    with pytest.raises(AliasError, match="'out' is written and overlaps"):
        scale[launch](x, 1.0, x)
    with pytest.raises(ContractError, match="elements outside the launch"):
        scale[launch](x, 1.0, torch.zeros(n + 1, device="cuda"))
    with pytest.raises(ArgumentTypeError, match="'x'"):
        scale[launch](x.cpu(), 1.0, torch.zeros(n, device="cuda"))
    with pytest.raises(ArgumentTypeError, match="expects a scalar"):
        scale[launch](x, "2.0", torch.zeros(n, device="cuda"))
    out = fl.zeros(n)
    scale[launch](x, 2.0, out)  # a fearless output beside a torch input
    part = out.partition(100)
    with pytest.raises(MovedError):
        scale[launch](x, 2.0, out)
    np.testing.assert_allclose(part.unpartition().numpy(), x.cpu().numpy() * 2 + 1, rtol=1e-6)


@pytest.mark.gpu
def test_launches_inside_a_torch_stream_are_ordered_with_its_torch_work():
    torch = _torch()
    n = 1 << 22
    side = torch.cuda.Stream()
    launch = scale.prepare(n)
    with torch.cuda.stream(side):
        for k in range(20):
            x = torch.full((n,), float(k), device="cuda")
            x = (x * 3).sin_().asin_() if k % 2 else x  # enough torch work to race with
            out = torch.empty(n, device="cuda")
            scale[launch](x, 2.0, out)
            got = out.sum()  # torch reads what fearless wrote, on the same stream
            torch.testing.assert_close(got, (x * 2 + 1).sum())
    side.synchronize()


@pytest.mark.gpu
def test_a_launch_on_another_stream_waits_for_torchs_pending_writes_of_its_input():
    """torch fills x on its stream behind ~20 ms of sleep; a fearless launch reading x on a
    stream of its own, enqueued at once, must see the fill (the ordering a DLPack export to
    that stream gives: the SIMT slow and fast paths and a tile kernel read torch tensors
    through their attributes instead). Before that ordering, it read the old contents."""
    torch = _torch()
    n = 1 << 20
    launch = scale.prepare(n)
    x = torch.zeros(n, device="cuda")
    mine = fl.Stream()
    torch.cuda.synchronize()
    for k in range(1, 4):  # the slow path, then the plan's fast function
        torch.cuda._sleep(40_000_000)    # about 20 ms at the H200's clock
        x.fill_(float(k))
        with fl.stream(mine):
            out = fl.full(n, np.nan, fl.f32)
            scale[launch](x, 2.0, out)
            tiled = plus_one(fl.full(n, np.nan, fl.f32).partition(1024), x).enqueue()[0]
        mine.synchronize()
        np.testing.assert_array_equal(out.numpy(), np.full(n, 2.0 * k + 1, np.float32))
        np.testing.assert_array_equal(tiled.unpartition().numpy(),
                                      np.full(n, k + 1.0, np.float32))
    assert len(launch._plans) == 1


@pytest.mark.gpu
def test_a_lazy_tile_operation_run_on_another_stream_waits_for_torchs_writes_of_its_input():
    """The operation is built outside any fl.stream block and synced inside one: its enqueue
    orders that stream after torch's (the ordering is done when the work is enqueued)."""
    torch = _torch()
    n = 1 << 20
    x = torch.zeros(n, device="cuda")
    mine = fl.Stream()
    torch.cuda.synchronize()
    for k in range(1, 3):   # the slow path, then the plan's
        torch.cuda._sleep(40_000_000)
        x.fill_(float(k))
        op = plus_one(fl.full(n, np.nan, fl.f32).partition(1024), x)
        with fl.stream(mine):
            (out, _) = op.sync()
        np.testing.assert_array_equal(out.unpartition().numpy(), np.full(n, k + 1.0, np.float32))


@pytest.mark.gpu
def test_a_worker_thread_launches_through_plans_made_on_another_thread(backend):
    """A server's worker thread: its first launch goes through the fast path of a plan the
    main thread made (no fearless call made the device current there yet), then it copies
    the result back and runs a tile operation."""
    import threading
    n = 1 << 16
    launch = scale.prepare(n)
    x = fl.asarray(rng.standard_normal(n).astype(np.float32))
    scale[launch](x, 2.0, fl.empty(n))      # the plan and its fast function, on this thread
    plus_one(fl.empty(n).partition(1024), x).sync()
    fl.synchronize()
    got, errors, out = {}, [], fl.empty(n)   # allocated here: the launch is the thread's first

    def work():
        try:
            scale[launch](x, 3.0, out)
            got["simt"] = out.numpy()
            got["tile"] = plus_one(fl.empty(n).partition(1024), x).sync()[0].unpartition().numpy()
        except Exception as exc:  # noqa: BLE001 - reported below, on the test's thread
            errors.append(exc)
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert not errors, errors
    x64 = x.numpy().astype(np.float64)
    # x * 3 + 1 in f32: one rounding (a fused multiply-add) or two, each at most half an ulp
    # of its result, so within 2**-24 * (|3x| + |3x + 1|) of the exact value
    bound = 2.0 ** -24 * (np.abs(3 * x64) + np.abs(3 * x64 + 1))
    assert np.all(np.abs(got["simt"] - (3 * x64 + 1)) <= bound)
    np.testing.assert_array_equal(got["tile"], x.numpy() + np.float32(1))   # one rounding


@pytest.mark.gpu
def test_buffers_dropped_right_after_a_launch_live_until_the_gpu_is_done():
    torch = _torch()
    n = 1 << 18
    launch = scale.prepare(n)
    s = fl.Stream()  # non-blocking: not ordered with torch's allocations on its own stream
    outs = []
    with fl.stream(s):
        for k in range(1000):
            x = torch.full((n,), float(k), device="cuda")
            out = fl.empty(n)
            scale[launch](x, 2.0, out)
            outs.append(out)
            del x, out  # the launch holds the only reference to x's memory now
            torch.full((n,), -7.0, device="cuda")  # reuses x's block once torch frees it
    s.synchronize()
    gc.collect()
    for k, out in enumerate(outs):
        got = torch.from_dlpack(out)
        assert bool((got == 2.0 * k + 1).all()), k


@pytest.mark.gpu
@pytest.mark.parametrize("tool", [None, "memcheck"])
def test_leases_hold_under_compute_sanitizer(tool):
    """lease_job.py drops inputs and temporaries right after each launch and overwrites their
    memory: right values, and under memcheck no finding (fewer iterations: it is slow)."""
    _torch()
    job = str(Path(__file__).with_name("lease_job.py"))
    if tool is None:
        done = subprocess.run([sys.executable, job, "1000"], env={**os.environ,
                              "FEARLESS_BACKEND": "cuda"}, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    if sanitize.find() is None:
        pytest.skip("compute-sanitizer is not installed")
    assert sanitize.run(job, tool, ["200"]) == 0


# -- the tile call's fast path ------------------------------------------------------------------

from fearless import tile as ft  # noqa: E402
from fearless.kernel import tile_fast  # noqa: E402


@ft.kernel
def add_one(o: ft.Out[fl.f32], x: ft.In[fl.f32], s: fl.f32):
    o.store(ft.load_like(x, o) * s + 1.0)


@ft.kernel
def plus_one(o: ft.Out[fl.f32], x: ft.In[fl.f32]):  # apart from add_one, whose plans a test counts
    o.store(ft.load_like(x, o) + 1.0)


class _Loaded:  # a stand-in for a LoadedTile: operations here are cancelled, never run
    function, grouped, params, name, pdl, stream_k = 0, False, None, "add_one", False, ()


def _signature(*args):
    # per_sm: one block per SM (add_one has no occupancy hint; reading the hints needs a GPU)
    return tile_fast.signature(add_one.params, args, lambda backend: 1)


def test_the_tile_fast_path_keys_and_refusals():
    x = fl.asarray(rng.standard_normal(64).astype(np.float32))
    part = fl.zeros(64).partition(16)
    key, views, outs, values = _signature(part, x, 2.0)
    again = _signature(fl.zeros(64).partition(16), x, 3.0)
    assert again[0] == key and values == (part, x, 2.0) and outs == [part]
    assert _signature(fl.zeros(64).partition(32), x, 2.0)[0] != key
    assert _signature(part, x) is None  # a missing argument
    # a persistent launch with no more tiles than blocks compiles apart from a longer one
    few = _signature(fl.zeros(64).partition(16, schedule=ft.persistent(blocks=4)), x, 2.0)
    many = _signature(fl.zeros(128).partition(16, schedule=ft.persistent(blocks=4)), x, 2.0)
    assert few[0] != many[0] and key not in (few[0], many[0])
    plan = tile_fast.TilePlan("add_one", [p for p in add_one.params], _Loaded(), {2: fl.f32})
    op = plan.operation(values, views, outs)
    assert op is not None and op.cancel() == (part, x, 2.0)
    op = plan.operation(values, views, outs)  # part is now held by op ...
    assert _signature(part, x, 2.0) is None  # ... so not free
    op.cancel()
    x.partition(64)  # x moved: the plan sends the call to the slow path
    assert plan.operation(values, views, outs) is None


@pytest.mark.gpu
def test_repeat_tile_calls_run_through_their_plan_and_stay_right():
    torch = _torch()
    n = 1 << 12
    xs = [torch.randn(n, device="cuda") for _ in range(3)]
    part = fl.zeros(n).partition(256)
    for k in range(30):
        x = xs[k % 3]
        part = add_one(part, x, float(k)).sync()[0]
        got = torch.from_dlpack(part.unpartition()) if k == 29 else None
        if got is None:
            continue
        torch.testing.assert_close(got, x * np.float32(k) + 1)
    assert len(add_one._plans) == 1
    shared = torch.zeros(2 * n, device="cuda")  # an Out over torch memory, an In overlapping it
    for _ in range(2):  # the second call has a plan for this signature: still refused
        with pytest.raises(AliasError, match="overlaps"):
            add_one(fl.asarray(shared[:n]).partition(256), shared[n // 2:n + n // 2], 1.0)


# -- ordering between streams -------------------------------------------------------------------

from fearless.errors import StreamOrderError  # noqa: E402
from fearless.runtime.stream import Event, Stream, check_order  # noqa: E402


class _Core:  # a CUDA stream stand-in: check_order only reads fearless's own bookkeeping
    def __init__(self, handle):
        self.handle = handle

    def sync(self):
        pass


def _point(stream):  # an Event without the driver: the point of `stream` reached so far
    e = Event.__new__(Event)
    e.stream, e.handle, e.knows = stream, None, {**stream.seen, stream: stream.seq}
    return e


def test_a_tensor_written_on_one_stream_is_refused_on_another_until_ordered():
    s1, s2, s3 = (Stream(_Core(h), _wrap=True) for h in (0x10, 0x20, 0x30))
    t, other = fl.zeros(4), fl.zeros(4)
    check_order(s1, "producer", ["out"], [t], [True])
    check_order(s1, "again", ["out"], [t], [True])  # the same stream: ordered
    check_order(s2, "unrelated", ["x"], [other], [False])
    with pytest.raises(StreamOrderError, match="'x' was written by a launch on") as info:
        check_order(s2, "consumer", ["x"], [t], [False])
    assert info.value.kernel == "consumer" and "0x10" in str(info.value) and "0x20" in str(info.value)
    s2.wait(_point(s1))  # an event recorded after the write, waited for
    check_order(s2, "consumer", ["x"], [t], [False])
    s3.wait(_point(s2))  # s3 after s2, which is after s1: transitively after the write
    check_order(s3, "consumer", ["x"], [t], [False])
    check_order(s1, "producer", ["out"], [t], [True])  # a newer write on s1 ...
    with pytest.raises(StreamOrderError):
        check_order(s2, "consumer", ["x"], [t], [False])  # ... that s2 has not waited for
    s1.synchronize()
    check_order(s2, "consumer", ["x"], [t], [False])  # s1 synchronised: everything ran


@pytest.mark.gpu
def test_unordered_streams_are_refused_and_ordered_ones_are_right():
    torch = _torch()
    n = 1 << 20
    launch = scale.prepare(n)
    x = fl.asarray(rng.standard_normal(n).astype(np.float32))
    for make in (fl.Stream, torch.cuda.Stream):
        s1, s2 = make(), make()
        mid, out = fl.empty(n), fl.empty(n)
        with fl.stream(s1):
            scale[launch](x, 2.0, mid)
        with fl.stream(s2):
            with pytest.raises(StreamOrderError, match="'x'"):
                scale[launch](mid, 3.0, out)
        with fl.stream(s1):
            e = fl.Event()
        with fl.stream(s2):
            fl.current_stream().wait(e)
            scale[launch](mid, 3.0, out)
        fl.synchronize()
        np.testing.assert_allclose(out.numpy(), (x.numpy() * 2 + 1) * 3 + 1, rtol=1e-5)


@pytest.mark.gpu
def test_a_stream_of_another_context_is_refused():
    from cuda.bindings import driver
    fl.zeros(1)  # the primary context exists and is current
    err, mine = driver.cuCtxGetCurrent()
    err, dev = driver.cuDeviceGet(0)
    err, other = driver.cuCtxCreate(None, 0, dev) if _takes_params() else driver.cuCtxCreate(0, dev)
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        err, foreign = driver.cuStreamCreate(0)  # made in the new (current) context
        driver.cuCtxSetCurrent(mine)
        with pytest.raises(LaunchError, match="another CUDA context"):
            with fl.stream(_Handle(int(foreign))):
                pass
    finally:
        driver.cuCtxSetCurrent(mine)
        driver.cuCtxDestroy(other)


def _takes_params() -> bool:  # cuda-bindings 13 added a CUctxCreateParams argument
    import inspect

    from cuda.bindings import driver
    try:
        return len(inspect.signature(driver.cuCtxCreate).parameters) == 3
    except (TypeError, ValueError):
        return True


class _Handle:  # any object speaking the CUDA stream protocol
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.gpu
def test_dropped_temporaries_go_back_to_the_pool_while_the_gpu_is_behind():
    """An eager loop that allocates a 1 GiB output per step and drops the last one while the
    GPU is still behind: held until the GPU caught up (as leases held a model's activations),
    150 steps would need 150 GiB; freed in the stream's order, two or three are live."""
    fl.set_backend("cuda")
    n = 1 << 28
    x = fl.zeros(n)
    for _ in range(150):
        x = add_one(fl.empty(n).partition(1024), x, 1.0).enqueue()[0].unpartition()
    assert x[n - 1:].numpy()[0] == 150.0
