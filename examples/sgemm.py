"""Single-precision matrix product C = A @ B with shared-memory tiles.

Each block computes a ``TILE x TILE`` tile of C. For every step along K, each thread copies one
element of A's and one of B's tile into its own slot of two shared tiles; after a barrier each
thread accumulates its dot product over the tiles from shared memory (every input element is
read from global memory once per block instead of once per thread); a second barrier keeps the
next step's copies from overwriting tiles other threads still read. The classic tiled GEMM of
the CUDA C Programming Guide ("Shared Memory", matrix multiplication). No unsafe code.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

TILE = 16


@fl.kernel(contract=fl.Contract(dims=2, block=(TILE, TILE), requires="len(c) == len(a)"))
def sgemm(a: fl.Array[f32, 2], b: fl.Array[f32, 2], c: fl.DisjointArray[f32, 2]):
    r, col = fl.thread.index_2d()
    ty, tx = fl.thread.index_in_block_2d()
    ta = fl.shared.array((TILE, TILE), f32)
    tb = fl.shared.array((TILE, TILE), f32)
    m, k = a.shape
    n = b.shape[1]
    acc = fl.f32(0.0)
    for k0 in range(0, k, TILE):
        ta[ty, tx] = a[r, k0 + tx] if r < m and k0 + tx < k else 0.0
        tb[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < n else 0.0
        fl.sync_threads()
        for kk in range(TILE):
            acc += ta[ty, kk] * tb[kk, tx]
        fl.sync_threads()
    if r < m and col < n:
        c[r, col] = acc


def run(shape: tuple | None = None, repeat: int | None = None) -> Result:
    m, n, k = shape or (sizes(4096, 96), sizes(4096, 80), sizes(4096, 72))
    repeat = repeat if repeat is not None else sizes(10, 2)
    rng = np.random.default_rng(13)
    ah, bh = rng.random((m, k), np.float32) - 0.5, rng.random((k, n), np.float32) - 0.5
    a, b = fl.asarray(ah), fl.asarray(bh)
    c = fl.full((m, n), np.nan, f32)
    launch = sgemm.prepare((m, n))
    first, steady = timed(lambda: sgemm[launch](a, b, c), repeat)
    want = ah.astype(np.float64) @ bh.astype(np.float64)
    bound = np.abs(ah).astype(np.float64) @ np.abs(bh).astype(np.float64) * 1e-6 * k ** 0.5
    err = check("sgemm", c.numpy(), want, rtol=0.0, atol=bound + 1e-6)
    result = Result("sgemm", fl.current_backend(), f"{m}x{n}x{k}", first, steady,
                    4 * (m * k + k * n + m * n), err)
    result.notes.append(f"{2 * m * n * k / (steady * 1e9):.1f} TFLOP/s")
    return result


if __name__ == "__main__":
    print(run())
