"""Kernels whose threads own several elements at computed indices, for tests/simt/test_owners.py.

Their line numbers appear in the golden diagnostics: add new kernels at the end.
"""
from __future__ import annotations

import fearless as fl
from fearless import f32

TILE, ROWS = 32, 8


@fl.kernel(contract=fl.Contract(dims=2, block=(TILE, ROWS)))
def copy_tiles(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    ty, tx = fl.thread.index_in_block_2d()
    r0 = fl.thread.block_index(1) * TILE
    c0 = fl.thread.block_index(0) * TILE
    for k in fl.static_range(TILE // ROWS):
        r = r0 + ty + ROWS * k
        if r < out.shape[0] and c0 + tx < out.shape[1] and r < a.shape[0] and c0 + tx < a.shape[1]:
            out[r, c0 + tx] = a[r, c0 + tx] * 2.0


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def strided_owner(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    base = fl.thread.block_index() * 512
    for k in range(4):  # a loop counter with constant bounds: enumerated
        j = base + t + 128 * k
        if j < len(out) and j < len(x):
            out[j] = x[j] + 1.0


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def swizzled_shared(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(128, f32)
    s[t ^ 5] = x[i] if i < len(x) else 0.0  # a permutation of the block's slots
    fl.sync_threads()
    out[i] = s[t ^ 5]


@fl.kernel(contract=fl.Contract(dims=2, block=(ROWS, TILE)))
def rows_overlap(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    ty, tx = fl.thread.index_in_block_2d()
    r0 = fl.thread.block_index(1) * TILE
    c0 = fl.thread.block_index(0) * TILE
    for k in fl.static_range(TILE // ROWS):
        out[r0 + ty + ROWS * k, c0 + tx] = a[0, 0]


@fl.kernel(contract=fl.Contract(dims=2, block=(TILE, ROWS)))
def block_index_unused(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    ty, tx = fl.thread.index_in_block_2d()
    for k in fl.static_range(TILE // ROWS):
        out[ty + ROWS * k, fl.thread.block_index(0) * TILE + tx] = a[0, 0]


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def spills_into_next_block(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    for k in fl.static_range(2):
        out[fl.thread.block_index() * 128 + t + 128 * k] = x[0]


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def halves_shared(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    s = fl.shared.array(128, f32)
    s[t // 2] = x[0]
    fl.sync_threads()
    out[i] = s[t]


@fl.kernel
def no_exact_block(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    out[fl.thread.block_index() * 128 + t] = x[0]



@fl.kernel(contract=fl.Contract(dims=1, block=128))
def one_writer_per_block(x: fl.Slice[f32], sums: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    b = fl.thread.block_index()
    if t == 0 and b < len(sums):  # a guard on the thread's coordinates: one writer
        sums[b] = x[b] * 3.0


@fl.kernel(contract=fl.Contract(dims=1, block=128))
def four_writers_per_block(x: fl.Slice[f32], sums: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    c = fl.thread.block_index() * 4 + t
    if t < 5 and c < len(sums):  # five threads for four elements per block
        sums[c] = x[c]


@fl.kernel(contract=fl.Contract(dims=1, block=32))
def rotate_then_read_own(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    i = fl.thread.index_1d()
    s = fl.shared.array(32, f32)
    s[(t + 1) % 32] = x[i]  # lands in the next thread's own slot
    out[i] = s[t]           # so this reads another thread's write: a barrier is needed


@fl.kernel(contract=fl.Contract(dims=1, block=8))
def wraps_around(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    out[fl.thread.block_index() * 4611686018427387904 + t] = x[0]  # 2^62: block 4 wraps to 0


@fl.kernel(contract=fl.Contract(dims=1, block=8))
def guard_overflows(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    if t * 4611686018427387904 < 1:  # true for t = 0 and, after wrapping, for t = 2, 4, 6
        out[fl.thread.block_index() * 8] = x[0]


@fl.kernel(contract=fl.Contract(dims=1, block=8))
def reversed_in_block(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    t = fl.thread.index_in_block()
    j = fl.thread.block_index() * 8 + (-t + 7)
    if j < len(out) and j < len(x):
        out[j] = x[j] + 2.0
