"""fearless.nn.kv_cache_write: exactly the rows start[b] + s (s < S) inside the cache are written,
every other element keeps its bits, and the ownership is a compile-time proof."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import dtypes, nn
from fearless import tile as ft
from fearless.errors import (AliasError, ArgumentTypeError, ContractError, MovedError,
                             SafetyError)
from tests.nn._ref import call, cases, f64, rand
from tests.support import BACKENDS


def expected(kc, k, start):
    want = f64(kc).copy()
    for b in range(k.shape[0]):
        for s in range(k.shape[1]):
            r = start[b] + s
            if 0 <= r < kc.shape[1]:
                want[b, r] = f64(k[b, s])
    return want


# decode, a short chunk, prefill (partial steps)
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,s", cases([(1,), (3,)], [(40,)]))
def test_writes_exactly_the_rows(backend, dt, s):
    nb, ctx, heads, d = 4, 50, 2, 48               # Hkv * D = 96: partial column tiles too
    kc, vc = rand(dt, (nb, ctx, heads, d), 1), rand(dt, (nb, ctx, heads, d), 2)
    k, v = rand(dt, (nb, s, heads, d), 3), rand(dt, (nb, s, heads, d), 4)
    # at the start, in the middle, running past the end (the rest dropped), from before 0
    start = np.array([0, 7, ctx - 2, -2], np.int32)
    want_k, want_v = expected(kc, k, start), expected(vc, v, start)
    rk, rv = call(nn.kv_cache_write, kc, vc, k, v, start)
    np.testing.assert_array_equal(f64(rk.numpy()), want_k)
    np.testing.assert_array_equal(f64(rv.numpy()), want_v)
    if backend == "cpu":                        # NumPy caches: written in place
        np.testing.assert_array_equal(f64(kc), want_k)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,s,first", cases([(1, 0), (40, 0)], [(40, 10), (3, 47)]))
def test_host_start_writes_exactly_the_rows(backend, dt, s, first):
    nb, ctx, heads, d = 3, 50, 2, 48               # Hkv * D = 96: a partial column tile
    kc, vc = rand(dt, (nb, ctx, heads, d), 21), rand(dt, (nb, ctx, heads, d), 22)
    k, v = rand(dt, (nb, s, heads, d), 23), rand(dt, (nb, s, heads, d), 24)
    start = np.full(nb, first)
    want_k, want_v = expected(kc, k, start), expected(vc, v, start)
    rk, rv = call(nn.kv_cache_write, kc, vc, k, v, first)
    np.testing.assert_array_equal(f64(rk.numpy()), want_k)
    np.testing.assert_array_equal(f64(rv.numpy()), want_v)


def test_host_start_gives_whole_caches_back_and_refuses_rows_past_the_end():
    dt = dtypes.f32
    kc, vc = fl.asarray(rand(dt, (2, 8, 1, 16), 25)), fl.asarray(rand(dt, (2, 8, 1, 16), 26))
    k = fl.asarray(rand(dt, (2, 3, 1, 16), 27))
    kn, vn = nn.kv_cache_write(kc, vc, k, k, 5)
    assert kn.shape == vn.shape == (2, 8, 1, 16)
    with pytest.raises(MovedError):
        kc.numpy()
    np.testing.assert_array_equal(kn.numpy()[:, 5:], k.numpy())
    for bad in (6, -1):
        with pytest.raises(ContractError, match="do not fit a cache of 8 rows"):
            nn.kv_cache_write(kn, vn, k, k, bad)
    kn, vn = nn.kv_cache_write(kn, vn, k, k, 0)  # the refused calls left the caches usable
    np.testing.assert_array_equal(vn.numpy()[:, :3], k.numpy())


def test_views_of_projection_outputs_and_int64_start():
    """k and v as (B, S, Hkv, D) views of a fused (B * S, (Hq + 2 Hkv) D) qkv output."""
    dt, nb, s, hq, hkv, d, ctx = dtypes.bf16, 2, 3, 4, 2, 32, 16
    qkv = rand(dt, (nb * s, (hq + 2 * hkv) * d), 5)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(nb, s, hkv, d)
    v = qkv[:, (hq + hkv) * d:].reshape(nb, s, hkv, d)
    kc, vc = rand(dt, (nb, ctx, hkv, d), 6), rand(dt, (nb, ctx, hkv, d), 7)
    start = np.array([13, 2], np.int64)
    want_k, want_v = expected(kc, k, start), expected(vc, v, start)
    call(nn.kv_cache_write, kc, vc, k, v, start)
    np.testing.assert_array_equal(f64(kc), want_k)
    np.testing.assert_array_equal(f64(vc), want_v)


def test_fearless_caches_are_moved_and_handed_back():
    dt = dtypes.f32
    kc0, vc0 = rand(dt, (2, 8, 1, 16), 8), rand(dt, (2, 8, 1, 16), 9)
    kc, vc = fl.asarray(kc0.copy()), fl.asarray(vc0.copy())
    k, v = rand(dt, (2, 1, 1, 16), 10), rand(dt, (2, 1, 1, 16), 11)
    start = fl.asarray(np.array([3, 7], np.int32))
    kn, vn = nn.kv_cache_write(kc, vc, k, v, start)
    with pytest.raises(MovedError):
        kc.numpy()
    assert kn.shape == kc0.shape
    np.testing.assert_array_equal(kn.numpy(), expected(kc0, k, [3, 7]))
    kn, vn = nn.kv_cache_write(kn, vn, v, k, start)      # the new handles are usable again
    np.testing.assert_array_equal(vn.numpy(), expected(expected(vc0, v, [3, 7]), k, [3, 7]))

    with pytest.raises(MovedError):                       # a spent handle stays spent
        nn.kv_cache_write(kc, vn, k, v, start)


def test_a_refused_write_gives_both_caches_back():
    """A partition refused for the second cache (another live view of it) ends the first's and
    leaves both handles usable, unwritten (a review found them both spent)."""
    dt = dtypes.f32
    kc0, vc0 = rand(dt, (2, 8, 1, 16), 8), rand(dt, (2, 8, 1, 16), 9)
    kc, vc = fl.asarray(kc0.copy()), fl.asarray(vc0.copy())
    k, v = rand(dt, (2, 1, 1, 16), 10), rand(dt, (2, 1, 1, 16), 11)
    start = fl.asarray(np.array([3, 7], np.int32))
    held = vc[0]
    with pytest.raises(AliasError):
        nn.kv_cache_write(kc, vc, k, v, start)
    np.testing.assert_array_equal(kc.numpy(), kc0)
    np.testing.assert_array_equal(vc.numpy(), vc0)
    del held
    kn, _ = nn.kv_cache_write(kc, vc, k, v, start)
    np.testing.assert_array_equal(kn.numpy(), expected(kc0, k, [3, 7]))


@ft.kernel
def write_next_sequence(kc: ft.Out[dtypes.f32], k: ft.In[dtypes.f32], start: ft.In[dtypes.i32]):
    """What the ownership design refuses: a block writing the next sequence's cache."""
    b, r0, j = kc.tile_index
    _, span, w = kc.tile_shape
    row = ft.maximum(ft.minimum(ft.gather(start, b), span - 1), 0)
    ft.scatter(kc, (b + 1, r0 * span + row, j * w + ft.arange(w)), ft.load(k, (b, 0, j), (1, 1, w)).reshape((w,)))


