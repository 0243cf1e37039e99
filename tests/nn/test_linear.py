"""fearless.nn.linear against float64 NumPy: every schedule (prefill tiles, decode tiles, split-K
with its reducing kernel), every form (mma, mma_t, sum), f16/bf16/f32, with and without bias;
bad input refused with typed errors. GPU cases (marked ``gpu``) take torch tensors."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32
from fearless.errors import ArgumentTypeError, ContractError
from fearless.nn import linear
linear_module = importlib.import_module("fearless.nn.linear")

K, N = 200, 136  # neither a multiple of any tile


def _inputs(t, k, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, k), np.float32).astype(dtype.numpy)
    w = rng.standard_normal((n, k), np.float32).astype(dtype.numpy)
    b = rng.standard_normal(n, np.float32).astype(dtype.numpy)
    return x, w, b


def _check(got, x, w, b, dtype, splits: int = 1):
    """|got - exact| <= atol + rtol * (|exact| + atol), linear's documented bound: with
    M = |x| @ |w|.T + |b|, atol = (k + splits) * 2**-23 * M for f16/bf16 (exact products, at
    most k + splits f32 additions at up to 2**-23 each), (3k + splits) * 2**-23 * M + 2**-20 * M
    for f32 (three TF32 products per term, the split's lost low parts); rtol: the one rounding
    to the dtype (half an ulp: 2**-11 f16, 2**-8 bf16, 2**-24 f32)."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    b64 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    want = x64 @ w64.T + b64
    mag = np.abs(x64) @ np.abs(w64).T + np.abs(b64)
    k = x.shape[1]
    if dtype is f32:
        atol = mag * ((3 * k + splits) * 2.0 ** -23 + 2.0 ** -20)
    else:
        atol = mag * (k + splits) * 2.0 ** -23
    rtol = {f16: 2.0 ** -11, bf16: 2.0 ** -8, f32: 2.0 ** -24}[dtype]
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    assert not np.isnan(got).any(), "an output element was never written"
    err = np.abs(got - want)
    bad = err > atol + rtol * (np.abs(want) + atol)
    assert not bad.any(), f"{bad.sum()} elements out of bounds; worst error {err.max():.3g}"


@pytest.fixture
def poisoned(monkeypatch):
    """linear's outputs and partial sums start as NaN: an element no block writes shows."""
    monkeypatch.setattr(linear_module, "empty", lambda shape, dtype: fl.full(shape, np.nan, dtype))


@pytest.mark.parametrize("dtype,t,bias", [
    (bf16, 1, True), (bf16, 3, False), (bf16, 16, True), (bf16, 17, False), (bf16, 200, True),
    (f16, 3, True), (f16, 200, False), (f32, 1, False), (f32, 17, True)])
def test_default_plan_matches_float64(poisoned, dtype, t, bias):
    x, w, b = _inputs(t, K, N, dtype, seed=t)
    b = b if bias else None
    _check(linear(x, w, b).numpy(), x, w, b, dtype)


@pytest.mark.parametrize("variant,splits", [("mma", 4), ("mma_t", 1), ("mma_t", 2), ("sum", 1),
                                            ("sum", 2)])
def test_variants_and_split_k(poisoned, variant, splits):
    x, w, b = _inputs(5, K, N, bf16, seed=splits)
    got = linear(x, w, b, variant=variant, splits=splits, bk=32 if variant != "sum" else None)
    _check(got.numpy(), x, w, b, bf16, splits)


def test_split_prefill_tile_and_latency_hint(poisoned):
    x, w, _ = _inputs(40, K, N, f16, seed=7)
    _check(linear(x, w, tile=(32, 32), bk=16, splits=8, latency=3).numpy(), x, w, None, f16, 8)


def test_strided_views(poisoned):
    """x a column slice of a wider matrix (a fused projection's output), w a row slice."""
    xs, ws, b = _inputs(20, 3 * K, N + 8, bf16, seed=5)
    x, w = fl.asarray(xs)[:, K:2 * K], fl.asarray(ws)[4:N + 4, :K]
    _check(linear(x, w, b[:N]).numpy(), xs[:, K:2 * K], ws[4:N + 4, :K], b[:N], bf16)


def _f32_split_is_not_tf32():
    x, w, b = _inputs(3, K, N, f32, seed=3)
    _check(linear(x, w, b, variant="mma_t").numpy(), x, w, b, f32)
    x1 = np.full((1, 16), 1 + 2.0 ** -20, np.float32)   # not a TF32 value: 1 + 2**-20 is lost
    for t in (1, 40):  # the decode and the prefill schedule
        got = linear(np.repeat(x1, t, axis=0), np.ones((16, 16), np.float32)).numpy()
        assert np.all(got == np.float32(16 * (1 + 2.0 ** -20)))


def test_f32_split_is_not_tf32(poisoned):
    """The 3xTF32 split: one TF32 mma errs by up to 2**-11 relative; the bound allows 2**-20."""
    _f32_split_is_not_tf32()


@pytest.mark.gpu
def test_gpu_f32_split_is_not_tf32(poisoned):
    """As on the cpu: tileiras must keep c - (c - v) (no reassociation) and the three mma."""
    _f32_split_is_not_tf32()


def test_plan_chooses_from_t_and_n():
    p = linear_module.plan(1, 4096, 14336, bf16)
    assert (p.bm, p.splits) == (16, 8) and 4096 // p.bn * p.splits >= 2 * 132
    assert linear_module.plan(1, 128256, 4096, bf16).splits == 1
    assert (linear_module.plan(2048, 4096, 4096, bf16).bm,
            linear_module.plan(2048, 4096, 4096, bf16).bn) == (128, 128)
    small = linear_module.plan(128, 1024, 4096, bf16)  # 32 blocks of 64x64: K split in 8
    assert (small.bm, small.bn, small.splits) == (64, 64, 8)
    assert linear_module.plan(128, 1024, 64, bf16).splits == 1  # one K step: nothing to split


def test_empty_tokens_and_zero_k():
    assert linear(np.zeros((0, 8), np.float32), np.ones((4, 8), np.float32)).shape == (0, 4)
    b = np.arange(4, dtype=np.float32)
    got = linear(np.zeros((2, 0), np.float32), np.ones((4, 0), np.float32), b).numpy()
    assert np.array_equal(got, np.broadcast_to(b, (2, 4)))


def test_bad_input_is_refused_with_typed_errors():
    x, w, b = _inputs(2, 16, 8, bf16)
    with pytest.raises(ContractError, match=r"K = 15 != 16") as e:
        linear(x, w[:, :15])
    assert e.value.kernel == "linear" and e.value.param == "w"
    with pytest.raises(ArgumentTypeError, match="has dtype f16, but x has bf16"):
        linear(x, w.astype(np.float16))
    with pytest.raises(ArgumentTypeError, match="expects a 2-d tensor") as e:
        linear(x[0], w)
    assert e.value.param == "x"
    with pytest.raises(ArgumentTypeError, match="expects f16, bf16 or f32, got i32"):
        linear(x.astype(np.int32), w.astype(np.int32))
    with pytest.raises(ContractError, match=r"bias has shape \(7,\)"):
        linear(x, w, b[:7])
    with pytest.raises(ArgumentTypeError, match="expects a 1-d tensor") as e:
        linear(x, w, b.reshape(2, 4))
    assert e.value.param == "bias"
    with pytest.raises(ValueError, match="variant 'gemv'"):
        linear(x, w, variant="gemv")
    with pytest.raises(ValueError, match="splits = 3 is not a power of two"):
        linear(x, w, splits=3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [bf16, f16, f32])
@pytest.mark.parametrize("t", [1, 3, 16, 17, 200])
def test_gpu_torch_in_torch_out(dtype, t):
    torch = pytest.importorskip("torch")
    x, w, b = _inputs(t, 1000, 600, dtype, seed=t)
    tx, tw, tb = (torch.from_numpy(a.view(np.uint16) if dtype is bf16 else a).cuda()
                  for a in (x, w, b))
    if dtype is bf16:
        tx, tw, tb = (a.view(torch.bfloat16) for a in (tx, tw, tb))
    got = linear(tx, tw, tb)
    assert isinstance(got, torch.Tensor) and got.dtype == tx.dtype and got.shape == (t, 600)
    fl.synchronize()
    host = got.float().cpu().numpy()
    _check(host, x, w, b, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,splits", [("mma", 1), ("mma", 8), ("mma_t", 1), ("mma_t", 4),
                                            ("sum", 1), ("sum", 4)])
def test_gpu_decode_variants(poisoned, variant, splits):
    x, w, b = _inputs(4, 4096, 1024, bf16, seed=splits)
    got = linear(fl.asarray(x), fl.asarray(w), fl.asarray(b), variant=variant, splits=splits)
    _check(got.numpy(), x, w, b, bf16, splits)


@pytest.mark.gpu
def test_gpu_prefill_default_plan(poisoned):
    x, w, _ = _inputs(300, 2048, 1000, bf16, seed=11)
    _check(linear(fl.asarray(x), fl.asarray(w)).numpy(), x, w, None, bf16)
