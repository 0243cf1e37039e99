"""fearless.nn.rope_kv_write (a decode token's RoPE, optional q/k norm, and KV-cache write in one
kernel) against the two kernels it replaces, rope (or qk_norm_rope) then kv_cache_write, run on
the cpu backend (tests/nn/test_rope.py, test_qk_norm_rope.py and test_kvcache.py check them
against float64 NumPy): the same values, and exactly the rows at the positions written."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import dtypes, nn
from fearless.errors import ArgumentTypeError, ContractError
from tests.nn._ref import call, cases, f64, host, rand
from tests.nn.test_qk_norm_rope import gpu_bound
from tests.nn.test_rope import same as same_rope
from tests.support import BACKENDS, on_cpu

EPS = 1e-6


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,normed,interleaved,hq,hkv,d", cases(
    [(False, False, 4, 2, 64), (True, False, 4, 2, 64)],
    [(True, True, 6, 3, 48), (False, False, 8, 8, 128)]))
def test_equals_rope_then_kv_cache_write(backend, dt, normed, interleaved, hq, hkv, d):
    """q, k, v as column views of one fused q | k | v output; positions at the first and last
    row, in the middle, and one past the cache (its row is not written)."""
    b, ctx = 4, 40
    qkv = rand(dt, (b, (hq + 2 * hkv) * d), 1, 2.0, 0.3)
    q = qkv[:, :hq * d].reshape(b, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(b, hkv, d)
    v = qkv[:, (hq + hkv) * d:].reshape(b, hkv, d)
    qw, kw = (rand(dt, (d,), 2, 0.5, 1.0), rand(dt, (d,), 3, 0.5, 1.0)) if normed else (None, None)
    kc, vc = rand(dt, (b, ctx, hkv, d), 4), rand(dt, (b, ctx, hkv, d), 5)
    cos, sin = nn.rope_tables(d, 300, 1000000.0)
    pos = np.array([0, 17, ctx - 1, ctx], np.int32)
    # the two kernels it replaces, on the cpu backend (the reference semantics): on the GPU
    # each kernel may contract x * c - rot * s into an fma or not, so two GPU kernels can
    # differ by two roundings where the sum cancels; each is within one of the cpu's values
    def reference():
        if normed:
            qr, kr = call(nn.qk_norm_rope, q, k, qw, kw, EPS, cos.numpy(), sin.numpy(), pos,
                          interleaved=interleaved)
        else:
            qr, kr = call(nn.rope, q, k, cos.numpy(), sin.numpy(), pos, interleaved=interleaved)
        want_k, want_v = call(nn.kv_cache_write, kc.copy(), vc.copy(), host(kr)[:, None],
                              np.ascontiguousarray(v)[:, None], pos)
        return host(qr), host(want_k), host(want_v)

    qr, want_k, want_v = on_cpu(reference)
    qo, kn, vn = call(nn.rope_kv_write, q, k, v, kc.copy(), vc.copy(), cos, sin, pos,
                      q_weight=qw, k_weight=kw, eps=EPS, interleaved=interleaved)
    assert qo.shape == q.shape and qo.dtype is dt and kn.shape == vn.shape == kc.shape

    def same(got, want, x, w):
        """test_rope's bound; with the norm on the GPU, test_qk_norm_rope's: the fused
        kernel's sum of squares goes in another order than the cpu backend's."""
        if not normed or backend == "cpu":
            return same_rope(backend, dt, got, want)
        scaled = on_cpu(lambda: host(call(nn.rms_norm, np.ascontiguousarray(x), w, EPS)))
        np.testing.assert_allclose(got, want, **gpu_bound(dt, d, f64(scaled)))

    same(host(qo), f64(qr), q, qw)
    np.testing.assert_array_equal(f64(vn.numpy()), f64(want_v))  # a copy: exact
    got_k, exp_k = f64(kn.numpy()), f64(want_k)
    rows = [(s, r) for s, r in enumerate(pos) if r < ctx]
    untouched = np.ones((b, ctx), bool)
    for s, r in rows:
        untouched[s, r] = False
        same(got_k[s, r], exp_k[s, r], k, kw)
    np.testing.assert_array_equal(got_k[untouched], f64(kc)[untouched])


def test_bad_arguments_are_refused_before_anything_runs():
    dt = dtypes.f32
    q, k = rand(dt, (2, 4, 64), 1), rand(dt, (2, 2, 64), 2)
    kc = rand(dt, (2, 16, 2, 64), 3)
    cos, sin = nn.rope_tables(64, 32, 10000.0)
    pos = np.array([1, 2], np.int32)
    with pytest.raises(ContractError, match="parameter 'v'"):
        nn.rope_kv_write(q, k, k[:, :1], kc, kc.copy(), cos, sin, pos)
    with pytest.raises(ContractError, match="parameter 'k_cache'"):
        nn.rope_kv_write(q, k, k, kc[:, :, :1], kc.copy(), cos, sin, pos)
    with pytest.raises(ArgumentTypeError, match="parameter 'v_cache'"):
        nn.rope_kv_write(q, k, k, kc, kc.astype(np.float16), cos, sin, pos)
    with pytest.raises(ContractError, match="parameter 'k_weight'"):
        nn.rope_kv_write(q, k, k, kc, kc.copy(), cos, sin, pos, q_weight=q[0, 0],
                         k_weight=q[0, 0, :32], eps=EPS)


def test_a_refused_launch_gives_the_caches_back():
    """The caches are moved into the call before the kernel checks its other arguments: a
    refusal there (q already moved into another partition) ends their partitions and leaves
    both handles usable and unwritten."""
    import fearless as fl
    from fearless.errors import MovedError
    dt = dtypes.f32
    q, k = fl.asarray(rand(dt, (2, 4, 64), 1)), rand(dt, (2, 2, 64), 2)
    kc0 = rand(dt, (2, 16, 2, 64), 3)
    kc, vc = fl.asarray(kc0.copy()), fl.asarray(kc0.copy())
    cos, sin = nn.rope_tables(64, 32, 10000.0)
    pos = fl.asarray(np.array([1, 2], np.int32))
    held = q.partition((1, 4, 64))
    with pytest.raises(MovedError, match="parameter 'q'"):
        nn.rope_kv_write(q, k, k, kc, vc, cos, sin, pos)
    np.testing.assert_array_equal(kc.numpy(), kc0)
    _, kn, vn = nn.rope_kv_write(held.unpartition(), k, k, kc, vc, cos, sin, pos)
    np.testing.assert_array_equal(vn.numpy()[0, 1], k[0])     # v (here k) at row pos[b]
    np.testing.assert_array_equal(vn.numpy()[1, 2], k[1])
    np.testing.assert_array_equal(vn.numpy()[0, 2:], kc0[0, 2:])
    with pytest.raises(ArgumentTypeError, match="come together"):
        nn.rope_kv_write(q, k, k, kn, vn, cos, sin, pos, q_weight=np.ones(64, np.float32))