@ft.kernel
def write_unclamped_row(kc: ft.Out[dtypes.f32], k: ft.In[dtypes.f32], start: ft.In[dtypes.i32]):
    """...and a row taken from data without the clamp that keeps it in the own tile."""
    b, r0, j = kc.tile_index
    _, span, w = kc.tile_shape
    ft.scatter(kc, (b, r0 * span + ft.gather(start, b), j * w + ft.arange(w)),
               ft.load(k, (b, 0, j), (1, 1, w)).reshape((w,)))


@pytest.mark.parametrize("kernel", [write_next_sequence, write_unclamped_row])
def test_writes_outside_the_own_rows_do_not_compile(kernel):
    kc = fl.zeros((2, 8, 16), dtypes.f32).partition((1, 16, 16))
    k = fl.zeros((2, 1, 16), dtypes.f32)
    with pytest.raises(SafetyError, match="scatter"):
        kernel(kc, k, fl.zeros(2, dtypes.i32)).sync()


def test_bad_input():
    kc = np.zeros((2, 8, 2, 16), np.float32)
    k = np.zeros((2, 1, 2, 16), np.float32)
    start = np.zeros(2, np.int32)
    with pytest.raises(ArgumentTypeError, match="kernel 'kv_cache_write', parameter 'k_cache'"):
        nn.kv_cache_write(kc[:, :, 0], kc, k, k, start)
    with pytest.raises(ArgumentTypeError, match="parameter 'k_cache'.*contiguous"):
        nn.kv_cache_write(kc[:, ::2], kc[:, ::2], k, k, start)
    with pytest.raises(ContractError, match="parameter 'v'"):
        nn.kv_cache_write(kc, kc.copy(), k, k[:, :, :1], start)
    with pytest.raises(ArgumentTypeError, match="parameter 'v'.*differs"):
        nn.kv_cache_write(kc, kc.copy(), k, k.astype(np.float16), start)
    with pytest.raises(ContractError, match="parameter 'start'"):
        nn.kv_cache_write(kc, kc.copy(), k, k, start[:1])
    with pytest.raises(ArgumentTypeError, match="parameter 'k'.*contiguous"):
        wide = np.zeros((2, 1, 2, 32), np.float32)
        nn.kv_cache_write(kc, kc.copy(), wide[..., ::2], wide[..., ::2], start)


