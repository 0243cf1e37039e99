"""Softmax of every row of a matrix, with warp reductions and no unsafe code.

A block holds ``ROWS`` rows of ``COLS`` threads (one element each; a row is ``COLS // 32`` warps).
Each warp reduces its 32 elements with ``fl.warp.reduce_max`` / ``reduce_sum`` (``redux.sync``
or a butterfly of ``shfl.sync``); every thread stores its warp's result in its own shared slot,
and after a barrier each thread combines the row's warps by reading the first slot of each.
Numerically stable form: exp(x - max) / sum(exp(x - max)) (the row maximum is subtracted first).
The contract fixes the block, so the PTX carries ``.reqntid``.
"""
from __future__ import annotations

import math

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

COLS = 256   # row length: one thread per element
ROWS = 2     # rows per block
WARPS = COLS // 32


@fl.kernel(contract=fl.Contract(dims=2, block=(COLS, ROWS), requires="len(out) == len(x)"))
def row_softmax(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    ty, tx = fl.thread.index_in_block_2d()
    inside = r < x.shape[0]
    v = x[r, c] if inside else -math.inf
    part = fl.shared.array((ROWS, COLS), f32)
    m = fl.warp.reduce_max(v)
    part[ty, tx] = m
    fl.sync_threads()
    for w in range(WARPS):
        m = max(m, part[ty, w * 32])
    e = math.exp(v - m) if inside else 0.0
    total = fl.warp.reduce_sum(e)
    fl.sync_threads()  # every thread has read the maxima before they are overwritten
    part[ty, tx] = total
    fl.sync_threads()
    total = 0.0
    for w in range(WARPS):
        total += part[ty, w * 32]
    if inside:
        out[r, c] = e / total


def run(rows: int | None = None, repeat: int | None = None) -> Result:
    rows = rows or sizes(1 << 15, 300)
    repeat = repeat if repeat is not None else sizes(20, 2)
    xh = (np.random.default_rng(11).standard_normal((rows, COLS)) * 4).astype(np.float32)
    x = fl.asarray(xh)
    out = fl.full((rows, COLS), np.nan, f32)
    launch = row_softmax.prepare((rows, COLS))
    first, steady = timed(lambda: row_softmax[launch](x, out), repeat)
    x64 = xh.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    err = check("row_softmax", out.numpy(), e / e.sum(1, keepdims=True), rtol=2e-5, atol=1e-7)
    return Result("row_softmax", fl.current_backend(), f"{rows}x{COLS}", first, steady,
                  8 * rows * COLS, err)


if __name__ == "__main__":
    print(run())
