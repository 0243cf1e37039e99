"""fearless.nn.linear against float64 NumPy: every schedule (prefill tiles, decode tiles, split-K
with its reducing kernel), every form (mma, mma_t, sum), f16/bf16/f32, with and without bias,
strided views; bad input refused with typed errors. Each case runs on the cpu backend (and is
compiled for sm_80 and sm_90 first: ``_ref.call``) and on the GPU (marked ``gpu``)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32
from fearless.errors import ArgumentTypeError, ContractError
from fearless.nn import linear
from tests.nn._ref import call, cases, f64, host, rand, unit
from tests.support import BACKENDS

plan = importlib.import_module("fearless.nn.linear").plan  # the module, not nn's function
K, N = 200, 136  # neither a multiple of any tile


def inputs(dt, t, k=K, n=N, seed=0):
    return rand(dt, (t, k), seed), rand(dt, (n, k), seed + 1), rand(dt, (n,), seed + 2)


def check(got, x, w, b, dt, splits: int = 1):
    """|got - exact| <= atol + u (|exact| + atol), linear's documented bound: with
    M = |x| @ |w|.T + |b|, atol = (k + splits) 2^-23 M for f16/bf16 (exact products, at most
    k + splits f32 additions, each off by up to 2^-23), (3k + splits) 2^-23 M + 2^-20 M for f32
    (three TF32 products per term; the split's lost low parts); u: the one rounding to the
    dtype (half an ulp)."""
    x64, w64 = f64(x), f64(w)
    b64 = np.zeros(w.shape[0]) if b is None else f64(b)
    want = x64 @ w64.T + b64
    mag = np.abs(x64) @ np.abs(w64).T + np.abs(b64)
    k = x.shape[1]
    if dt is f32:
        atol = mag * ((3 * k + splits) * 2.0 ** -23 + 2.0 ** -20)
    else:
        atol = mag * (k + splits) * 2.0 ** -23
    got = f64(got)
    assert got.shape == want.shape
    assert not np.isnan(got).any(), "an output element was never written"
    err = np.abs(got - want)
    bad = err > atol + unit(dt) * (np.abs(want) + atol)
    assert not bad.any(), f"{bad.sum()} elements out of bounds; worst error {err.max():.3g}"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,t,bias", cases([(3, True)], [(1, False), (16, True), (17, False),
                                                          (200, True)]))
def test_default_plan(backend, dt, t, bias):
    x, w, b = inputs(dt, t, seed=t)
    b = b if bias else None
    y = call(linear, x, w, b)
    assert y.shape == (t, N) and y.dtype is dt
    check(host(y), x, w, b, dt)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("variant,splits", [("mma", 1), ("mma", 4), ("mma_t", 2), ("sum", 1),
                                            ("sum", 2)])
def test_variants_and_split_k(backend, variant, splits):
    x, w, b = inputs(bf16, 5, seed=splits)
    y = call(linear, x, w, b, variant=variant, splits=splits,
             bk=32 if variant != "sum" else None)
    check(host(y), x, w, b, bf16, splits)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_split_prefill_tile_and_latency_hint(backend):
    x, w, _ = inputs(f16, 40, seed=7)
    check(host(call(linear, x, w, tile=(32, 32), bk=16, splits=8, latency=3)), x, w, None, f16,
          8)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_strided_views(backend):
    """x a column slice of a wider matrix (a fused projection's output), w a row slice."""
    xs, ws, b = inputs(bf16, 20, 3 * K, N + 8, seed=5)
    x, w = fl.asarray(xs)[:, K:2 * K], fl.asarray(ws)[4:N + 4, :K]
    check(host(call(linear, x, w, b[:N])), xs[:, K:2 * K], ws[4:N + 4, :K], b[:N], bf16)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_f32_split_is_not_tf32(backend):
    """The 3xTF32 split: one TF32 mma errs by up to 2^-11 relative, the bound allows 2^-20; on
    the GPU tileiras must keep c - (c - v) as written (no reassociation) and the three mma."""
    x, w, b = inputs(f32, 3, seed=3)
    check(host(call(linear, x, w, b, variant="mma_t")), x, w, b, f32)
    x1 = np.full((1, 16), 1 + 2.0 ** -20, np.float32)   # not a TF32 value: 1 + 2^-20 is lost
    for t in (1, 40):  # the decode and the prefill schedule
        got = host(call(linear, np.repeat(x1, t, axis=0), np.ones((16, 16), np.float32)))
        assert np.all(got == np.float32(16 * (1 + 2.0 ** -20)))


def test_plan_chooses_from_t_and_n():
    p = plan(1, 4096, 14336, bf16)          # 64 tiles of y: one kernel, no split
    assert (p.form, p.bm, p.bn, p.splits) == ("mma_t", 16, 64, 1)
    tiny = plan(1, 256, 4096, bf16)         # 4 tiles of y: K split up to sms // 8 = 16 blocks
    assert (tiny.splits, plan(1, 256, 4096, bf16, sms=16).splits) == (4, 1)
    assert plan(1, 128256, 4096, bf16).splits == 1
    def tile(*shape, sms=132):
        p = plan(*shape, bf16, sms=sms)
        return p.bm, p.bn, p.splits

    # prefill: the largest tile whose blocks fill 2/3 of the SMs (88 of 132), one per block
    assert tile(2048, 4096, 4096) == tile(512, 4096, 4096) == (128, 128, 1)   # 512, 128 blocks
    assert tile(128, 14336, 4096) == (128, 128, 1)                            # 112 blocks
    assert tile(256, 4096, 4096) == tile(128, 6144, 2048) == (128, 64, 1)     # 128, 96 blocks
    assert tile(128, 4096, 4096) == tile(128, 4096, 14336) == (64, 64, 1)     # 128 blocks
    assert tile(128, 4096, 4096, sms=16) == (128, 128, 1)                     # 32 blocks
    # none does: 64x64 tiles, K split to about a block per SM, at least 16 K steps a part
    assert tile(128, 1024, 4096) == (64, 64, 4)      # 32 blocks, 64 K steps: 4 parts
    assert tile(128, 2048, 6144) == (64, 64, 2)      # 64 blocks: 2 parts
    assert tile(128, 2048, 1024) == (64, 64, 1)      # 16 K steps: too few to split
    assert tile(128, 1024, 64)[2] == 1               # one K step: nothing to split
    assert tile(32, 4096, 4096) == (32, 64, 2)       # bm follows T: 64 blocks, 2 parts
    assert (plan(2048, 4096, 4096, f32).bm, plan(2048, 4096, 4096, f32).bn) == (128, 64)


def test_empty_tokens_and_zero_k():
    assert linear(np.zeros((0, 8), np.float32), np.ones((4, 8), np.float32)).shape == (0, 4)
    b = np.arange(4, dtype=np.float32)
    got = linear(np.zeros((2, 0), np.float32), np.ones((4, 0), np.float32), b).numpy()
    assert np.array_equal(got, np.broadcast_to(b, (2, 4)))


def test_bad_input_is_refused_with_typed_errors():
    x, w, b = inputs(bf16, 2, 16, 8)
    with pytest.raises(ContractError, match=r"kernel 'linear', parameter 'w'.*expected \(\?, 16\)"):
        linear(x, w[:, :15])
    with pytest.raises(ArgumentTypeError, match="parameter 'w'.*differs from x's bf16"):
        linear(x, w.astype(np.float16))
    with pytest.raises(ArgumentTypeError, match="parameter 'x'.*rank-2"):
        linear(x[0], w)
    with pytest.raises(ArgumentTypeError, match="parameter 'x'.*i32 is not supported"):
        linear(x.astype(np.int32), w.astype(np.int32))
    with pytest.raises(ContractError, match=r"parameter 'bias'.*expected \(8,\)"):
        linear(x, w, b[:7])
    with pytest.raises(ArgumentTypeError, match="parameter 'bias'.*rank-1"):
        linear(x, w, b.reshape(2, 4))
    with pytest.raises(ValueError, match="variant 'gemv'"):
        linear(x, w, variant="gemv")
    with pytest.raises(ValueError, match="splits = 3 is not a power of two"):
        linear(x, w, splits=3)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [bf16, f16, f32], ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("t", [1, 3, 16, 17, 200])
def test_torch_in_torch_out(dt, t):
    torch = pytest.importorskip("torch")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt.name]
    x, w, b = inputs(dt, t, 1000, 600, seed=t)
    tx, tw, tb = (torch.from_numpy(f64(a)).cuda().to(tdt) for a in (x, w, b))
    y = call(linear, tx, tw, tb)
    assert isinstance(y, torch.Tensor) and y.dtype == tdt and y.shape == (t, 600)
    check(host(y), x, w, b, dt)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,splits", [("mma", 1), ("mma", 8), ("mma_t", 1), ("mma_t", 4),
                                            ("sum", 1), ("sum", 4)])
def test_decode_variants_at_model_size(variant, splits):
    x, w, b = inputs(bf16, 4, 4096, 1024, seed=splits)
    check(host(call(linear, x, w, b, variant=variant, splits=splits)), x, w, b, bf16, splits)


@pytest.mark.gpu
def test_prefill_default_plan_at_model_size():
    x, w, _ = inputs(bf16, 300, 2048, 1000, seed=11)
    check(host(call(linear, x, w)), x, w, None, bf16)
