"""One generic kernel specialised per dtype: out[i] = x[i] * x[i] + scale * x[i].

``T`` is a ``typing.TypeVar``: ``x`` and ``out`` must share a dtype, and the kernel is compiled
once per dtype it meets. The scalar ``scale`` (a Python int) takes that dtype too.
"""
from __future__ import annotations

from typing import TypeVar

import numpy as np

import fearless as fl

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

T = TypeVar("T")
DTYPES = (fl.f16, fl.bf16, fl.f32, fl.f64, fl.i32, fl.i64, fl.u8)


@fl.func
def poly(v, scale):
    return v * v + scale * v


@fl.kernel
def generic_map(scale: T, x: fl.Slice[T], out: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = poly(x[i], scale)


def _input(dtype, n, rng):
    if dtype.is_float:
        return rng.uniform(-4, 4, n).astype(dtype.numpy)
    return rng.integers(0, 100, n).astype(dtype.numpy)


def run(n: int | None = None, repeat: int = 5) -> Result:
    n = n or sizes(1 << 24, 1 << 16)
    rng = np.random.default_rng(3)
    total_first, total_steady, worst, moved = 0.0, 0.0, 0.0, 0
    for dtype in DTYPES:
        xh = _input(dtype, n, rng)
        # poison: NaN, or the integer maximum, which x*x + 3x (always even) never equals
        poison = np.nan if dtype.is_float else np.iinfo(dtype.numpy).max
        x, out = fl.asarray(xh), fl.full(n, poison, dtype)
        launch = generic_map.prepare(n)
        first, steady = timed(lambda: generic_map[launch](3, x, out), repeat)
        total_first, total_steady = total_first + first, total_steady + steady
        got = out.numpy()
        if dtype.is_float:  # one rounding per op in the dtype; fma may skip one
            tol = {16: 2e-2, 32: 1e-5, 64: 1e-12}[dtype.bits]
            x64 = xh.astype(np.float64)
            want = x64 ** 2 + 3 * x64
            # each term rounds on its own, so bound the error by the terms, not their sum
            worst = max(worst, check(f"generic_map[{dtype}]", got, want, rtol=tol,
                                     atol=tol * (x64 ** 2 + 3 * np.abs(x64))))
        else:  # integers wrap exactly like NumPy's (these values are exact in float64)
            want = xh * xh + dtype.numpy.type(3) * xh
            worst = max(worst, check(f"generic_map[{dtype}]", got, want, rtol=0))
        moved += 2 * n * dtype.itemsize
    return Result("generic_map", fl.current_backend(), f"n={n} x {len(DTYPES)} dtypes",
                  total_first, total_steady, moved, worst)


if __name__ == "__main__":
    print(run())
