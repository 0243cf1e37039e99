"""Half-precision matrix product C = A @ B on tensor cores: mma.sync, ldmatrix and a
multi-stage cp.async pipeline, f32 accumulation, f16 output, for any tile configuration.

``make_hgemm(Tiles(bm, bn, bk, warps_m, warps_n, stages))`` builds the kernel for one
configuration; ``hgemm`` is the default one (``DEFAULT``). Each block of ``32 * warps_m *
warps_n`` threads computes a ``bm x bn`` tile of C; each warp a ``bm / warps_m x bn / warps_n``
tile as ``mma.sync.m16n8k16`` fragments (4 f32 accumulators per thread per 16 x 8 fragment).
Along K, ``bk``-wide slices of A and B are copied into shared memory with 16-byte
``fl.async_copy``; ``stages`` stages (one shared array per stage, so the compiler can count the
copy groups of each) keep ``stages - 1`` slices in flight while the warps multiply another:
``fl.async_wait(stages - 2)`` then a barrier makes the oldest stage visible to every thread.
Fragments come from shared memory with ``ldmatrix`` (A row-major; B, K x N row-major, with
``.trans``). Shared tiles are XOR-swizzled in 16-byte chunks so that the eight rows an ldmatrix
phase reads lie in eight different bank groups (``swizzle``): each thread copies into its own
chunk (``index_in_block()``), and the swizzle picks which global chunk that is. Blocks walk the
tiles of C in groups of 8 tile rows so that consecutive blocks share A and B tiles in L2. The
layout of NVIDIA's CUTLASS "multistage" SM80 GEMM, written from the PTX ISA's fragment layouts.

The stages take ``stages * (bm + bn) * bk * 2`` bytes of shared memory; above 48 KB the compiler
places them in dynamic shared memory and the kernel opts in to the device's limit (227 KB per
block on sm_90), so CUTLASS's larger sm80 configurations (128 x 256 x 32 with 3 stages, 96 KB)
fit.

The one unsafe part is the epilogue: a thread writes the elements of C its fragments hold,
which are not "its own index" in the sense of DisjointSlice (README, known limits); the writes of
different warps are disjoint by construction, and the cpu race detector checks it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import fearless as fl
from fearless import f16, i64

try:
    from examples._common import Result, check, compiling_ahead, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, compiling_ahead, sizes, timed

GROUP = 8                   # tile rows per L2 group
MAX_SHARED = 227 * 1024     # bytes of shared memory per block on sm_90 (opted in)


@dataclass(frozen=True)
class Tiles:
    """One tile configuration: block tile ``bm x bn x bk``, ``warps_m x warps_n`` warps (each a
    ``bm / warps_m x bn / warps_n`` tile of C), ``stages`` shared-memory stages."""

    bm: int = 128
    bn: int = 128
    bk: int = 32
    warps_m: int = 2
    warps_n: int = 4
    stages: int = 3

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk * 2

    @property
    def name(self) -> str:
        return (f"hgemm_{self.bm}x{self.bn}x{self.bk}_w{self.warps_m}x{self.warps_n}"
                f"_s{self.stages}")

    def problems(self) -> list[str]:
        """Why this configuration cannot be built (empty when it can)."""
        out = []
        wm, wn = self.bm // self.warps_m, self.bn // self.warps_n
        if wm * self.warps_m != self.bm or wm % 16:
            out.append(f"bm / warps_m = {self.bm / self.warps_m} is not a multiple of 16")
        if wn * self.warps_n != self.bn or wn % 16:
            out.append(f"bn / warps_n = {self.bn / self.warps_n} is not a multiple of 16")
        if self.bk % 16:
            out.append(f"bk = {self.bk} is not a multiple of 16")
        for what, chunks in (("A", self.bm * self.bk // 8), ("B", self.bk * self.bn // 8)):
            if chunks % self.threads:
                out.append(f"{what}'s {chunks} 16-byte chunks per stage are not a multiple of "
                           f"the {self.threads} threads")
        if self.stages < 2:
            out.append("stages must be at least 2")
        if self.shared_bytes > MAX_SHARED:
            out.append(f"{self.shared_bytes} bytes of shared memory > {MAX_SHARED}")
        if self.threads > 1024:
            out.append(f"{self.threads} threads per block > 1024")
        return out


DEFAULT = Tiles(128, 128, 64, 2, 2, 3)  # the fastest of benchmarks/hgemm_sweep.py on the H200


def make_hgemm(tiles: Tiles):
    """The kernel ``hgemm(a, b, c, n)`` for ``tiles``: ``a`` (m x k f16), ``b`` (k x n f16),
    ``c`` the m * n f16 elements of C, row-major; launched over ``m // bm * (n // bn) *
    threads`` threads (see ``launch_threads``). Raises ValueError for an impossible ``tiles``."""
    if tiles.problems():
        raise ValueError(f"{tiles.name}: " + "; ".join(tiles.problems()))
    BM, BN, BK, STAGES = tiles.bm, tiles.bn, tiles.bk, tiles.stages
    THREADS, WARPS_N = tiles.threads, tiles.warps_n
    WM, WN = BM // tiles.warps_m, BN // tiles.warps_n   # the warp tile
    FM, FN = WM // 16, WN // 8                          # mma fragments per warp tile
    CA, CB = BK // 8, BN // 8                           # 16-byte chunks per row of A, B
    JA, JB = BM * CA // THREADS, BK * CB // THREADS     # chunks per thread per stage
    LA, LB = max(CA, 8), max(CB, 8)                     # 16-byte chunks per swizzle line
    XA, XB = min(CA, 8), min(CB, 8)                     # swizzle patterns per line

    @fl.func
    def slot(f, line, x):
        """(row of chunks, element) in a stage where 16-byte chunk ``f`` (row * chunks per row +
        chunk) is stored: at ``f ^ (f // line % x)``, ``line`` = max(chunks per row, 8) chunks
        (one row or 128 bytes), ``x`` = min(chunks per row, 8). The XOR permutes the chunks of
        a row within its 128 bytes, so the chunk column that an ldmatrix phase reads from 8
        consecutive rows falls in 8 different 16-byte bank groups."""
        s = f ^ (f // line % x)
        return s // THREADS, (s % THREADS) * 8

    @fl.func
    def load_stage(a, b, sa, sb, t, m0, n0, k0):
        """Start the copies of A[m0:+BM, k0:+BK] and B[k0:+BK, n0:+BN] into one stage, each
        thread into its own chunks (the swizzle is an involution: it also maps a stored chunk
        to the global chunk it holds)."""
        for j in fl.static_range(JA):
            s = j * THREADS + t
            f = s ^ (s // LA % XA)
            fl.async_copy(sa, (j, t), a, (m0 + f // CA, k0 + f % CA * 8))
        for j in fl.static_range(JB):
            s = j * THREADS + t
            f = s ^ (s // LB % XB)
            fl.async_copy(sb, (j, t), b, (k0 + f // CB, n0 + f % CB * 8))

    @fl.func
    def k16(sa, sb, acc, kk, wm, wn, lane):
        """acc += this warp's WM x 16 slice of A times B's 16 x WN slice (k = 16 kk ..)."""
        fa = tuple(fl.mma.ldmatrix(sa, slot((wm * WM + mi * 16 + lane % 16) * CA + kk * 2
                                            + lane // 16, LA, XA))
                   for mi in range(FM))
        fb = tuple(fl.mma.ldmatrix(sb, slot((kk * 16 + lane % 16) * CB + wn * (WN // 8)
                                            + nj * 2 + lane // 16, LB, XB), trans=True)
                   for nj in range(FN // 2))
        return tuple(tuple(fl.mma.sync_m16n8k16(fa[mi], (fb[ni // 2][2 * (ni % 2)],
                                                         fb[ni // 2][2 * (ni % 2) + 1]),
                                                acc[mi][ni])
                           for ni in range(FN))
                     for mi in range(FM))

    @fl.func
    def compute(sa, sb, acc, wm, wn, lane):
        for kk in fl.static_range(BK // 16):
            acc = k16(sa, sb, acc, kk, wm, wn, lane)
        return acc

    contract = fl.Contract(dims=1, block=THREADS, min_compute_capability=(8, 0),
                           requires=(f"len(a) // {BM} * {BM} == len(a)",
                                     f"n // {BN} * {BN} == n",
                                     f"len(b) // {BK} * {BK} == len(b)",
                                     "len(c) == len(a) * n"))

    def hgemm(a: fl.Array[f16, 2], b: fl.Array[f16, 2], c: fl.UnsafeSlice[f16], n: i64):
        t = fl.thread.index_in_block()
        lane = fl.warp.lane()
        warp = fl.warp.index()
        wm, wn = warp // WARPS_N, warp % WARPS_N
        m, k = a.shape
        # grouped tile order: GROUP tile rows at a time, column by column inside a group
        pid = fl.thread.block_index(0)
        in_group = GROUP * (n // BN)
        first = pid // in_group * GROUP
        rows = min(m // BM - first, GROUP)
        m0 = (first + pid % in_group % rows) * BM
        n0 = pid % in_group // rows * BN

        sa = tuple(fl.shared.array((JA, THREADS * 8), f16) for i in range(STAGES))
        sb = tuple(fl.shared.array((JB, THREADS * 8), f16) for i in range(STAGES))
        z = fl.f32(0.0)
        acc = tuple(tuple((z, z, z, z) for ni in range(FN)) for mi in range(FM))
        steps = k // BK
        for i in fl.static_range(STAGES - 1):
            if i < steps:
                load_stage(a, b, sa[i], sb[i], t, m0, n0, i * BK)
            fl.async_commit()
        for s in range(0, steps, STAGES):
            # every stage: wait for the oldest group, barrier, refill the stage read last,
            # compute
            for i in fl.static_range(STAGES):
                fl.async_wait(STAGES - 2)
                fl.sync_threads()
                if s + i + STAGES - 1 < steps:
                    load_stage(a, b, sa[(i + STAGES - 1) % STAGES],
                               sb[(i + STAGES - 1) % STAGES], t, m0, n0,
                               (s + i + STAGES - 1) * BK)
                fl.async_commit()
                if s + i < steps:
                    acc = compute(sa[i], sb[i], acc, wm, wn, lane)
        # the epilogue: this lane's four elements of each fragment, rounded to f16 (C[g, 2q],
        # C[g, 2q + 1], C[g + 8, 2q], C[g + 8, 2q + 1] of a 16 x 8 fragment)
        g, q = lane // 4, lane % 4
        for mi in fl.static_range(FM):
            for ni in fl.static_range(FN):
                at = (m0 + wm * WM + mi * 16 + g) * n + n0 + wn * WN + ni * 8 + 2 * q
                frag = acc[mi][ni]
                with fl.unsafe():
                    c[at] = f16(frag[0])
                    c[at + 1] = f16(frag[1])
                    c[at + 8 * n] = f16(frag[2])
                    c[at + 8 * n + 1] = f16(frag[3])

    hgemm.__name__ = hgemm.__qualname__ = tiles.name
    kern = fl.kernel(contract=contract)(hgemm)
    kern.tiles = tiles
    return kern


def launch_threads(tiles: Tiles, m: int, n: int) -> int:
    """Threads to launch for an m x n C: one block per tile."""
    return m // tiles.bm * (n // tiles.bn) * tiles.threads


hgemm = make_hgemm(DEFAULT)
BM, BN, BK, THREADS = DEFAULT.bm, DEFAULT.bn, DEFAULT.bk, DEFAULT.threads


def run(shape: tuple | None = None, repeat: int | None = None, kern=None) -> Result:
    """Run ``kern`` (default ``hgemm``) on random m x n x k f16 matrices, checked against
    float64 with a bound derived from f32 accumulation and f16 rounding."""
    kern = kern or hgemm
    m, n, k = shape or (sizes(8192, 256), sizes(8192, 128), sizes(8192, 192))
    repeat = repeat if repeat is not None else sizes(10, 1)
    rng = np.random.default_rng(17)
    ah = (rng.random((m, k), np.float32) - 0.5).astype(np.float16)
    bh = (rng.random((k, n), np.float32) - 0.5).astype(np.float16)
    a, b = fl.asarray(ah), fl.asarray(bh)
    c = fl.full(m * n, np.nan, f16)
    launch = kern.prepare(launch_threads(kern.tiles, m, n))
    first, steady = timed(lambda: kern[launch](a, b, c, n), repeat)
    err = 0.0
    if not compiling_ahead():  # `fearless compile` ran nothing: no 8192^3 float64 reference
        a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
        want = a64 @ b64
        # f16 inputs and their products are exact in f32; each of the k f32 additions rounds by
        # at most 2^-24 of the running |sum| <= |A| @ |B|, and the f16 output by 2^-11 of it
        bound = np.abs(a64) @ np.abs(b64) * (k * 2.0 ** -24) * 1.01 + np.abs(want) * 2.0 ** -11
        err = check(kern.name, c.numpy().reshape(m, n).astype(np.float64), want, rtol=0.0,
                    atol=bound + 2.0 ** -24)
    result = Result("hgemm", fl.current_backend(), f"{m}x{n}x{k}", first, steady,
                    2 * (m * k + k * n + m * n), err)
    result.notes.append(f"{2 * m * n * k / (steady * 1e9):.1f} TFLOP/s")
    return result


if __name__ == "__main__":
    print(run())
