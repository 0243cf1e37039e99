"""Vector add: out[i] = x[i] + y[i], one thread per element (f32)."""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:  # installed as fearless.examples
    from fearless.examples._common import Result, check, sizes, timed


@fl.kernel
def vector_add(x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] + y[i]


def run(n: int | None = None, repeat: int = 20) -> Result:
    n = n or sizes(1 << 26, 1 << 20)
    rng = np.random.default_rng(0)
    xh, yh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    out = fl.full(n, np.nan, f32)  # poison: an unwritten element shows as NaN
    launch = vector_add.prepare(n)
    first, steady = timed(lambda: vector_add[launch](x, y, out), repeat)
    err = check("vector_add", out.numpy(), xh.astype(np.float64) + yh, rtol=1e-6)
    return Result("vector_add", fl.current_backend(), f"n={n}", first, steady, 12 * n, err)


if __name__ == "__main__":
    print(run())
