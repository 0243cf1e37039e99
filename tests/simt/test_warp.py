"""Warp operations: shuffles, votes and reductions, accepted and refused (cpu, gpu, PTX).

The expected shuffle results come from a scalar transcription of the PTX ISA's pseudo-code for
``shfl.sync`` (not from the cpu backend's vectorised code), so cpu and GPU are both held to PTX.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless.errors import BarrierError, ContractError, SafetyError
from fearless.ir import types as T
from tests.simt import warp_kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
FILE = k.__file__
N = 128


def text(err) -> str:
    return str(err).replace(FILE, "warp_kernels.py")


def ptx_shfl(values, mode, b, width):
    """PTX ISA 8.x, shfl.sync: the value each lane of one warp receives (b per lane, u32)."""
    out = []
    c = ((32 - width) << 8) | (0 if mode == "up" else 0x1F)
    segmask, cval = (c >> 8) & 0x1F, c & 0x1F
    for lane in range(32):
        bval = int(b[lane]) & 0x1F  # bval[4:0] = b[4:0]: only the low five bits count
        max_lane = (lane & segmask) | (cval & ~segmask)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - bval
            pval = j >= max_lane
        elif mode == "down":
            j = lane + bval
            pval = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            pval = j <= max_lane
        else:
            j = min_lane | (bval & ~segmask)
            pval = j <= max_lane
        out.append(values[j if pval else lane])
    return np.array(out)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", ["f32", "f64", "i8", "f16", "u64", "bool_"])
@pytest.mark.parametrize("d", [1, 3, 9, 17])
def test_shuffles_follow_ptx(backend, dt, d):
    rng = np.random.default_rng(d)
    dtype = getattr(fl, dt)
    x = (rng.random(N) * 200 - 50).astype(dtype.numpy) if dt != "bool_" else rng.random(N) > 0.5
    src = rng.integers(-3, 40, N).astype(np.int32)
    outs = [fl.zeros(N, dtype) for _ in range(4)]
    k.shuffles[k.shuffles.prepare(N, block=64)](fl.asarray(x), fl.asarray(src), d, *outs)
    for w in range(N // 32):
        sl = slice(32 * w, 32 * w + 32)
        want = [ptx_shfl(x[sl], "idx", src[sl], 32), ptx_shfl(x[sl], "down", [d] * 32, 32),
                ptx_shfl(x[sl], "up", [d] * 32, 8), ptx_shfl(x[sl], "bfly", [d] * 32, 16)]
        for got, exp in zip(outs, want):
            np.testing.assert_array_equal(got.numpy()[sl], exp)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_votes_and_lanes(backend):
    x = np.random.default_rng(5).random(N).astype(np.float32)
    x[64:96] = 0.9  # one warp where every predicate holds
    ballot, some, every = fl.zeros(N, fl.u32), fl.zeros(N, fl.bool_), fl.zeros(N, fl.bool_)
    lane = fl.zeros(N, fl.i32)
    k.votes[k.votes.prepare(N, block=64)](fl.asarray(x), ballot, some, every, lane)
    bits = (x > 0.5).reshape(-1, 32)
    want = (bits * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
    np.testing.assert_array_equal(ballot.numpy(), np.repeat(want, 32))
    np.testing.assert_array_equal(some.numpy(), np.repeat(bits.any(1), 32))
    np.testing.assert_array_equal(every.numpy(), np.ones(N, bool))
    slot = np.arange(N) % 64
    np.testing.assert_array_equal(lane.numpy(), slot % 32 + 100 * (slot // 32))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "i32", "u32", "i64", "u8", "i16"])
def test_reductions_give_every_lane_the_warp_result(backend, dt):
    dtype = getattr(fl, dt)
    rng = np.random.default_rng(7)
    x = (rng.random(N) * 100 - (0 if dtype.name.startswith("u") else 50)).astype(dtype.numpy)
    s, hi, lo = (fl.zeros(N, dtype) for _ in range(3))
    k.reductions[k.reductions.prepare(N, block=128)](fl.asarray(x), s, hi, lo)
    w = x.reshape(-1, 32)
    if dtype.is_float:
        want = w.astype(np.float64).sum(1)
        np.testing.assert_allclose(s.numpy().reshape(-1, 32), np.repeat(want[:, None], 32, 1),
                                   rtol=2e-3 if dt == "f16" else 1e-5)
    else:  # integers wrap, exactly as a sum in the type does
        np.testing.assert_array_equal(s.numpy(), np.repeat(w.sum(1, dtype=dtype.numpy), 32))
    assert (s.numpy().reshape(-1, 32) == s.numpy().reshape(-1, 32)[:, :1]).all()
    np.testing.assert_array_equal(hi.numpy(), np.repeat(w.max(1), 32))
    np.testing.assert_array_equal(lo.numpy(), np.repeat(w.min(1), 32))


def test_full_mask_f32_sum_is_the_butterfly_bit_for_bit():
    x = np.random.default_rng(8).random(32).astype(np.float32) * 1e4
    s = fl.zeros(32)
    k.reductions[k.reductions.prepare(32, block=32)](fl.asarray(x), s, fl.zeros(32),
                                                      fl.zeros(32))
    v = x.copy()
    for off in (16, 8, 4, 2, 1):
        v = v + v[np.arange(32) ^ off]
    np.testing.assert_array_equal(s.numpy(), v)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_partial_mask_reduction_inside_unsafe(backend):
    x = np.random.default_rng(9).random(N).astype(np.float32)
    out = fl.full(N, np.nan, fl.f32)
    k.half_warp_sum[k.half_warp_sum.prepare(N, block=64)](fl.asarray(x), out)
    got = out.numpy().reshape(-1, 32)
    want = x.reshape(-1, 32)[:, :16].astype(np.float64).sum(1)
    np.testing.assert_allclose(got[:, :16], np.repeat(want[:, None], 16, 1), rtol=1e-5)
    assert (got[:, 16:] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_block_sum_with_two_warp_levels(backend):
    x = np.random.default_rng(10).random(1000).astype(np.float32)
    sums = fl.zeros(4)
    k.block_sum[k.block_sum.prepare(1000, block=256)](fl.asarray(x), sums)
    want = np.add.reduceat(x.astype(np.float64), np.arange(0, 1000, 256))
    np.testing.assert_allclose(sums.numpy(), want, rtol=1e-5)


def test_full_mask_kernels_need_whole_warps():
    with pytest.raises(ContractError, match="not a multiple of 32"):
        k.block_sum[k.block_sum.prepare(1000, block=48)](fl.zeros(1000), fl.zeros(21))


GOLDEN = {
    "divergent_reduce": """\
