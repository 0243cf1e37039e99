"""Matrix transpose through a padded shared-memory tile: coalesced reads and coalesced writes.

A block of 32 x 32 threads reads a 32 x 32 tile of the input row by row (consecutive threads,
consecutive addresses), stores it in shared memory, and after a barrier writes the transposed
tile row by row. The tile is 32 x 33: the padding column puts the elements of one tile column
in 32 different shared-memory banks, so reading ``tile[tx, ty]`` has no bank conflicts.
M. Harris, "An Efficient Matrix Transpose in CUDA C/C++" (NVIDIA, 2013). No unsafe code: each
thread writes its own tile slot and its own output element.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

TILE = 32


@fl.kernel(contract=fl.Contract(dims=2, block=(TILE, TILE)))
def transpose(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    ty, tx = fl.thread.index_in_block_2d()
    tile = fl.shared.array((TILE, TILE + 1), f32)
    r0 = fl.thread.block_index(0) * TILE  # the input tile mirrors the output block
    c0 = fl.thread.block_index(1) * TILE
    rows, cols = a.shape
    if r0 + ty < rows and c0 + tx < cols:
        tile[ty, tx] = a[r0 + ty, c0 + tx]
    fl.sync_threads()
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = tile[tx, ty]


def run(shape: tuple | None = None, repeat: int | None = None) -> Result:
    rows, cols = shape or (sizes(8192, 300), sizes(8192, 200))
    repeat = repeat if repeat is not None else sizes(20, 2)
    ah = np.random.default_rng(12).random((rows, cols), np.float32)
    a = fl.asarray(ah)
    out = fl.full((cols, rows), np.nan, f32)
    launch = transpose.prepare((cols, rows))
    first, steady = timed(lambda: transpose[launch](a, out), repeat)
    err = check("transpose", out.numpy(), ah.T, rtol=0.0)
    return Result("transpose", fl.current_backend(), f"{rows}x{cols}", first, steady,
                  8 * rows * cols, err)


if __name__ == "__main__":
    print(run())
