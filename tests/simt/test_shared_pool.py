"""Static shared arrays over 48 KB: they move to dynamic shared memory, and launches opt in.

PTX lets a block declare at most 48 KB of static shared memory; above that the LLVM backend
places the kernel's static arrays at the start of ``__fl_dynamic_shared`` and every launch asks
for their bytes (after them comes a ``fl.shared.dynamic`` array, if any).
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.ir import types as T
from fearless.backends.llvm.shared_pool import pooled_bytes

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
BIG = 16384 + 4096  # 80 KB of f32 in two arrays


@fl.kernel(contract=fl.Contract(dims=1, block=256))
def reverse_big(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    """out = x[::-1] within each block's BIG elements, through 80 KB of shared memory."""
    t = fl.thread.index_in_block()
    a = fl.shared.array(16384, f32)
    b = fl.shared.array(4096, f32)
    base = fl.thread.block_index() * BIG
    for k in range(BIG // 256):
        j = k * 256 + t
        v = x[base + j] if base + j < len(x) else 0.0
        if j < 16384:
            a[j] = v
        else:
            b[j - 16384] = v
    fl.sync_threads()
    for k in range(BIG // 256):
        j = k * 256 + t
        r = BIG - 1 - j
        v = a[r] if r < 16384 else b[r - 16384]
        if base + j < len(out):
            out[base + j] = v


@fl.kernel(contract=fl.Contract(dims=1, block=256, dynamic_shared=(1024, 4096)))
def big_and_dynamic(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    """out[i] = x[i] + 1, round-tripped through a 64 KB static array and a dynamic one."""
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    big = fl.shared.array(16384, f32)
    dyn = fl.shared.dynamic(f32)
    big[t] = x[i] if i < len(x) else 0.0
    dyn[t] = 1.0
    fl.sync_threads()
    if i < len(out):
        out[i] = big[t] + dyn[t]


def _launch_reverse(n):
    blocks = -(-n // BIG)
    return reverse_big.prepare(blocks * 256)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_80_kb_of_static_shared_memory(backend):
    x = np.random.default_rng(5).random(2 * BIG, np.float32)
    out = fl.full(2 * BIG, np.nan, f32)
    reverse_big[_launch_reverse(x.size)](fl.asarray(x), out)
    want = np.concatenate([x[:BIG][::-1], x[BIG:][::-1]])
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_dynamic_array_comes_after_the_pooled_static_ones(backend):
    x = np.random.default_rng(6).random(1000, np.float32)
    out = fl.full(1000, np.nan, f32)
    big_and_dynamic[big_and_dynamic.prepare(1000, shared=1024)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x + np.float32(1))


def test_the_ptx_declares_no_static_shared_array_over_48_kb():
    s1 = T.Array(f32, 1, T.Access.READ, True)
    d1 = T.Array(f32, 1, T.Access.DISJOINT, True)
    ptx = reverse_big.inspect("ptx", (s1, d1))
    assert "__fl_dynamic_shared" in ptx and "__fl_shared[" not in ptx
    assert pooled_bytes((("a", (16384,), "f32"), ("b", (4096,), "f32"))) == 4 * BIG
    assert pooled_bytes((("a", (4096,), "f32"),)) == 0  # under 48 KB: a static global
