"""Single-precision matrix product C = A @ B: shared-memory tiles and 8 x 8 outputs per thread.

Each block of 16 x 16 threads computes a 128 x 128 tile of C; thread (ty, tx) owns the 64
elements at rows ``ty + 16 i`` and columns ``tx + 16 j`` (i, j < 8) of the tile, accumulated in
registers. For every step of 8 along K the block copies A's 128 x 8 and B's 8 x 128 slices into
shared memory (four elements per thread, A transposed so that a thread's eight A values of one
k are a column; a padding of 4 spreads the transposing stores over all 32 banks); after a
barrier each thread reads 8 values of A and 8 of B per k and does 64 multiply-adds with them
(register blocking: 4 FMAs per shared load instead of 1); a second barrier keeps the next copies
from overwriting tiles that other threads still read. V. Volkov and J. Demmel, "Benchmarking
GPUs to Tune Dense Linear Algebra" (SC08); the CUDA C Programming Guide's tiled GEMM is the
one-output-per-thread version. No unsafe code: with the contract's exact block, the compiler
enumerates the block's threads and proves each thread's 64 outputs and 4 + 4 shared slots its
own (``analysis/owners.py``).
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, compiling_ahead, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, compiling_ahead, sizes, timed

BT = 16              # threads per block side
TM = 8               # outputs per thread along each axis
BM = BT * TM         # 128: the block's tile of C is BM x BM
BK = 8               # K per shared-memory step
THREADS = BT * BT
LOADS = BM * BK // THREADS   # elements of each input a thread copies per step
PAD = 4


@fl.kernel(contract=fl.Contract(dims=2, block=(BT, BT), requires="len(c) == len(a)"))
def sgemm(a: fl.Array[f32, 2], b: fl.Array[f32, 2], c: fl.DisjointArray[f32, 2]):
    """c = a @ b for a (m x k), b (k x n), c (m x n) f32; launch with
    ``sgemm.prepare(launch_shape(m, n))``."""
    ty, tx = fl.thread.index_in_block_2d()
    t = fl.thread.index_in_block()
    m0 = fl.thread.block_index(1) * BM
    n0 = fl.thread.block_index(0) * BM
    m, k = a.shape
    n = b.shape[1]
    sa = fl.shared.array((BK, BM + PAD), f32)  # sa[kk, i] = A[m0 + i, k0 + kk]
    sb = fl.shared.array((BK, BM), f32)        # sb[kk, j] = B[k0 + kk, n0 + j]
    z = fl.f32(0.0)
    acc = tuple(tuple(z for j in range(TM)) for i in range(TM))
    for k0 in range(0, k, BK):
        for q in fl.static_range(LOADS):
            e = q * THREADS + t
            ai, ak = e // BK, e % BK
            sa[ak, ai] = a[m0 + ai, k0 + ak] if m0 + ai < m and k0 + ak < k else 0.0
            bk, bj = e // BM, e % BM
            sb[bk, bj] = b[k0 + bk, n0 + bj] if k0 + bk < k and n0 + bj < n else 0.0
        fl.sync_threads()
        for kk in fl.static_range(BK):
            av = tuple(sa[kk, ty + BT * i] for i in range(TM))
            bv = tuple(sb[kk, tx + BT * j] for j in range(TM))
            acc = tuple(tuple(acc[i][j] + av[i] * bv[j] for j in range(TM)) for i in range(TM))
        fl.sync_threads()
    for i in fl.static_range(TM):
        for j in fl.static_range(TM):
            r = m0 + ty + BT * i
            col = n0 + tx + BT * j
            if r < m and col < n:
                c[r, col] = acc[i][j]


def launch_shape(m: int, n: int) -> tuple:
    """The threads to launch, (rows, columns), for an m x n C: 16 x 16 per 128 x 128 tile."""
    return (-(-m // BM) * BT, -(-n // BM) * BT)


def run(shape: tuple | None = None, repeat: int | None = None) -> Result:
    m, n, k = shape or (sizes(4096, 96), sizes(4096, 80), sizes(4096, 72))
    repeat = repeat if repeat is not None else sizes(10, 2)
    rng = np.random.default_rng(13)
    ah, bh = rng.random((m, k), np.float32) - 0.5, rng.random((k, n), np.float32) - 0.5
    a, b = fl.asarray(ah), fl.asarray(bh)
    c = fl.full((m, n), np.nan, f32)
    launch = sgemm.prepare(launch_shape(m, n))
    first, steady = timed(lambda: sgemm[launch](a, b, c), repeat)
    err = 0.0
    if not compiling_ahead():  # `fearless compile` ran nothing: no 4096^3 float64 reference
        want = ah.astype(np.float64) @ bh.astype(np.float64)
        bound = np.abs(ah).astype(np.float64) @ np.abs(bh).astype(np.float64) * 1e-6 * k ** 0.5
        err = check("sgemm", c.numpy(), want, rtol=0.0, atol=bound + 1e-6)
    result = Result("sgemm", fl.current_backend(), f"{m}x{n}x{k}", first, steady,
                    4 * (m * k + k * n + m * n), err)
    result.notes.append(f"{2 * m * n * k / (steady * 1e9):.1f} TFLOP/s")
    return result


if __name__ == "__main__":
    print(run())
