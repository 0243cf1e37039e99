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
    from examples._common import Result, check, sizes, timed_op
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed_op


@ft.kernel
def matmul(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 64):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


def run(shape: tuple | None = None, dtype=f16, tile=(128, 128), bk: int = 64,
        repeat: int = 10) -> Result:
    m, n, k = shape or (sizes(4096, 200), sizes(4096, 136), sizes(4096, 100))
    rng = np.random.default_rng(6)
    ah = rng.standard_normal((m, k), np.float32).astype(dtype.numpy)
    bh = rng.standard_normal((k, n), np.float32).astype(dtype.numpy)
    a, b = fl.asarray(ah), fl.asarray(bh)
    c = fl.full((m, n), np.nan, dtype).partition(tile)
    c, first, steady = timed_op(lambda c: matmul(c, a, b, bk=bk).sync()[0], c, repeat)
    got = c.unpartition().numpy()
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
    return result


if __name__ == "__main__":
    print(run())
    print(run(dtype=bf16))