@pytest.mark.gpu
def test_torch_decode_step():
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(0)
    kc = torch.randn(4, 4096, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    vc = torch.randn(4, 4096, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(4, 1, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    v = torch.randn(4, 1, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    start = torch.tensor([0, 100, 4095, 4096], device="cuda", dtype=torch.int32)
    want_k, want_v = kc.clone(), vc.clone()
    for b, r in enumerate(start.tolist()[:3]):
        want_k[b, r], want_v[b, r] = k[b, 0], v[b, 0]
    rk, rv = nn.kv_cache_write(kc, vc, k, v, start)
    torch.cuda.synchronize()
    assert rk is kc and torch.equal(kc, want_k) and torch.equal(vc, want_v)
    k = torch.randn(2, 2048, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    start = torch.tensor([5, 3000], device="cuda", dtype=torch.int32)   # the second overflows
    kc, vc = kc[:2].clone(), vc[:2].clone()
    want = kc.clone()
    want[0, 5:2053], want[1, 3000:] = k[0], k[1, :1096]
    nn.kv_cache_write(kc, vc, k, k, start)
    torch.cuda.synchronize()
    assert torch.equal(kc, want)


def test_a_refusal_after_the_caches_moved_gives_them_back():
    """A start already moved into a partition is refused by the kernel call, after the caches
    were moved into the write: both come back usable and unwritten; k with heads that are not
    contiguous is refused before the caches move at all."""
    dt = dtypes.f32
    kc0 = rand(dt, (2, 8, 2, 16), 8)
    kc, vc = fl.asarray(kc0.copy()), fl.asarray(kc0.copy())
    k = rand(dt, (2, 1, 2, 16), 10)
    start = fl.asarray(np.array([3, 7], np.int32))
    held = start.partition(2)
    with pytest.raises(MovedError, match="parameter 'start'"):
        nn.kv_cache_write(kc, vc, k, k, start)
    with pytest.raises(ArgumentTypeError, match="contiguous"):
        nn.kv_cache_write(kc, vc, np.swapaxes(rand(dt, (2, 1, 16, 2), 11), 2, 3), k, 0)
    np.testing.assert_array_equal(kc.numpy(), kc0)
    np.testing.assert_array_equal(vc.numpy(), kc0)
    kn, _ = nn.kv_cache_write(kc, vc, k, k, held.unpartition())
    np.testing.assert_array_equal(kn.numpy(), expected(kc0, k, [3, 7]))
