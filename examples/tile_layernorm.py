"""Layer norm with tiles: y = (x - mean) / sqrt(var + eps) * w + b over each row."""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32
from fearless import tile as ft

try:
    from examples._common import Result, check, config_note, sizes, timed_op
except ImportError:
    from fearless.examples._common import Result, check, config_note, sizes, timed_op


# one row per tile block, occupancy 3, plain loads and stores rather than TMA (measured on the
# H200: 99% of Triton's speed, timed alternately with it; benchmarks/RESULTS.md)
@ft.kernel(hints={"sm_90": {"occupancy": 3}})
def layernorm(y: ft.Out[f32], x: ft.In[f32], w: ft.In[f32], b: ft.In[f32], eps: f32):
    n = x.shape[1]
    width = y.tile_shape[1]
    t = ft.load_like(x, y, allow_tma=False)         # zero past the last column
    mean = ft.sum(t, 1, keepdims=True) / n
    d = t - mean
    # the (width - n) padded zeros each add mean**2 to the sum of squares: take it out again
    # (exact, and cheaper than masking every element); the store clips the padding
    var = (ft.sum(d * d, 1, keepdims=True) - (width - n) * mean * mean) / n
    wt = ft.load(w, (0,), (width,), allow_tma=False)
    bt = ft.load(b, (0,), (width,), allow_tma=False)
    y.store(d * ft.rsqrt(var + eps) * wt + bt, allow_tma=False)


# one row per tile, occupancy 3 (the measured best, and what runs where nothing tunes), 2 or 4
layernorm_tuned = ft.autotune(configs=ft.configs.rowwise(occupancy=(3, 2, 4)))(layernorm)


def reference(xh, wh, bh, eps):
    x = xh.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * wh + bh


def run(shape: tuple | None = None, rows: int | None = None, repeat: int = 20) -> Result:
    """Layer norm over the rows of an M x N ``shape``, checked against float64 NumPy. ``rows``
    None: the config ``layernorm_tuned`` picks (tuned at the first call of a new shape, which
    ``first_ms`` includes); a count pins tiles of that many whole rows."""
    m, n = shape or (sizes(8192, 64), sizes(8192, 700))
    width = 1 << (n - 1).bit_length()               # a pinned tile covers a whole row
    rng = np.random.default_rng(5)
    xh = rng.standard_normal((m, n), np.float32) * 3 + 1
    wh, bh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    eps = 1e-5
    x, w, b = fl.asarray(xh), fl.asarray(wh), fl.asarray(bh)

    def step(y):
        op = layernorm_tuned(y, x, w, b, eps) if rows is None else \
            layernorm(y.partition((rows, width)), x, w, b, eps)
        return op.sync()[0].unpartition()

    y, first, steady = timed_op(step, fl.full((m, n), np.nan, f32), repeat)
    want = reference(xh, wh, bh, eps)
    err = check("tile_layernorm", y.numpy(), want, rtol=1e-5, atol=1e-5 * (np.abs(wh) + 1))
    result = Result("tile_layernorm", fl.current_backend(), f"{m}x{n}", first, steady,
                    8 * m * n, err)
    result.notes.append(config_note(layernorm_tuned, y, x, w, b, eps) if rows is None else
                        f"tile {rows}x{width} (pinned)")
    return result


if __name__ == "__main__":
    print(run())
