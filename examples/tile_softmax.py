"""Row softmax with tiles: each tile block normalises ``rows`` whole rows (masked past the width)."""
from __future__ import annotations

import math

import numpy as np

import fearless as fl
from fearless import f32
from fearless import tile as ft

try:
    from examples._common import Result, check, config_note, sizes, timed_op
except ImportError:
    from fearless.examples._common import Result, check, config_note, sizes, timed_op


LOG2E = math.log2(math.e)


# occupancy 3: three tile blocks per SM keep enough loads in flight to stream a whole row each,
# and plain loads beat TMA here (measured on the H200: 50% of copy bandwidth without the hints,
# 94% with them; benchmarks/RESULTS.md)
@ft.kernel(hints={"sm_90": {"occupancy": 3}})
def softmax(out: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, out, allow_tma=False)     # zero past the last column: mask it
    cols = ft.arange(out.tile_shape[1])
    t = ft.where(cols < x.shape[1], t, -math.inf)
    # exp(v) = 2**(v log2 e): one fast exp2 per element, as GPU softmax kernels do
    e = ft.exp2((t - ft.max(t, 1, keepdims=True)) * LOG2E)
    out.store(e * (1.0 / ft.sum(e, 1, keepdims=True)))


# one row per tile, occupancy 3 (the measured best, and what runs where nothing tunes), 2 or 4
softmax_tuned = ft.autotune(configs=ft.configs.rowwise(occupancy=(3, 2, 4)))(softmax)


def reference(xh: np.ndarray) -> np.ndarray:
    x = xh.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def run(shape: tuple | None = None, rows: int | None = None, repeat: int = 20) -> Result:
    """Softmax over the rows of an M x N ``shape``, checked against float64 NumPy. ``rows``
    None: the config ``softmax_tuned`` picks (tuned at the first call of a new shape, which
    ``first_ms`` includes); a count pins tiles of that many whole rows."""
    m, n = shape or (sizes(8192, 96), sizes(8192, 1000))
    width = 1 << (n - 1).bit_length()               # a pinned tile covers a whole row
    rng = np.random.default_rng(4)
    xh = rng.standard_normal((m, n), np.float32) * 4
    x = fl.asarray(xh)

    def step(out):
        op = softmax_tuned(out, x) if rows is None else softmax(out.partition((rows, width)), x)
        return op.sync()[0].unpartition()

    out, first, steady = timed_op(step, fl.full((m, n), np.nan, f32), repeat)
    err = check("tile_softmax", out.numpy(), reference(xh), rtol=2e-6, atol=1e-9)  # a few ulp
    result = Result("tile_softmax", fl.current_backend(), f"{m}x{n}", first, steady, 8 * m * n,
                    err)
    result.notes.append(config_note(softmax_tuned, out, x) if rows is None else
                        f"tile {rows}x{width} (pinned)")
    return result


if __name__ == "__main__":
    print(run())
