"""Kernels using warp operations, for tests/simt/test_warp.py.

Line numbers matter for the golden texts in test_warp.py; append new kernels at the end.
"""
from typing import TypeVar

import fearless as fl
from fearless import f32, i32, u32

T = TypeVar("T")


@fl.kernel
def shuffles(x: fl.Slice[T], src: fl.Slice[i32], d: i32, a: fl.DisjointSlice[T],
             b: fl.DisjointSlice[T], c: fl.DisjointSlice[T], e: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    v = x[i]
    a[i] = fl.warp.shuffle(v, src[i])
    b[i] = fl.warp.shuffle_down(v, d)
    c[i] = fl.warp.shuffle_up(v, d, width=8)
    e[i] = fl.warp.shuffle_xor(v, d, mask=fl.warp.FULL, width=16)


@fl.kernel
def votes(x: fl.Slice[f32], ballot: fl.DisjointSlice[u32], some: fl.DisjointSlice[fl.bool_],
          every: fl.DisjointSlice[fl.bool_], lane: fl.DisjointSlice[i32]):
    i = fl.thread.index_1d()
    p = x[i] > 0.5
    ballot[i] = fl.warp.ballot(p)
    some[i] = fl.warp.any(p)
    every[i] = fl.warp.all(x[i] >= 0.0)
    lane[i] = fl.warp.lane() + 100 * fl.warp.index()


@fl.kernel
def reductions(x: fl.Slice[T], s: fl.DisjointSlice[T], hi: fl.DisjointSlice[T],
               lo: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    v = x[i]
    s[i] = fl.warp.reduce_sum(v)
    hi[i] = fl.warp.reduce_max(v)
    lo[i] = fl.warp.reduce_min(v)


@fl.kernel
def half_warp_sum(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r = 0.0
    if fl.warp.lane() < 16:
        with fl.unsafe():
            r = fl.warp.reduce_sum(x[i], mask=0x0000FFFF)
    out[i] = r


@fl.kernel
def block_sum(x: fl.Slice[f32], sums: fl.AtomicSlice[f32]):
    """Warp sums, one per warp into shared memory, then the first warp sums those."""
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    v = x[i] if i < len(x) else 0.0
    partial = fl.shared.array(32, f32)
    w = fl.warp.reduce_sum(v)
    part = fl.warp.index()
    if fl.warp.lane() == 0:
        with fl.unsafe():
            partial[part] = w
    fl.sync_threads()
    if t // 32 == 0:
        n = fl.thread.block_dim() // 32
        total = fl.warp.reduce_sum(partial[t] if t < n else 0.0)
        if t == 0:
            sums.add(fl.thread.block_index(), total)


# refused ---------------------------------------------------------------------------------------

@fl.kernel
def divergent_reduce(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r = 0.0
    if x[i] > 0.0:
        r = fl.warp.reduce_sum(x[i])
    out[i] = r


@fl.kernel
def early_exit_shuffle(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if fl.warp.lane() >= 16:
        return
    out[i] = fl.warp.shuffle_down(x[i], 1)


@fl.kernel
def partial_mask_outside_unsafe(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = fl.warp.shuffle(x[i], 0, mask=0xFF)


@fl.kernel
def full_mask_in_unsafe_branch(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r = 0.0
    if fl.warp.lane() < 16:
        with fl.unsafe():
            r = fl.warp.reduce_sum(x[i])
    out[i] = r


# caught at run time by the cpu backend (inside fl.unsafe) ------------------------------------

@fl.kernel
def mask_too_small(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    with fl.unsafe():
        out[i] = fl.warp.reduce_sum(x[i], mask=0x0000FFFF)


@fl.kernel
def mask_too_large(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r = 0.0
    if fl.warp.lane() < 16:
        with fl.unsafe():
            r = fl.warp.reduce_sum(x[i], mask=fl.warp.FULL)
    out[i] = r


@fl.kernel
def reads_outside_mask(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r = 0.0
    if fl.warp.lane() < 16:
        with fl.unsafe():
            r = fl.warp.shuffle_down(x[i], 8, mask=0x0000FFFF)
    out[i] = r