kernel 'divergent_reduce': not every lane of the warp may reach a warp reduction: the condition \
on line 81 can differ between the lanes of a warp
  --> warp_kernels.py:82:13
   |
82 |         r = fl.warp.reduce_sum(x[i])
   |             ^^^^^^^^^^^^^^^^^^^^^^^^
help: call it where all 32 lanes arrive (compute a neutral value in the lanes that should not \
take part), branch on fl.warp.index() instead, or give mask= inside `with fl.unsafe():`""",
    "early_exit_shuffle": """\
kernel 'early_exit_shuffle': not every lane of the warp may reach a warp shuffle: the condition \
on line 89 can differ between the lanes of a warp
  --> warp_kernels.py:91:14
   |
91 |     out[i] = fl.warp.shuffle_down(x[i], 1)
   |              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^""",
    "partial_mask_outside_unsafe": """\
kernel 'partial_mask_outside_unsafe': fl.warp.shuffle() with a mask other than fl.warp.FULL \
needs `with fl.unsafe():`: every lane of the mask must reach the call together, and the compiler \
cannot prove it
  --> warp_kernels.py:97:44
   |
97 |     out[i] = fl.warp.shuffle(x[i], 0, mask=0xFF)
   |                                            ^^^^
help: leave the mask out (all 32 lanes), or wrap the call in `with fl.unsafe():`""",
    "full_mask_in_unsafe_branch": """\
