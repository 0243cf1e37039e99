"""Programmatic dependent launch on a chain of dependent tile GEMMs (issue 13, item 4).

A chain of ``--length`` GEMMs, each reading the previous one's output: ``y_{i+1} = y_i @ W_i``
(f16, f32 accumulation, ``examples.tile_gemm.matmul`` with 128 x 128 tiles, or 64 x 64 for a
narrow N), captured once with ``fl.capture()`` and replayed; the time per GEMM is the best of
``--reps`` replays (wall time around a replay and a synchronise, divided by the length). The
chain runs twice, in child processes: with programmatic dependent launch (the default: each
kernel waits for the one before it with ``griddepcontrol.wait`` ahead of its first memory
access, and is launched so that it may start while that one finishes) and with
``FEARLESS_PDL=0`` (plain stream order). Both must give the same bits, since PDL changes only
when a kernel starts, not what it reads; the script fails (exit 1) if they differ. cuBLAS runs
the same chain in a torch CUDA graph for scale.

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_pdl.py [--length 32] [--reps 7]
Prints a line per shape and mode, then a table: us per GEMM with and without PDL, the ratio.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

SHAPES = [(128, 4096, 4096), (16, 1024, 1024), (128, 1024, 1024)]   # M, N = K, as in a layer


def child(length: int, reps: int) -> dict:
    """Run every shape's chain in this process (its FEARLESS_PDL decides the mode)."""
    import numpy as np
    import torch

    import fearless as fl
    from examples.tile_gemm import matmul
    from fearless import f16
    from fearless import tile as ft
    fl.set_backend("cuda")
    out = {}
    for m, n, k in SHAPES:
        tile = (128, 128) if n >= 2048 else (64, 64)
        rng = np.random.default_rng(m + n)
        x = fl.asarray(rng.standard_normal((m, k)).astype(np.float16))
        # 1/sqrt(K) keeps every link of the chain at unit scale
        ws = [fl.asarray((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16))
              for _ in range(4)]
        with fl.capture() as graph:
            prev = x
            for i in range(length):
                part = fl.empty((m, n), f16).partition(tile, schedule=ft.persistent())
                done, _, _ = matmul(part, prev, ws[i % 4]).enqueue()   # ownership back at once
                prev = done.unpartition()
        best = _best(graph.replay, fl.synchronize, reps) / length
        digest = hashlib.sha256(np.ascontiguousarray(prev.numpy()).tobytes()).hexdigest()[:16]
        graph.release()
        tw = [torch.from_numpy(w.numpy()).cuda() for w in ws]
        tx = torch.from_numpy(x.numpy()).cuda()
        cublas = _torch_chain(torch, tx, tw, length, reps)
        out[f"{m}x{n}x{k}"] = {"us": best * 1e6, "cublas_us": cublas * 1e6, "digest": digest}
        print(f"{m}x{n}x{k} PDL={os.environ.get('FEARLESS_PDL', '1')}: {best * 1e6:.2f} us per "
              f"GEMM, cuBLAS {cublas * 1e6:.2f}", file=sys.stderr, flush=True)
    return out


def _best(run, sync, reps: int) -> float:
    run()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def _torch_chain(torch, x, ws, length: int, reps: int) -> float:
    def chain():
        y = x
        for i in range(length):
            y = y @ ws[i % 4]
        return y
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    return _best(graph.replay, torch.cuda.synchronize, reps) / length


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.length, args.reps)))
        return 0
    runs = {}
    for pdl in ("1", "0"):
        env = dict(os.environ, FEARLESS_PDL=pdl)
        done = subprocess.run([sys.executable, __file__, "--child", "--length", str(args.length),
                               "--reps", str(args.reps)], env=env, capture_output=True,
                              text=True, check=True)
        sys.stderr.write(done.stderr)
        runs[pdl] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{'shape':18s} {'PDL us':>8s} {'plain us':>9s} {'PDL/plain':>10s} {'cuBLAS us':>10s}"
          f"  same bits")
    same_all = True
    for shape, on in runs["1"].items():
        off = runs["0"][shape]
        same = on["digest"] == off["digest"]
        same_all &= same
        print(f"{shape:18s} {on['us']:8.2f} {off['us']:9.2f} {on['us'] / off['us']:10.3f} "
              f"{on['cublas_us']:10.2f}  {'yes' if same else 'NO'}")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
