"""fearless.nn.silu_mul and add against float64 NumPy with HF's rounding steps."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import nn
from tests.support import BACKENDS
from fearless import dtypes
from fearless.errors import ArgumentTypeError, ContractError
from tests.nn._ref import call, cases, f64, host, rand, rnd, tiny, unit

# docs/semantics.md: the tile exp is within 2 ulp of f32 on the GPU (the CPU's is exact)
EXP_ULPS = 2


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,shape", cases([((3, 200),)], [((1, 6144),), ((2, 3, 40),), ((77,),)]))
def test_silu_mul(backend, dt, shape):
    g, u = rand(dt, shape, 1, 3.0), rand(dt, shape, 2, 2.0)
    got = f64(host(call(nn.silu_mul, g, u)))
    s = f64(g) / (1 + np.exp(-f64(g)))
    # s in f32 is off by at most (EXP_ULPS + 3) 2^-24 relative (exp, 1 +, /; 1 + e adds no
    # more than e's error to the sum's), then two roundings to the dtype
    d = (EXP_ULPS + 3) * 2.0 ** -24
    want = s * f64(u)
    bound = np.abs(want) * (d + 2.01 * unit(dt)) + 2 * tiny(dt)
    assert (np.abs(got - want) <= bound).all()
    if dt is not dtypes.f32:       # the rounding of s happens (a few near-ties may flip)
        emulated = f64(rnd(f64(rnd(s, dt)) * f64(u), dt))
        assert np.mean(got != emulated) < 0.02


def test_silu_mul_strided_views():
    """gate and up as the two halves of one fused projection output (column views)."""
    dt = dtypes.bf16
    gu = rand(dt, (4, 2 * 96), 3, 2.0)
    got = f64(host(call(nn.silu_mul, gu[:, :96], gu[:, 96:])))
    g, u = f64(gu[:, :96]), f64(gu[:, 96:])
    want = f64(rnd(f64(rnd(g / (1 + np.exp(-g)), dt)) * u, dt))
    assert np.mean(got != want) < 0.02
    np.testing.assert_allclose(got, want, rtol=3 * unit(dt), atol=1e-30)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,shape", cases([((5, 300),)], [((2, 2, 1000),), ((33,),)]))
def test_add_rounds_once(backend, dt, shape):
    a, b = rand(dt, shape, 4, 100.0), rand(dt, shape, 5, 0.01)
    got = host(call(nn.add, a, b))
    np.testing.assert_array_equal(f64(got), f64(rnd(f64(a) + f64(b), dt)))


def test_bad_input():
    a = rand(dtypes.f16, (4, 8), 1)
    with pytest.raises(ContractError, match="kernel 'silu_mul', parameter 'up'"):
        nn.silu_mul(a, a[:2])
    with pytest.raises(ArgumentTypeError, match="kernel 'add', parameter 'b'.*differs"):
        nn.add(a, a.astype(np.float32))
    with pytest.raises(ArgumentTypeError, match="kernel 'add', parameter 'a'.*rank 1 to 3"):
        nn.add(a.reshape(1, 1, 4, 8), a.reshape(1, 1, 4, 8))
