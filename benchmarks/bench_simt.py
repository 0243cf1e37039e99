"""SIMT track benchmark on the GPU: fearless against PyTorch, Triton, CuPy and numba-cuda.

Prints one table: time per launch (``triton.testing.do_bench``: CUDA events, L2 flushed between
runs), effective bandwidth, and the ratio to the best peer; then bounds checks on vs
``fl.unchecked``, host launch overhead, and cold compile / warm disk-cache load times.
Run on the GPU machine from a checkout:  PYTHONPATH=src:. python benchmarks/bench_simt.py
Bandwidth counts bytes read + written once; "copy" is a device-to-device copy of the same bytes.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("FEARLESS_CACHE_DIR", tempfile.mkdtemp(prefix="fearless-bench-"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import fearless as fl  # noqa: E402
from examples.image_filter import photograph, sobel  # noqa: E402
from examples.matrix_add import matrix_add  # noqa: E402
from examples.saxpy import saxpy  # noqa: E402
from examples.vector_add import vector_add  # noqa: E402

N = 1 << 27
ROWS, COLS = 8192, 8192


@triton.jit
def _tr_saxpy(a, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m),
             mask=m)


@triton.jit
def _tr_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m),
             mask=m)


def ms(fn) -> float:
    return float(do_bench(fn, warmup=25, rep=100))


def row(table, name, nbytes, results):
    best_peer = min((t for k, t in results.items() if k not in ("fearless", "copy") and t),
                    default=None)
    table.append({"case": name, "bytes": nbytes, **{k: t for k, t in results.items()},
                  "fearless/best peer": (best_peer / results["fearless"]) if best_peer else None})


def numba_peer():
    try:
        from numba import cuda  # noqa: F401

        @cuda.jit
        def nb_add(x, y, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = x[i] + y[i]
        return nb_add, None
    except Exception as exc:  # numba-cuda 0.30 fails on NumPy 2.5 (np.row_stack removed)
        return None, f"{type(exc).__name__}: {exc}"[:120]


def bandwidth_table():
    table = []
    tx, ty = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    tout = torch.empty_like(tx)
    x, y, out = fl.asarray(tx), fl.asarray(ty), fl.asarray(tout)  # zero-copy views of torch
    copy = ms(lambda: tout.copy_(tx))
    la = vector_add.prepare(N)
    grid = (triton.cdiv(N, 1024),)
    import cupy as cp
    cx, cy = cp.asarray(tx), cp.asarray(ty)
    results = {"fearless": ms(lambda: vector_add[la](x, y, out)),
               "torch": ms(lambda: torch.add(tx, ty, out=tout)),
               "triton": ms(lambda: _tr_add[grid](tx, ty, tout, N, BLOCK=1024)),
               "cupy": ms(lambda: cp.add(cx, cy, out=cp.asarray(tout))), "copy": copy}
    nb, why = numba_peer()
    if nb is not None:
        try:  # numba-cuda imports but fails at its first compile under NumPy 2.5
            from numba import cuda
            nx, ny, nout = (cuda.as_cuda_array(t) for t in (tx, ty, tout))
            results["numba"] = ms(lambda: nb[(N + 255) // 256, 256](nx, ny, nout))
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"[:120]
    row(table, "vector_add f32 n=2^27", 12 * N, results)
    assert torch.allclose(tout, tx + ty)

    ls = saxpy.prepare(N)
    results = {"fearless": ms(lambda: saxpy[ls](2.5, x, y, out)),
               "torch": ms(lambda: torch.add(ty, tx, alpha=2.5, out=tout)),
               "triton": ms(lambda: _tr_saxpy[grid](2.5, tx, ty, tout, N, BLOCK=1024)),
               "copy": copy}
    row(table, "saxpy f32 n=2^27", 12 * N, results)

    ta, tb = torch.randn(ROWS, COLS, device="cuda"), torch.randn(COLS, ROWS, device="cuda").T
    tm = torch.empty(ROWS, COLS, device="cuda")
    lm = matrix_add.prepare((ROWS, COLS))
    a, b, m = fl.asarray(ta), fl.asarray(tb), fl.asarray(tm)
    results = {"fearless": ms(lambda: matrix_add[lm](a, b, m)),
               "torch": ms(lambda: torch.add(ta, tb, out=tm)),
               "copy": ms(lambda: tm.copy_(ta))}
    row(table, "matrix_add 8192^2, b transposed", 12 * ROWS * COLS, results)

    img = torch.tensor(np.tile(photograph(), (8, 8)), device="cuda")
    edges = torch.empty_like(img)
    lsob = sobel.prepare(tuple(img.shape))
    kx = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]], device="cuda")
    weight = torch.stack([kx, kx.T])[:, None]

    def torch_sobel():
        padded = torch.nn.functional.pad(img[None, None], (1, 1, 1, 1), mode="replicate")
        g = torch.nn.functional.conv2d(padded, weight)
        return torch.sqrt((g * g).sum(1))
    fi, fe = fl.asarray(img), fl.asarray(edges)
    results = {"fearless": ms(lambda: sobel[lsob](fi, fe)), "torch": ms(torch_sobel)}
    row(table, f"sobel {img.shape[0]}x{img.shape[1]} photo", 8 * img.numel(), results)
    torch.cuda.synchronize()
    assert torch.allclose(edges, torch_sobel()[0], atol=1e-4)
    return table, why


def bounds_check_cost():
    tx, ty = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    tout = torch.empty_like(tx)
    x, y, out = fl.asarray(tx), fl.asarray(ty), fl.asarray(tout)
    fast = fl.unchecked(vector_add)
    checked = ms(lambda: vector_add[vector_add.prepare(N)](x, y, out))
    unchecked = ms(lambda: fast[fast.prepare(N)](x, y, out))
    return {"checked ms": checked, "unchecked ms": unchecked, "overhead %": 100 * (checked / unchecked - 1)}


def launch_overhead():
    x, y, out = fl.ones(32), fl.ones(32), fl.zeros(32)
    la = vector_add.prepare(32)
    tx, ty, tout = torch.ones(32, device="cuda"), torch.ones(32, device="cuda"), torch.zeros(32, device="cuda")
    out_us = {}
    for name, fn in (("fearless", lambda: vector_add[la](x, y, out)),
                     ("torch", lambda: torch.add(tx, ty, out=tout)),
                     ("triton", lambda: _tr_add[(1,)](tx, ty, tout, 32, BLOCK=1024))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        torch.cuda.synchronize()
        out_us[name] = (time.perf_counter() - t0) / 2000 * 1e6
    return out_us


def compile_times():
    from fearless.kernel.simt import Kernel
    out = {}
    for k in (vector_add, saxpy, matrix_add, sobel):
        fresh = Kernel(k.fn)
        t0 = time.perf_counter()
        args = _args_for(k)
        fresh[fresh.prepare(*args[0])](*args[1])
        torch.cuda.synchronize()
        cold = time.perf_counter() - t0
        warm_kernel = Kernel(k.fn)  # a new process would see the same: the disk cache
        t0 = time.perf_counter()
        warm_kernel[warm_kernel.prepare(*args[0])](*args[1])
        torch.cuda.synchronize()
        out[k.name] = {"cold ms": cold * 1e3, "warm (disk) ms": (time.perf_counter() - t0) * 1e3}
    return out


def _args_for(k):
    if k.name in ("vector_add",):
        return (1024,), (fl.ones(1024), fl.ones(1024), fl.zeros(1024))
    if k.name == "saxpy":
        return (1024,), (2.0, fl.ones(1024), fl.ones(1024), fl.zeros(1024))
    if k.name == "matrix_add":
        return ((64, 64),), (fl.ones((64, 64)), fl.ones((64, 64)), fl.zeros((64, 64)))
    return ((64, 64),), (fl.ones((64, 64)), fl.zeros((64, 64)))


def main():
    fl.set_backend("cuda")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, fearless {fl.__version__}")
    compile_report = compile_times()  # first, so the cache is cold
    table, numba_why = bandwidth_table()
    bounds = bounds_check_cost()
    overhead = launch_overhead()
    print(f"\n{'case':<34}{'fearless ms':>12}{'torch':>9}{'triton':>9}{'cupy':>9}{'numba':>9}"
          f"{'copy':>9}{'GB/s':>8}{'% copy':>8}{'vs best peer':>13}")
    for r in table:
        cells = "".join(f"{r.get(k, float('nan')) or float('nan'):9.3f}"
                        for k in ("torch", "triton", "cupy", "numba", "copy"))
        gbps = r["bytes"] / r["fearless"] / 1e6
        pct = 100 * r["copy"] / r["fearless"] if r.get("copy") else float("nan")
        ratio = r["fearless/best peer"]
        print(f"{r['case']:<34}{r['fearless']:12.3f}{cells}{gbps:8.0f}{pct:8.1f}"
              f"{(ratio or float('nan')):12.2f}x")
    if numba_why:
        print(f"numba-cuda: unavailable ({numba_why})")
    print(f"\nbounds checks, vector_add n=2^27: {bounds['checked ms']:.3f} ms checked, "
          f"{bounds['unchecked ms']:.3f} ms unchecked ({bounds['overhead %']:+.1f}%)")
    print("host time per launch (tiny kernel, us): " +
          ", ".join(f"{k} {v:.1f}" for k, v in overhead.items()))
    print("compile: " + "; ".join(f"{k} cold {v['cold ms']:.0f} ms, warm {v['warm (disk) ms']:.1f} ms"
                                  for k, v in compile_report.items()))
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "bench_simt.json"), "w") as f:
            json.dump({"table": table, "bounds": bounds, "launch_us": overhead,
                       "compile": compile_report, "numba": numba_why}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
