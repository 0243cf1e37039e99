"""2-D matrix add with index_2d: out[r, c] = a[r, c] + b[r, c], with b a transposed view.

Shows ``fl.Array``/``fl.DisjointArray`` and a strided (non-contiguous) input: ``b`` is the
transpose of a column-major buffer, read in place without a copy.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed


@fl.kernel
def matrix_add(a: fl.Array[f32, 2], b: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    rows, cols = out.shape
    if r < rows and c < cols:
        out[r, c] = a[r, c] + b[r, c]


def run(rows: int | None = None, cols: int | None = None, repeat: int = 10) -> Result:
    rows = rows or sizes(6000, 700)
    cols = cols or sizes(5000, 513)
    rng = np.random.default_rng(2)
    ah = rng.standard_normal((rows, cols), np.float32)
    bt = rng.standard_normal((cols, rows), np.float32)  # stored transposed
    a, b = fl.asarray(ah), fl.asarray(bt).T              # b: a strided view, no copy
    out = fl.full((rows, cols), np.nan, f32)
    launch = matrix_add.prepare((rows, cols))
    first, steady = timed(lambda: matrix_add[launch](a, b, out), repeat)
    err = check("matrix_add", out.numpy(), ah.astype(np.float64) + bt.T, rtol=1e-6)
    return Result("matrix_add", fl.current_backend(), f"{rows}x{cols}", first, steady,
                  12 * rows * cols, err)


if __name__ == "__main__":
    print(run())
