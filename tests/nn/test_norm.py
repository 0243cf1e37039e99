"""fearless.nn.rms_norm against a float64 NumPy reference of HF's LlamaRMSNorm steps."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from tests.support import BACKENDS
from fearless import nn
from fearless.errors import ArgumentTypeError, ContractError
from tests.nn._ref import FLOATS, call, cases, f64, host, rand, rnd, tiny, unit


def reference(h: np.ndarray, w: np.ndarray, eps: float):
    """(exact y = w * h / rms(h) in float64, its magnitude) for rows along the last axis."""
    x = f64(h)
    n = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return f64(w) * n


def check(got, h, w, eps, dt):
    """|got - exact| <= |exact| (d + 2.01 u) + 2 s: the f32 steps (sum of squares over n
    elements, rsqrt, products: d <= (n + 8) 2^-24 relative) and two roundings to the dtype
    (n.to(dtype), w * n), each off by at most s (the dtype's subnormal spacing) absolutely
    where the result is subnormal."""
    n = h.shape[-1]
    want = reference(h, w, eps)
    d = (n + 8) * 2.0 ** -24
    bound = np.abs(want) * (d + 2.01 * unit(dt)) + 2 * tiny(dt)
    err = np.abs(f64(got) - want)
    assert not np.isnan(f64(got)).any()
    assert (err <= bound).all(), f"max error {err.max()}, bound there {bound.flat[err.argmax()]}"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,shape", cases([((3, 700),)], [((5, 64),), ((2, 4096),)]))
def test_rows(backend, dt, shape):
    x, w = rand(dt, shape, 1, 2.0, 0.5), rand(dt, shape[1:], 2, 1.0, 1.0)
    y = call(nn.rms_norm, x, w, 1e-6)
    assert y.shape == shape and y.dtype is dt
    check(host(y), x, w, 1e-6, dt)


@pytest.mark.parametrize("dt", FLOATS[:2])
def test_rounds_where_hf_rounds(dt):
    """The two roundings of HF's steps, emulated from float64: the f32 arithmetic before the
    first perturbs n by at most d = (n + 8) 2^-24 relative, which moves it across a rounding
    boundary of the dtype with probability about d / u (0.2% for bf16 here); without the
    rounding of n (w * n in f32, rounded once) a quarter of the elements differ."""
    x, w = rand(dt, (64, 64), 10, 2.0), rand(dt, (64,), 11, 1.0, 1.0)
    got = f64(host(call(nn.rms_norm, x, w, 1e-6)))
    n = f64(x) / np.sqrt(np.mean(f64(x) ** 2, axis=-1, keepdims=True) + 1e-6)
    want = f64(rnd(f64(rnd(n, dt)) * f64(w), dt))
    assert np.mean(got != want) < 0.02


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", FLOATS)
def test_residual_is_rounded_before_the_norm(backend, dt):
    shape = (7, 300)
    x, r, w = rand(dt, shape, 3, 3.0), rand(dt, shape, 4, 3.0), rand(dt, (300,), 5)
    y, h = call(nn.rms_norm, x, w, 1e-5, residual=r)
    want_h = rnd(f64(x) + f64(r), dt)           # one rounding of the exact sum
    np.testing.assert_array_equal(f64(host(h)), f64(want_h))
    check(host(y), want_h, w, 1e-5, dt)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", FLOATS)
def test_heads_of_a_strided_view(backend, dt):
    """Qwen3's q norm: (T, heads, D) of a strided view of the projection output, w (D,)."""
    t, heads, d = 3, 6, 64
    proj = rand(dt, (t, (heads + 2) * d), 6, 2.0)
    q = proj[:, d:(heads + 1) * d].reshape(t, heads, d)      # a NumPy view with a row stride
    w = rand(dt, (d,), 7, 1.0, 1.0)
    y = call(nn.rms_norm, q, w, 1e-6)
    assert y.shape == (t, heads, d)
    check(host(y), q, w, 1e-6, dt)


def test_eps_matters():
    """A row of tiny values: eps dominates the variance (y ~ x / sqrt(eps) * w)."""
    dt = fl.f32
    x, w = rand(dt, (2, 32), 8, 1e-4), rand(dt, (32,), 9)
    check(host(call(nn.rms_norm, x, w, 1e-2)), x, w, 1e-2, dt)


def test_bad_input():
    x = rand(fl.bf16, (4, 32), 1)
    with pytest.raises(ArgumentTypeError, match="kernel 'rms_norm', parameter 'x'"):
        nn.rms_norm(x[0], x[0], 1e-6)
    with pytest.raises(ArgumentTypeError, match="parameter 'w'.*differs from x's bf16"):
        nn.rms_norm(x, np.ones(32, np.float32), 1e-6)
    with pytest.raises(ContractError, match="parameter 'w'.*expected \\(32,\\)"):
        nn.rms_norm(x, x[0, :16], 1e-6)
    with pytest.raises(ContractError, match="parameter 'residual'"):
        nn.rms_norm(x, x[0], 1e-6, residual=x[:2])
    with pytest.raises(ArgumentTypeError, match="parameter 'x'.*i32 is not supported"):
        nn.rms_norm(np.ones((2, 4), np.int32), np.ones(4, np.int32), 1e-6)
    with pytest.raises(ArgumentTypeError, match="parameter 'residual'"):
        nn.rms_norm(x.reshape(4, 2, 16), x[0, :16], 1e-6, residual=x.reshape(4, 2, 16))


@pytest.mark.gpu
@pytest.mark.parametrize("dt", FLOATS)
def test_torch_in_torch_out(dt):
    torch = pytest.importorskip("torch")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt.name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(9, 2048, device="cuda", generator=g).to(tdt)
    r = torch.randn(9, 2048, device="cuda", generator=g).to(tdt)
    w = torch.randn(2048, device="cuda", generator=g).to(tdt)
    y, h = nn.rms_norm(x, w, 1e-6, residual=r)
    assert isinstance(y, torch.Tensor) and y.dtype == tdt and y.device == x.device
    torch.testing.assert_close(h, x + r, rtol=0, atol=0)   # the same one rounding as torch's
    hf = h.float()
    want = w * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(tdt)
    check(host(y), host(h), host(w), 1e-6, dt)
    assert (y != want).float().mean() < 0.01     # HF's own computation: a rare 1-ulp flip
