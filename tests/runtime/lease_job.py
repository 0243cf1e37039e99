"""A script for ``fearless sanitize --tool memcheck`` (tests/runtime/test_streams.py runs it):
every launch's inputs and temporaries are dropped right after it is enqueued, and the memory is
reallocated and overwritten at once; a use after free shows as a memcheck finding or as a wrong
value here (exit 1). SIMT launches (their arguments leased to the stream) and tile operations
(fearless memory of the stream not leased: freed in the stream's order, memory.StreamOrdered)
both. Usage: python lease_job.py [ITERATIONS]."""
from __future__ import annotations

import gc
import sys

import torch

import fearless as fl
from fearless import tile as ft


@fl.kernel
def scale(x: fl.Slice[fl.f32], a: fl.f32, out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * a + 1.0


@ft.kernel
def scale_tiles(out: ft.Out[fl.f32], x: ft.In[fl.f32], a: fl.f32):
    out.store(ft.load_like(x, out) * a + 1.0)


def main(iterations: int) -> int:
    n = 1 << 16
    launch = scale.prepare(n)
    outs = []
    with fl.stream(fl.Stream()):  # non-blocking: not ordered with torch's own stream
        for k in range(iterations):
            x = torch.full((n,), float(k), device="cuda")   # a foreign input
            tmp = fl.full(n, float(k), fl.f32)               # a fearless temporary
            out = fl.empty(n)
            scale[launch](x, 2.0, tmp)
            scale[launch](tmp, 1.0, out)                     # reads what the last launch wrote
            mid = scale_tiles(fl.empty(n).partition(1024), out, 3.0).enqueue()[0].unpartition()
            last = scale_tiles(fl.empty(n).partition(1024), mid, 0.5).enqueue()[0]
            outs.append(last.unpartition())                  # (6k + 6 + 1) / 2 + 1
            del x, tmp, out, mid, last  # the launches hold the only references now
            torch.full((n,), -7.0, device="cuda")            # reuses x's block once torch frees it
            fl.full(n, -7.0, fl.f32)                         # and tmp's, out's, mid's
            fl.full(n, -7.0, fl.f32)
        fl.synchronize()
    gc.collect()
    wrong = [k for k, out in enumerate(outs) if not (out.numpy() == 3.0 * k + 4.5).all()]
    if wrong:
        print(f"wrong results after {len(wrong)} of {iterations} iterations, first {wrong[0]}")
        return 1
    print(f"{iterations} iterations right")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
