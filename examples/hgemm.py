"""Half-precision matrix product C = A @ B on tensor cores: mma.sync, ldmatrix and a
three-stage cp.async pipeline, f32 accumulation, f16 output.

Each block of 256 threads (8 warps, 2 x 4) computes a 128 x 128 tile of C; each warp a 64 x 32
tile as 4 x 4 ``mma.sync.m16n8k16`` fragments (64 f32 accumulators per thread). Along K, 32-wide
slices of A and B are copied into shared memory with 16-byte ``fl.async_copy``; three stages
(one shared array per stage, so the compiler can count the copy groups of each) keep two slices
in flight while the warps multiply the third: ``fl.async_wait(1)`` then a barrier makes the
oldest stage visible to every thread. Fragments come from shared memory with ``ldmatrix`` (A
row-major; B, K x N row-major, with ``.trans``). Shared tiles are XOR-swizzled in 16-byte
chunks so that the eight rows an ldmatrix phase reads lie in eight different bank groups: each
thread copies into its own chunk (``index_in_block()``), and the swizzle picks which global
chunk that is. Blocks walk the tiles of C in groups of 8 tile rows so that consecutive blocks
share A and B tiles in L2. The layout of NVIDIA's CUTLASS "multistage" SM80 GEMM, written from
the PTX ISA's fragment layouts.

The one unsafe part is the epilogue: a thread writes the 64 elements of C its fragments hold,
which are not "its own index" in the sense of DisjointSlice (README, known limits); the writes of
different warps are disjoint by construction, and the cpu race detector checks it.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f16, i64

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

BM, BN, BK = 128, 128, 32   # block tile
THREADS = 256               # 8 warps: 2 along M (64 rows each) x 4 along N (32 columns each)
GROUP = 8                   # tile rows per L2 group


@fl.func
def a_slot(m, kc):
    """(row of chunks, element) in a stage of A for row m, 16-byte chunk kc (0..3) of the
    128 x 32 tile: 4 chunks per row, chunk kc stored at kc ^ ((m >> 1) & 3)."""
    p = m * 4 + (kc ^ ((m >> 1) & 3))
    return p // THREADS, (p % THREADS) * 8


@fl.func
def b_slot(k, nc):
    """The same for B's 32 x 128 tile: 16 chunks per row, chunk nc stored at nc ^ (k & 7)."""
    p = k * 16 + (nc ^ (k & 7))
    return p // THREADS, (p % THREADS) * 8


@fl.func
def load_stage(a, b, sa, sb, t, m0, n0, k0):
    """Start the copies of A[m0:+128, k0:+32] and B[k0:+32, n0:+128] into one stage: two
    16-byte chunks of each per thread, each thread into its own chunk."""
    for j in range(2):
        p = j * THREADS + t
        m = p // 4
        fl.async_copy(sa, (j, t), a, (m0 + m, k0 + ((p % 4) ^ ((m >> 1) & 3)) * 8))
        k = p // 16
        fl.async_copy(sb, (j, t), b, (k0 + k, n0 + ((p % 16) ^ (k & 7)) * 8))


