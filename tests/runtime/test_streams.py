"""Streams, events, leases and the launch fast path (runtime/stream.py, runtime/plan.py).

The cpu cases check the API and the fast path's admission rules; the gpu cases check that
launches land on the chosen stream (fearless, torch), that every buffer a launch uses outlives
the GPU's use of it when the caller drops it at once, and that repeat launches through a plan
compute the same values and refuse the same inputs as the first.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import fearless as fl
from fearless.compiler.info import KernelInfo, ParamInfo
from fearless.errors import AliasError, ArgumentTypeError, ContractError, LaunchError, \
    MovedError
from fearless.runtime import args as views_
from fearless.runtime.plan import LaunchPlan

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
    b = views_._overlaps((3, 4), (0, 1))  # a broadcast row: every row the same memory
    assert b and not views_._overlaps((3, 4), (4, 1)) and views_._overlaps((2, 2), (1, 1))


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
