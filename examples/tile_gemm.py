"""GEMM with tiles: C = A @ B in f16 or bf16 with an f32 accumulator, on tensor cores.

M, N and K need not be multiples of the tile: loads read zero past the edges (which adds
nothing to the products) and the store of an edge tile is clipped.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import bf16, f16, f32
from fearless import tile as ft

try:
    from examples._common import Result, check, config_note, sizes, timed_op
except ImportError:
    from fearless.examples._common import Result, check, config_note, sizes, timed_op


@ft.kernel
def matmul(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 64):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


# The tuner times these per shape and dtype at the first call of each (a few seconds; the
# ranking persists in the disk cache). First, and what runs where nothing tunes (the cpu
# backend, FEARLESS_AUTOTUNE=0): the persistent 128x128 tile, 94.7-97.2% of cuBLAS at 2048-16384^3
# on the H200 with tileiras 13.5 (L2 flushed). 128x256 and 256x128 compile with two consumer
# warp groups on sm_90 (fearless's default; backends/tileir/hints.py): 128x256 led at 4096^3
# and 8192^3 (96-97% of cuBLAS, session 15). 128x64 and 64x64, one tile per block, for few
# rows: at M 128 128x128 tiles leave most SMs idle (N 4096: 32 blocks on 132 SMs; 64x64 ran at
# 96% of cuBLAS there, 128x128 at 67%; benchmarks/RESULTS.md, session 14).
matmul_tuned = ft.autotune(configs=[
    ft.Config(tile=tile, schedule=schedule)
    for tile in ((128, 128), (128, 256), (256, 128)) for schedule in (ft.persistent(), None)
] + [ft.Config(tile=tile) for tile in ((128, 64), (64, 64))])(matmul)


def run(shape: tuple | None = None, dtype=f16, tile: tuple | None = None, bk: int = 64,
        repeat: int = 10) -> Result:
    """C = A @ B of ``shape`` (M, N, K) in ``dtype``, checked against float64 NumPy. ``tile``
    None: the config ``matmul_tuned`` picks (tuned at the first call of a new shape, which
    ``first_ms`` includes); a tile shape pins it, one tile per block with K step ``bk``."""
    m, n, k = shape or (sizes(4096, 200), sizes(4096, 136), sizes(4096, 100))
    rng = np.random.default_rng(6)
    ah = rng.standard_normal((m, k), np.float32).astype(dtype.numpy)
    bh = rng.standard_normal((k, n), np.float32).astype(dtype.numpy)
    a, b = fl.asarray(ah), fl.asarray(bh)

    def step(c):
        op = matmul_tuned(c, a, b) if tile is None else matmul(c.partition(tile), a, b, bk=bk)
        return op.sync()[0].unpartition()

    c, first, steady = timed_op(step, fl.full((m, n), np.nan, dtype), repeat)
    got = c.numpy()
    a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
    want = a64 @ b64
    # f32 accumulation over k terms, then one rounding to the output type (2^-11 f16, 2^-8 bf16)
    unit = 2.0 ** -11 if dtype is f16 else 2.0 ** -8
    err = check(f"tile_gemm_{dtype.name}", got, want, rtol=unit,
                atol=(np.abs(a64) @ np.abs(b64)) * (k * 2.0 ** -23 + unit))
    flops = 2 * m * n * k
    result = Result(f"tile_gemm_{dtype.name}", fl.current_backend(), f"{m}x{n}x{k}", first,
                    steady, 2 * (m * k + k * n + m * n), err)
    result.notes.append(f"{flops / (steady * 1e9):.1f} TFLOP/s")
    result.notes.append(config_note(matmul_tuned, c, a, b) if tile is None else
                        f"tile {tile[0]}x{tile[1]}, bk {bk} (pinned)")
    return result


if __name__ == "__main__":
    print(run())
    print(run(dtype=bf16))
