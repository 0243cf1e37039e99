"""Grid-stride and block-stride loops, and the thread index spelled out, for
tests/simt/test_strided.py.

Their line numbers appear in the expected diagnostics: add new kernels at the end.
"""
from __future__ import annotations

import fearless as fl
from fearless import f32

BLOCK = 128


@fl.kernel
def grid_stride(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size()):
        out[i] = x[i] * 2.0 + 1.0


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def grid_stride_spelled_out(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    start = fl.thread.block_index() * fl.thread.block_dim() + fl.thread.thread_in_block()
    for i in range(start, len(out), fl.thread.grid_dim() * fl.thread.block_dim()):
        out[i] = x[i] - 3.0


@fl.kernel
def grid_stride_accumulate(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size(0)):
        out[i] += x[i]  # a read and a write, both at the counter


@fl.kernel
def grid_stride_2d(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r0, c0 = fl.thread.index_2d()
    for r in range(r0, out.shape[0], fl.thread.grid_size(1)):
        for c in range(c0, out.shape[1], fl.thread.grid_size(0)):
            out[r, c] = a[r, c] * a[r, c]


@fl.kernel
def own_index_spelled_out(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r = fl.thread.block_index(1) * fl.thread.block_dim(1) + fl.thread.thread_in_block(1)
    c = fl.thread.block_index(0) * fl.thread.block_dim(0) + fl.thread.thread_in_block(0)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[r, c] + 1.0


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def own_index_spelled_out_1d(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.block_index(0) * fl.thread.block_dim(0) + fl.thread.thread_in_block(0)
    if i < len(out):
        out[i] = x[i] * 5.0


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def block_per_row(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    row = fl.thread.block_index()
    if row < out.shape[0]:
        for c in range(fl.thread.thread_in_block(0), out.shape[1], fl.thread.block_dim()):
            out[row, c] = x[row, c] * 3.0


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def block_per_row_slot(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    row = fl.thread.block_index()
    if row < out.shape[0]:
        for c in range(fl.thread.index_in_block(), out.shape[1], BLOCK):  # the exact block
            out[row, c] = x[row, c] - 1.0


# refused ------------------------------------------------------------------------------------

@fl.kernel
def constant_step(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d(), len(out), 1024):
        out[i] = x[i]


@fl.kernel
def half_step(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size() // 2):
        out[i] = x[i]


@fl.kernel
def zero_start(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(0, len(out), fl.thread.grid_size()):
        out[i] = x[i]


@fl.kernel
def shifted_start(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d() + 1, len(out), fl.thread.grid_size()):
        out[i] = x[i]


@fl.kernel
def also_writes_next(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size()):
        out[i] = x[i]
        out[i + 1] = 0.0


@fl.kernel
def also_writes_elsewhere(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    j = fl.thread.index_1d() * 2
    for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size()):
        out[i] = x[i]
        out[j] = 0.0


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def every_block_same_columns(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    for c in range(fl.thread.thread_in_block(0), len(out), fl.thread.block_dim()):
        out[c] = x[c]


@fl.kernel
def row_per_block_any_launch(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    row = fl.thread.block_index()
    for c in range(fl.thread.thread_in_block(0), out.shape[1], fl.thread.block_dim()):
        out[row, c] = x[row, c]


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def block_stride_half_block(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    row = fl.thread.block_index()
    for c in range(fl.thread.thread_in_block(0), out.shape[1], 64):
        out[row, c] = x[row, c]


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def block_stride_fixed_row(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    for c in range(fl.thread.thread_in_block(0), out.shape[1], fl.thread.block_dim()):
        out[0, c] = x[0, c]


@fl.kernel
def unguarded_spelled_out(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r = fl.thread.block_index(1) * fl.thread.block_dim(1) + fl.thread.thread_in_block(1)
    c = fl.thread.block_index(0) * fl.thread.block_dim(0) + fl.thread.thread_in_block(0)
    out[r, c] = a[r, c] * 0.5  # no guard: the launch's threads must fit inside `a`
