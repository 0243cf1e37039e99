"""Tile vector add: z = x + y, one 1024-element tile per tile block, on a partitioned output."""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32
from fearless import tile as ft

try:
    from examples._common import Result, check, sizes, timed_op
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed_op


@ft.kernel
def add(z: ft.Out[f32], x: ft.In[f32], y: ft.In[f32]):
    z.store(ft.load_like(x, z) + ft.load_like(y, z))


def run(n: int | None = None, tile: int = 1024, repeat: int = 20) -> Result:
    n = n or sizes(1 << 27, (1 << 16) + 300)  # the CPU size ends in a partial tile
    rng = np.random.default_rng(3)
    xh, yh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    z = fl.full(n, np.nan, f32).partition(tile)
    z, first, steady = timed_op(lambda z: add(z, x, y).sync()[0], z, repeat)
    out = z.unpartition()
    err = check("tile_vector_add", out.numpy(), xh.astype(np.float64) + yh, rtol=6e-8)
    return Result("tile_vector_add", fl.current_backend(), f"n={n} tile={tile}", first, steady,
                  12 * n, err)


if __name__ == "__main__":
    print(run())
