"""fearless.nn.qk_norm_rope (Qwen3's per-head q/k RMSNorm and RoPE in one kernel) against HF's
rope steps (tests/nn/test_rope.py's float64 emulation) applied to fearless.nn.rms_norm's output,
which tests/nn/test_norm.py checks against float64 NumPy: the fused kernel must take the same
rounding steps as the two kernels it replaces."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import dtypes, nn
from fearless.errors import ArgumentTypeError, ContractError
from tests.nn._ref import call, cases, f64, host, rand, unit
from tests.nn.test_rope import reference, same
from tests.support import BACKENDS

EPS = 1e-6


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,interleaved,hq,hkv,d", cases(
    [(False, 4, 2, 64), (True, 4, 2, 64)], [(False, 6, 1, 128), (True, 3, 3, 48)]))
def test_equals_rope_of_the_norms(backend, dt, interleaved, hq, hkv, d):
    """q and k as column views of one fused q | k | v output, as the model passes them."""
    t = 5
    qkv = rand(dt, (t, (hq + 2 * hkv) * d), 1, 2.0, 0.3)
    q = qkv[:, :hq * d].reshape(t, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(t, hkv, d)
    qw, kw = rand(dt, (d,), 2, 0.5, 1.0), rand(dt, (d,), 3, 0.5, 1.0)
    cos, sin = nn.rope_tables(d, 300, 1000000.0)
    pos = np.array([0, 1, 299, 17, 5], np.int32)
    qo, ko = call(nn.qk_norm_rope, q, k, qw, kw, EPS, cos, sin, pos, interleaved=interleaved)
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype is dt
    c, s = cos.numpy(), sin.numpy()
    for got, x, w in ((qo, q, qw), (ko, k, kw)):
        normed = host(call(nn.rms_norm, np.ascontiguousarray(x), w, EPS))
        want = reference(normed, c, s, pos, dt, interleaved)
        if backend == "cpu":
            same(backend, dt, host(got), want)
        else:
            np.testing.assert_allclose(f64(got), want, **gpu_bound(dt, d, f64(normed)))


def gpu_bound(dt, d: int, normed: np.ndarray) -> dict:
    """On the GPU the fused kernel's norm and rms_norm's are two kernels whose sums of d
    squares tileiras adds in different orders: each sum is within (d - 1) u of the exact one
    (u = 2^-24, f32 accumulation), so the two mean squares differ by at most 2 (d - 1) u, their
    reciprocal square roots by half that plus each rsqrt's own error (2 ulps each): (d + 3) u
    between the two scales. RoPE then adds its two roundings of ``dt`` (test_rope's bound), and
    x c - rot s can cancel, so the bound is relative to the terms: |x| + |rot| <= 2 max|x|."""
    rtol = 2 * unit(dt) + (d + 3) * 2.0 ** -24
    return dict(rtol=rtol, atol=2 * rtol * float(np.abs(normed).max()))


def test_bad_weights():
    dt = dtypes.bf16
    q, k = rand(dt, (2, 4, 64), 1), rand(dt, (2, 2, 64), 2)
    cos, sin = nn.rope_tables(64, 16, 10000.0)
    pos = np.array([0, 1], np.int32)
    with pytest.raises(ContractError, match="k_weight"):
        nn.qk_norm_rope(q, k, rand(dt, (64,), 3), rand(dt, (32,), 4), EPS, cos, sin, pos)
    with pytest.raises(ArgumentTypeError, match="q_weight"):
        nn.qk_norm_rope(q, k, rand(dtypes.f32, (64,), 3), rand(dt, (64,), 4), EPS, cos, sin,
                        pos)
    with pytest.raises(ContractError, match="positions"):
        nn.qk_norm_rope(q, k, rand(dt, (64,), 3), rand(dt, (64,), 4), EPS, cos, sin, pos[:1])
