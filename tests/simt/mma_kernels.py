"""Kernels for the tensor-core and async-copy tests (``test_mma.py``): one warp multiplies a
16x16 A by a 16x8 B (row-major f16/bf16 inputs), through packed registers or through async
copies into shared memory and ldmatrix."""
from __future__ import annotations

from typing import TypeVar

import fearless as fl
from fearless import f16, f32, u32


@fl.func
def store_d(d, acc):
    """Write a 16x8 f32 accumulator fragment to a row-major 16x8 output."""
    lane = fl.warp.lane()
    g, t = lane // 4, lane % 4
    with fl.unsafe():
        d[g * 8 + 2 * t] = acc[0]
        d[g * 8 + 2 * t + 1] = acc[1]
        d[(g + 8) * 8 + 2 * t] = acc[2]
        d[(g + 8) * 8 + 2 * t + 1] = acc[3]


@fl.kernel(contract=fl.Contract(dims=1, block=32))
def mma_packed(a: fl.Slice[f16], b: fl.Slice[f16], c: fl.Slice[f32], d: fl.UnsafeSlice[f32]):
    lane = fl.warp.lane()
    g, t = lane // 4, lane % 4
    frag_a = (fl.mma.pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
              fl.mma.pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
              fl.mma.pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
              fl.mma.pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]))
    frag_b = (fl.mma.pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
              fl.mma.pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]))
    frag_c = tuple(c[(g + 8 * (i // 2)) * 8 + 2 * t + i % 2] for i in range(4))
    store_d(d, fl.mma.sync_m16n8k16(frag_a, frag_b, frag_c))


T = TypeVar("T")


@fl.kernel(contract=fl.Contract(dims=1, block=32))
def mma_shared(a: fl.Slice[T], b: fl.Slice[T], d: fl.UnsafeSlice[f32]):
    t = fl.thread.index_in_block()
    lane = fl.warp.lane()
    sa = fl.shared.array(256, a.dtype)     # A, 16 x 16 row-major: 32 chunks of 8
    sb = fl.shared.array(128, a.dtype)     # B, 16 x 8 row-major: 16 chunks of 8
    fl.async_copy(sa, t, a, t * 8)
    if t < 16:
        fl.async_copy(sb, t, b, t * 8, size=16, cache="ca")
    fl.async_commit()
    fl.async_wait(0)
    fl.sync_threads()
    frag_a = fl.mma.ldmatrix(sa, (lane % 16) * 16 + (lane // 16) * 8)
    frag_b = fl.mma.ldmatrix(sb, (lane % 16) * 8, count=2, trans=True)
    zero = fl.f32(0.0)
    store_d(d, fl.mma.sync_m16n8k16(frag_a, frag_b, (zero, zero, zero, zero),
                                    dtype=a.dtype))


@fl.kernel(contract=fl.Contract(dims=1, block=32))
def ldmatrix_x4(src: fl.Slice[f16], out: fl.UnsafeSlice[fl.u32], trans: fl.i32):
    """Four 8x8 matrices (a 32 x 8 row-major source); lane l gives row l. Writes each lane's
    registers (4 per lane) for the test to compare with the PTX layout."""
    t = fl.thread.index_in_block()
    s = fl.shared.array(256, f16)
    fl.async_copy(s, t, src, t * 8)
    fl.async_commit()
    fl.async_wait()
    fl.sync_threads()
    r = fl.mma.ldmatrix(s, t * 8)
    if trans:
        r = fl.mma.ldmatrix(s, t * 8, trans=True)
    with fl.unsafe():
        for k in range(4):
            out[t * 4 + k] = r[0] if k == 0 else (r[1] if k == 1 else (r[2] if k == 2 else r[3]))


@fl.kernel(contract=fl.Contract(dims=1, block=64))
def pipelined(a: fl.Slice[f16], out: fl.UnsafeSlice[f32], steps: fl.i64):
    """A two-stage async pipeline over ``steps`` chunks of 64 x 8 elements, with one shared
    array per stage (the analysis counts groups per array): sums each chunk's row t."""
    t = fl.thread.index_in_block()
    s0 = fl.shared.array(512, f16)
    s1 = fl.shared.array(512, f16)
    acc = fl.f32(0.0)
    fl.async_copy(s0, t, a, t * 8)
    fl.async_commit()
    for step in range(0, steps, 2):
        if step + 1 < steps:
            fl.async_copy(s1, t, a, (step + 1) * 512 + t * 8)
        fl.async_commit()
        fl.async_wait(1)
        fl.sync_threads()
        for e in range(8):
            acc += fl.f32(s0[((t + 1) % 64) * 8 + e])   # a neighbour's chunk
        fl.sync_threads()
        if step + 2 < steps:
            fl.async_copy(s0, t, a, (step + 2) * 512 + t * 8)
        fl.async_commit()
        fl.async_wait(1)
        fl.sync_threads()
        if step + 1 < steps:
            for e in range(8):
                acc += fl.f32(s1[((t + 1) % 64) * 8 + e])
        fl.sync_threads()
    with fl.unsafe():
        out[t] = acc


# refused ----------------------------------------------------------------------------------

@fl.kernel
def mma_divergent(a: fl.Slice[f32], d: fl.UnsafeSlice[f32]):
    lane = fl.warp.lane()
    r = fl.mma.pack(fl.f16(1.0), fl.f16(2.0))
    z = fl.f32(0.0)
    if lane < 16:
        acc = fl.mma.sync_m16n8k16((r, r, r, r), (r, r), (z, z, z, z))
        with fl.unsafe():
            d[lane] = acc[0]


@fl.kernel
def read_before_wait(a: fl.Slice[f16], d: fl.UnsafeSlice[f16]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(256, f16)
    fl.async_copy(s, t, a, t * 8)
    fl.async_commit()
    fl.sync_threads()
    v = s[t * 8]
    with fl.unsafe():
        d[t] = v


@fl.kernel
def wait_without_barrier(a: fl.Slice[f16], d: fl.UnsafeSlice[u32]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(256, f16)
    fl.async_copy(s, t, a, t * 8)
    fl.async_commit()
    fl.async_wait(0)
    r = fl.mma.ldmatrix(s, t * 8, count=1)
    with fl.unsafe():
        d[t] = r[0]


@fl.kernel
def copy_not_own(a: fl.Slice[f16], d: fl.UnsafeSlice[f16]):
    t = fl.thread.index_in_block()
    s = fl.shared.array(256, f16)
    fl.async_copy(s, t + 1, a, t * 8)


@fl.kernel
def one_stage_pipeline(a: fl.Slice[f16], d: fl.UnsafeSlice[f16], steps: fl.i64):
    t = fl.thread.index_in_block()
    s = fl.shared.array(256, f16)
    fl.async_copy(s, t, a, t * 8)
    fl.async_commit()
    for step in range(steps):
        fl.async_copy(s, t, a, step * 256 + t * 8)
        fl.async_commit()
        fl.async_wait(1)
        fl.sync_threads()
        v = s[(t + 1) * 8 % 256]
        with fl.unsafe():
            d[t] = v
        fl.sync_threads()
