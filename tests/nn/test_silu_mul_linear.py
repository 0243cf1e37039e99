"""fearless.nn.silu_mul_linear: bit for bit ``linear(silu_mul(gate, up), w, bias)`` on every
schedule (the fused decode kernel at T <= 16, with and without the K split and its reducing
kernel; the two kernels of prefill), f16/bf16/f32, with and without bias, gate and up as column
views of one (T, 2I) output; within linear's bound of float64 NumPy; bad input refused with
typed errors. Each case runs on the cpu backend (compiled for sm_80 and sm_90 first:
``_ref.call``) and on the GPU (marked ``gpu``)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32
from fearless.errors import ArgumentTypeError, ContractError
from fearless.models import launches
from fearless.nn import linear, silu_mul, silu_mul_linear
from tests.nn._ref import call, cases, f64, host, rand, tiny, unit
from tests.nn.test_act import EXP_ULPS
from tests.nn.test_linear import check
from tests.support import BACKENDS

plan = importlib.import_module("fearless.nn.linear").plan  # the module, not nn's function
I, N = 300, 136          # I: one K step (bk 256, f32 128) and a part of another
SPLIT_I = 2400           # N 136 at T <= 16: 3 blocks of y, so plan splits K in 4


def inputs(dt, t, i=I, n=N, seed=0):
    """(gu (T, 2I): gate | up side by side, as the fused projection writes them; w; bias)."""
    return rand(dt, (t, 2 * i), seed, 2.0), rand(dt, (n, i), seed + 1), \
        rand(dt, (n,), seed + 2)


def halves(gu, i):
    """gate and up: the column views gu[:, :i] and gu[:, i:] (strided, not copies)."""
    g = fl.asarray(gu) if isinstance(gu, np.ndarray) else gu
    return g[:, :i], g[:, i:]


def bits(y) -> np.ndarray:
    """The raw bits of a result (poisoned outputs must not show: NaN is no value here)."""
    a = np.ascontiguousarray(host(y))
    assert not np.isnan(a.astype(np.float32)).any(), "an output element was never written"
    return a.view(f"u{a.dtype.itemsize}")


def assert_same_as_two_calls(gu, w, b, i):
    gate, up = halves(gu, i)
    y = call(silu_mul_linear, gate, up, w, b)
    assert y.shape == (gate.shape[0], w.shape[0]) and y.dtype == gate.dtype
    want = call(linear, call(silu_mul, gate, up), w, b)
    np.testing.assert_array_equal(bits(y), bits(want))
    return y


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,t,bias", cases([(1, False), (3, True), (16, True), (17, False)],
                                            [(1, True), (16, False), (40, True)]))
def test_bit_identical_to_silu_mul_then_linear(backend, dt, t, bias):
    gu, w, b = inputs(dt, t, seed=t)
    assert_same_as_two_calls(gu, w, b if bias else None, I)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [bf16, f32], ids=["bf16", "f32"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_split_k_and_its_reducing_kernel(backend, dt, bias):
    """plan splits K in 4 for N 136, and the last split runs past K (bf16: 10 chunks of 256
    in 4 splits of 3; f32: 19 of 128 in 4 of 5): those chunks must stay zeros through silu."""
    p = plan(3, N, SPLIT_I, dt)
    chunks = -(-SPLIT_I // p.bk)
    assert p.splits == 4 and -(-chunks // p.splits) * p.splits > chunks
    gu, w, b = inputs(dt, 3, SPLIT_I, seed=5)
    assert_same_as_two_calls(gu, w, b if bias else None, SPLIT_I)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("t,i,kernels", [
    (3, I, ["_linear_tiles"]), (3, SPLIT_I, ["_linear_tiles", "_linear_reduce"]),
    (17, I, ["silu_mul_tiles", "_linear_tiles"])], ids=["decode", "split", "prefill"])
def test_launches_saved_at_decode_only(backend, t, i, kernels):
    """silu_mul's kernel runs only at prefill. Contiguous gate and up (an unfused model's two
    projections) work as the views do."""
    gu, w, _ = inputs(bf16, t, i, seed=9)
    gate, up = np.ascontiguousarray(gu[:, :i]), np.ascontiguousarray(gu[:, i:])
    with launches.counting() as names:
        y = silu_mul_linear(gate, up, w)
    assert names == kernels
    np.testing.assert_array_equal(bits(y), bits(linear(silu_mul(gate, up), w)))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,t,i", cases([(3, I)], [(1, I), (16, SPLIT_I), (17, I)]))
def test_within_linear_bound_of_float64(backend, dt, t, i):
    """Against float64 NumPy: a = silu(g) * u exact; silu_mul's rounded values are within
    rel |a| + 2 tiny of it (test_act's derivation: f32 silu within (EXP_ULPS + 3) 2^-24, then
    two roundings to the dtype), and linear's bound (test_linear.check) holds on top."""
    gu, w, b = inputs(dt, t, i, seed=20 + t)
    gate, up = halves(gu, i)
    y = call(silu_mul_linear, gate, up, w, b)
    g, u = f64(gu[:, :i]), f64(gu[:, i:])
    a = g / (1.0 + np.exp(-g)) * u
    rel = (EXP_ULPS + 3) * 2.0 ** -24 + 2.01 * unit(dt)
    check(host(y), a, w, b, dt, plan(t, N, i, dt).splits, rel, 2 * tiny(dt))


