"""Softmax of every row of a matrix: one warp per row, warp reductions, no unsafe code.

Each warp owns one row of ``COLS`` elements; lane ``l`` holds elements ``l, l + 32, ...`` (``PER``
of them, so every load instruction of the warp reads 128 contiguous bytes and each lane keeps
``PER`` loads in flight). The row maximum and the sum of exponentials are warp reductions
(``fl.warp.reduce_max`` / ``reduce_sum``: ``redux.sync`` or a butterfly of ``shfl.sync``), so
there is no shared memory and no barrier. Numerically stable form: exp(x - max) / sum(exp(x -
max)). The contract fixes a block of ``WARPS`` warps, so the compiler can enumerate its threads
and prove that each lane's ``PER`` writes of ``out`` are its own (``analysis/owners.py``).
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

COLS = 256          # row length
PER = COLS // 32    # elements per lane
WARPS = 8           # rows per block, one per warp


@fl.kernel(contract=fl.Contract(dims=1, block=WARPS * 32, requires="len(out) == len(x)"))
def row_softmax(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    """out = softmax(x, axis=1) for ``x`` of shape (rows, COLS) f32; launch with
    ``row_softmax.prepare(launch_threads(rows))``. Rows of another length are not written
    (``softmax`` checks the shape first)."""
    lane = fl.warp.lane()
    r = fl.thread.block_index() * WARPS + fl.warp.index()
    if r < x.shape[0] and x.shape[1] == COLS and out.shape[1] == COLS:
        v = tuple(x[r, lane + 32 * k] for k in range(PER))
        m = v[0]
        for k in fl.static_range(1, PER):
            m = max(m, v[k])
        m = fl.warp.reduce_max(m)
        e = tuple(math.exp(v[k] - m) for k in range(PER))
        total = e[0]
        for k in fl.static_range(1, PER):
            total += e[k]
        scale = 1.0 / fl.warp.reduce_sum(total)
        for k in fl.static_range(PER):
            out[r, lane + 32 * k] = e[k] * scale


def launch_threads(rows: int) -> int:
    """Threads to launch for ``rows`` rows: one warp each, whole blocks."""
    return -(-rows // WARPS) * WARPS * 32


def softmax(x: fl.Tensor, out: fl.Tensor) -> None:
    """out = softmax(x, axis=1) for (rows, COLS) f32 tensors. Raises ValueError for rows of
    another length."""
    if x.shape[1:] != (COLS,) or out.shape != x.shape:
        raise ValueError(f"row_softmax takes (rows, {COLS}) arrays, got {x.shape} -> {out.shape}")
    row_softmax[row_softmax.prepare(launch_threads(x.shape[0]))](x, out)


def run(rows: int | None = None, repeat: int | None = None) -> Result:
    rows = rows or sizes(1 << 15, 300)
    repeat = repeat if repeat is not None else sizes(20, 2)
    xh = (np.random.default_rng(11).standard_normal((rows, COLS)) * 4).astype(np.float32)
    x = fl.asarray(xh)
    out = fl.full((rows, COLS), np.nan, f32)
    launch = row_softmax.prepare(launch_threads(rows))
    first, steady = timed(lambda: row_softmax[launch](x, out), repeat)
    x64 = xh.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    err = check("row_softmax", out.numpy(), e / e.sum(1, keepdims=True), rtol=2e-5, atol=1e-7)
    return Result("row_softmax", fl.current_backend(), f"{rows}x{COLS}", first, steady,
                  8 * rows * COLS, err)


if __name__ == "__main__":
    print(run())
