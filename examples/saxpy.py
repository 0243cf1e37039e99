"""SAXPY: out[i] = a * x[i] + y[i] with a scalar parameter (f32)."""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed


@fl.kernel
def saxpy(a: f32, x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = a * x[i] + y[i]


def run(n: int | None = None, repeat: int = 20) -> Result:
    n = n or sizes(1 << 26, 1 << 20)
    rng = np.random.default_rng(1)
    xh, yh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    a = 2.5
    x, y = fl.asarray(xh), fl.asarray(yh)
    out = fl.full(n, np.nan, f32)
    launch = saxpy.prepare(n)
    first, steady = timed(lambda: saxpy[launch](a, x, y, out), repeat)
    want = a * xh.astype(np.float64) + yh
    terms = np.abs(a * xh.astype(np.float64)) + np.abs(yh)
    err = check("saxpy", out.numpy(), want, rtol=0, atol=1e-6 * terms)  # f32: ~6e-8 per rounding
    return Result("saxpy", fl.current_backend(), f"n={n}", first, steady, 12 * n, err)


if __name__ == "__main__":
    print(run())