def test_empty_tokens():
    z = np.zeros((0, 8), np.float32)
    assert silu_mul_linear(z, z, np.ones((4, 8), np.float32)).shape == (0, 4)


@pytest.mark.parametrize("t", [2, 20], ids=["decode", "prefill"])
def test_bad_input_is_refused_with_typed_errors(t):
    """Checked before either schedule: the errors name silu_mul_linear, not the calls inside."""
    gu, w, b = inputs(bf16, t, 16, 8)
    gate, up = gu[:, :16], gu[:, 16:]
    name = "kernel 'silu_mul_linear', parameter"
    with pytest.raises(ContractError, match=rf"{name} 'up'.*expected \({t}, 16\)"):
        silu_mul_linear(gate, up[:, :15], w)
    with pytest.raises(ArgumentTypeError, match=f"{name} 'up'.*differs from gate's bf16"):
        silu_mul_linear(gate, up.astype(np.float16), w)
    with pytest.raises(ContractError, match=rf"{name} 'w'.*expected \(\?, 16\)"):
        silu_mul_linear(gate, up, w[:, :15])
    with pytest.raises(ArgumentTypeError, match=f"{name} 'w'.*differs from gate's bf16"):
        silu_mul_linear(gate, up, w.astype(np.float32))
    with pytest.raises(ArgumentTypeError, match=f"{name} 'gate'.*rank-2"):
        silu_mul_linear(gate[None], up[None], w)
    with pytest.raises(ArgumentTypeError, match=f"{name} 'gate'.*i32 is not supported"):
        silu_mul_linear(gate.astype(np.int32), up.astype(np.int32), w.astype(np.int32))
    with pytest.raises(ContractError, match=rf"{name} 'bias'.*expected \(8,\)"):
        silu_mul_linear(gate, up, w, b[:7])


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [bf16, f16, f32], ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("t", [1, 4, 16, 17])
def test_torch_in_torch_out_at_model_size(dt, t):
    """Qwen3-1.7B's down projection (I 6144, N 2048; one kernel, no split) on torch tensors:
    gate and up the halves of one torch tensor, the same bits as the two calls."""
    torch = pytest.importorskip("torch")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt.name]
    gu, w, b = inputs(dt, t, 6144, 2048, seed=t)
    tgu, tw, tb = (torch.from_numpy(f64(a)).cuda().to(tdt) for a in (gu, w, b))
    y = call(silu_mul_linear, tgu[:, :6144], tgu[:, 6144:], tw, tb)
    assert isinstance(y, torch.Tensor) and y.dtype == tdt and y.shape == (t, 2048)
    want = call(linear, call(silu_mul, tgu[:, :6144], tgu[:, 6144:]), tw, tb)
    np.testing.assert_array_equal(bits(y), bits(want))