kernel 'full_mask_in_unsafe_branch': not every lane of the warp may reach a warp reduction: the \
condition on line 104 can differ between the lanes of a warp
   --> warp_kernels.py:106:17""",
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_refused_with_a_caret(name):
    kern = getattr(k, name)
    with pytest.raises(SafetyError) as info:
        kern[kern.prepare(N, block=64)](fl.zeros(N), fl.zeros(N))
    assert text(info.value).startswith(GOLDEN[name]), text(info.value)


RUNTIME = {
    "mask_too_small": r"thread 16 of block 0 \(lane 16\) is not in the mask 0x0000ffff, but "
                      r"reached it\n   --> warp_kernels.py:116:18",
    "mask_too_large": r"thread 16 of block 0 \(lane 16\) is in the mask 0xffffffff but took "
                      r"another branch\n   --> warp_kernels.py:125:17",
    "reads_outside_mask": r"thread 8 of block 0 \(lane 8\) reads lane 16, which is not in the "
                          r"mask\n   --> warp_kernels.py:135:17",
}


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_unsafe_masks_are_checked_at_run_time_on_cpu(name):
    kern = getattr(k, name)
    with pytest.raises(BarrierError) as info:
        kern[kern.prepare(N, block=64)](fl.zeros(N), fl.zeros(N))
    assert re.search(r"a warp (reduction|shuffle) needs every lane of its mask, together: "
                     + RUNTIME[name], text(info.value)), text(info.value)


R = T.Array(fl.f32, 1, T.Access.READ, True)
O = T.Array(fl.f32, 1, T.Access.DISJOINT, True)


def _types(d, n_out):
    return (T.Array(d, 1, T.Access.READ, True),) + (T.Array(d, 1, T.Access.DISJOINT, True),) * n_out


def test_ptx_shuffles_carry_ptx_mode_clamp_and_mask():
    text = k.shuffles.inspect("ptx", (R, T.Array(fl.i32, 1, T.Access.READ, True),
                                      T.Scalar(fl.i32), O, O, O, O))
    assert re.search(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, %r\d+, 31, -1;", text)
    assert re.search(r"shfl\.sync\.down\.b32\s+%r\d+, %r\d+, %r\d+, 31, -1;", text)
    assert re.search(r"shfl\.sync\.up\.b32\s+%r\d+, %r\d+, %r\d+, 6144, -1;", text)   # 24 << 8
    assert re.search(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, %r\d+, 4127, -1;", text)  # 16<<8|31
    f64 = k.shuffles.inspect("ptx", _types(fl.f64, 0) + (T.Array(fl.i32, 1, T.Access.READ, True),
                                                         T.Scalar(fl.i32))
                             + _types(fl.f64, 4)[1:])
    assert len(re.findall(r"shfl\.sync\.idx\.b32", f64)) == 2  # two halves of 64 bits


def test_ptx_votes_and_reductions():
    text = k.votes.inspect("ptx", (R, T.Array(fl.u32, 1, T.Access.DISJOINT, True),
                                   T.Array(fl.bool_, 1, T.Access.DISJOINT, True),
                                   T.Array(fl.bool_, 1, T.Access.DISJOINT, True),
                                   T.Array(fl.i32, 1, T.Access.DISJOINT, True)))
    assert "vote.sync.ballot.b32" in text
    assert "vote.sync.any.pred" in text and "vote.sync.all.pred" in text
    ints = k.reductions.inspect("ptx", _types(fl.i32, 3))
    for want in ("redux.sync.add.s32", "redux.sync.max.s32", "redux.sync.min.s32"):
        assert want in ints
    assert "redux.sync.min.u32" in k.reductions.inspect("ptx", _types(fl.u32, 3))
    floats = k.reductions.inspect("ptx", _types(fl.f32, 3))
    assert "redux" not in floats
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", floats)) == 15  # 3 reductions x 5 steps
    assert re.search(r"max\.f32|max\.NaN\.f32", floats)
    half = k.half_warp_sum.inspect("ptx", (R, O))
    assert len(re.findall(r"shfl\.sync\.idx\.b32", half)) == 32  # a left fold over the lanes
