"""SIMT kernels that the ownership, lazy-operation and graph tests launch through ``kernel.op``
(tile kernels do not exist yet; a Partition stands in for a written parameter)."""
from __future__ import annotations

import fearless as fl
from fearless import f32


@fl.kernel
def add(x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] + y[i]


@fl.kernel
def axpy2d(a: f32, x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a * x[r, c] + 1.0


@fl.kernel
def shifted(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i + 1]  # reads one past the end in the last thread: KernelBoundsError