@fl.func
def k16(sa, sb, acc, kk, wm, wn, lane):
    """acc += this warp's 64 x 16 slice of A times B's 16 x 32 slice (k = 16 kk ..)."""
    fa = tuple(fl.mma.ldmatrix(sa, a_slot(wm * 64 + mi * 16 + lane % 16, kk * 2 + lane // 16))
               for mi in range(4))
    fb = tuple(fl.mma.ldmatrix(sb, b_slot(kk * 16 + lane % 16, wn * 4 + nj * 2 + lane // 16),
                               trans=True)
               for nj in range(2))
    return tuple(tuple(fl.mma.sync_m16n8k16(fa[mi], (fb[ni // 2][2 * (ni % 2)],
                                                     fb[ni // 2][2 * (ni % 2) + 1]),
                                            acc[mi][ni])
                       for ni in range(4))
                 for mi in range(4))


@fl.func
def compute(sa, sb, acc, wm, wn, lane):
    return k16(sa, sb, k16(sa, sb, acc, 0, wm, wn, lane), 1, wm, wn, lane)


CONTRACT = fl.Contract(dims=1, block=THREADS, min_compute_capability=(8, 0),
                       requires=("len(a) // 128 * 128 == len(a)", "n // 128 * 128 == n",
                                 "len(b) // 32 * 32 == len(b)", "len(c) == len(a) * n"))


@fl.kernel(contract=CONTRACT)
def hgemm(a: fl.Array[f16, 2], b: fl.Array[f16, 2], c: fl.UnsafeSlice[f16], n: i64):
    t = fl.thread.index_in_block()
    lane = fl.warp.lane()
    warp = fl.warp.index()
    wm, wn = warp // 4, warp % 4
    m, k = a.shape
    # grouped tile order: GROUP tile rows at a time, column by column inside a group
    pid = fl.thread.block_index(0)
    tiles_n = n // BN
    in_group = GROUP * tiles_n
    first = pid // in_group * GROUP
    rows = min(m // BM - first, GROUP)
    m0 = (first + pid % in_group % rows) * BM
    n0 = pid % in_group // rows * BN

    sa0 = fl.shared.array((2, THREADS * 8), f16)
    sa1 = fl.shared.array((2, THREADS * 8), f16)
    sa2 = fl.shared.array((2, THREADS * 8), f16)
    sb0 = fl.shared.array((2, THREADS * 8), f16)
    sb1 = fl.shared.array((2, THREADS * 8), f16)
    sb2 = fl.shared.array((2, THREADS * 8), f16)
    z = fl.f32(0.0)
    acc = tuple(tuple((z, z, z, z) for ni in range(4)) for mi in range(4))
    steps = k // BK
    load_stage(a, b, sa0, sb0, t, m0, n0, 0)
    fl.async_commit()
    if steps > 1:
        load_stage(a, b, sa1, sb1, t, m0, n0, BK)
    fl.async_commit()
    for s in range(0, steps, 3):
        # every stage: wait for the oldest group, barrier, refill the stage read last, compute
        fl.async_wait(1)
        fl.sync_threads()
        if s + 2 < steps:
            load_stage(a, b, sa2, sb2, t, m0, n0, (s + 2) * BK)
        fl.async_commit()
        acc = compute(sa0, sb0, acc, wm, wn, lane)
        fl.async_wait(1)
        fl.sync_threads()
        if s + 3 < steps:
            load_stage(a, b, sa0, sb0, t, m0, n0, (s + 3) * BK)
        fl.async_commit()
        if s + 1 < steps:
            acc = compute(sa1, sb1, acc, wm, wn, lane)
        fl.async_wait(1)
        fl.sync_threads()
        if s + 4 < steps:
            load_stage(a, b, sa1, sb1, t, m0, n0, (s + 4) * BK)
        fl.async_commit()
        if s + 2 < steps:
            acc = compute(sa2, sb2, acc, wm, wn, lane)
    # the epilogue: this lane's four elements of each fragment, rounded to f16 (C[g, 2q],
    # C[g, 2q + 1], C[g + 8, 2q], C[g + 8, 2q + 1] of a 16 x 8 fragment)
    g, q = lane // 4, lane % 4
    for mi in fl.static_range(4):
        for ni in fl.static_range(4):
            at = (m0 + wm * 64 + mi * 16 + g) * n + n0 + wn * 32 + ni * 8 + 2 * q
            frag = acc[mi][ni]
            with fl.unsafe():
                c[at] = f16(frag[0])
                c[at + 1] = f16(frag[1])
                c[at + 8 * n] = f16(frag[2])
                c[at + 8 * n + 1] = f16(frag[3])


def run(shape: tuple | None = None, repeat: int | None = None) -> Result:
    m, n, k = shape or (sizes(8192, 256), sizes(8192, 128), sizes(8192, 160))
    repeat = repeat if repeat is not None else sizes(10, 1)
    rng = np.random.default_rng(17)
    ah = (rng.random((m, k), np.float32) - 0.5).astype(np.float16)
    bh = (rng.random((k, n), np.float32) - 0.5).astype(np.float16)
    a, b = fl.asarray(ah), fl.asarray(bh)
    c = fl.full(m * n, np.nan, f16)
    launch = hgemm.prepare(m // BM * (n // BN) * THREADS)
    first, steady = timed(lambda: hgemm[launch](a, b, c, n), repeat)
    a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
    want = a64 @ b64
    # f16 inputs and their products are exact in f32; each of the k f32 additions rounds by at
    # most 2^-24 of the running |sum| <= |A| @ |B|, and the f16 output by 2^-11 of the result
    bound = np.abs(a64) @ np.abs(b64) * (k * 2.0 ** -24) * 1.01 + np.abs(want) * 2.0 ** -11
    err = check("hgemm", c.numpy().reshape(m, n).astype(np.float64), want, rtol=0.0,
                atol=bound + 2.0 ** -24)
    result = Result("hgemm", fl.current_backend(), f"{m}x{n}x{k}", first, steady,
                    2 * (m * k + k * n + m * n), err)
    result.notes.append(f"{2 * m * n * k / (steady * 1e9):.1f} TFLOP/s")
    return result


if __name__ == "__main__":
    print(run())
