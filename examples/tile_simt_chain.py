"""A tile kernel and a SIMT kernel chained lazily on one stream over the same tensors.

    y = a * x          (tile kernel, y partitioned into 1024-element tiles)
    z[i] = y[i] - x[i] (SIMT kernel, one thread per element)

The chain is one DeviceOperation: nothing runs until ``.sync()``; the SIMT launch, built inside
``.then()``, gets ``y`` back from the finished tile kernel (stream order makes that safe) and
``z`` moves through both steps. The result must equal (a - 1) * x.
"""
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
def scale(y: ft.Out[f32], x: ft.In[f32], a: f32):
    y.store(ft.load_like(x, y) * a)


@fl.kernel
def difference(y: fl.Slice[f32], x: fl.Slice[f32], z: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(z):
        z[i] = y[i] - x[i]


def chain(y, x, z, a: float, launch):
    """The lazy chain; ``.sync()`` returns (y, x, z), y and z as partitions again."""
    def second(done):
        y_part, x_in, _ = done
        y_tensor = y_part.unpartition()
        return difference.op(launch, y_tensor, x_in, z).then(
            lambda r: (r[0].partition(y_part.tile_shape), r[1], r[2]))
    return scale(y, x, a).then(second)


def run(n: int | None = None, repeat: int = 20) -> Result:
    n = n or sizes(1 << 26, 5000)
    rng = np.random.default_rng(7)
    xh = rng.standard_normal(n, np.float32)
    a = 3.0
    x = fl.asarray(xh)
    y = fl.full(n, np.nan, f32).partition(1024)
    z = fl.full(n, np.nan, f32)
    launch = difference.prepare(n)

    def step(owned):
        y, z = owned
        y, _, z = chain(y, x, z, a, launch).sync()
        return y, z
    (y, z), first, steady = timed_op(step, (y, z), repeat)
    x64 = xh.astype(np.float64)
    err = check("tile_simt_chain", z.numpy(), (np.float32(a) * xh).astype(np.float64) - x64,
                rtol=0, atol=1e-7 * np.abs(x64) * (a + 1))
    check("tile_simt_chain y", y.unpartition().numpy(), a * x64, rtol=6e-8)
    return Result("tile_simt_chain", fl.current_backend(), f"n={n}", first, steady, 20 * n, err)


if __name__ == "__main__":
    print(run())
