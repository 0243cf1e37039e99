"""Experiment: logical threads per hardware thread (coarsening) and bounds checks, on the GPU.

Times vector_add, saxpy, matrix_add and sobel compiled with COARSEN = 1 and 4 (the default),
checked and unchecked, against a device-to-device copy of the same bytes (GB/s counts bytes read
and written). Run on the GPU machine: PYTHONPATH=src:. python benchmarks/exp_coarsen.py
"""
from __future__ import annotations

import os

os.environ["FEARLESS_CACHE"] = "0"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import fearless as fl  # noqa: E402
from fearless.backends.llvm import lower  # noqa: E402
from fearless.kernel import Kernel  # noqa: E402
from examples.image_filter import photograph, sobel  # noqa: E402
from examples.matrix_add import matrix_add  # noqa: E402
from examples.saxpy import saxpy  # noqa: E402
from examples.vector_add import vector_add  # noqa: E402

fl.set_backend("cuda")
N = 1 << 27
tx, ty = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
tout = torch.empty_like(tx)
x, y, out = fl.asarray(tx), fl.asarray(ty), fl.asarray(tout)
ta, tb = torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")
tm = torch.empty_like(ta)
a, b, m = fl.asarray(ta), fl.asarray(tb), fl.asarray(tm)
img = torch.tensor(np.tile(photograph(), (8, 8)), device="cuda")
edges = torch.empty_like(img)
fi, fe = fl.asarray(img), fl.asarray(edges)
copy = do_bench(lambda: tout.copy_(tx))
print(f"copy n=2^27: {copy:.3f} ms ({8 * N / copy / 1e6:.0f} GB/s read+write)")
cases = {
    "vector_add": (vector_add, N, (x, y, out), 12 * N),
    "saxpy": (saxpy, N, (2.0, x, y, out), 12 * N),
    "matrix_add": (matrix_add, (8192, 8192), (a, b, m), 12 * 8192 ** 2),
    "sobel": (sobel, tuple(img.shape), (fi, fe), 8 * img.numel()),
}
for k in (1, 4):
    lower.COARSEN.update({1: k, 2: k})
    line = []
    for name, (kern, size, args, nbytes) in cases.items():
        for checked in (True, False):
            fresh = Kernel(kern.fn, bounds_checks=checked)
            launch = fresh.prepare(size)
            t = do_bench(lambda: fresh[launch](*args))
            line.append(f"{name}{'' if checked else '/u'} {nbytes / t / 1e6:5.0f}")
    torch.cuda.synchronize()
    print(f"COARSEN={k}: " + "  ".join(line) + "  GB/s")
