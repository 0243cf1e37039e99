"""Kernels over a 3-d index space (``fl.thread.index_3d()``), run by ``test_launch_3d.py``.

Accepted: own-element writes with and without an exact contract block, reads of neighbours,
``index_in_block()`` and shared memory in a 3-d block. Refused (each line marked ``# refused``
holds the expression the caret points at): another thread's element, axes in the wrong order, a
2-d output, ``index_in_block_2d()`` and a kernel mixing ``index_2d()`` with ``index_3d()``.
"""
from __future__ import annotations

import fearless as fl
from fearless import f32

BLOCK = (32, 4, 2)  # x, y, z: 256 threads


@fl.kernel
def axpy3(a: f32, x: fl.Array[f32, 3], y: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    if i < out.shape[0] and j < out.shape[1] and k < out.shape[2]:
        out[i, j, k] = a * x[i, j, k] + y[i, j, k]


@fl.kernel(contract=fl.Contract(dims=3, block=(8, 4, 4)))
def neighbours3(x: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    n0, n1, n2 = out.shape[0], out.shape[1], out.shape[2]
    if i < n0 and j < n1 and k < n2:
        out[i, j, k] = x[i, j, k] + x[max(i - 1, 0), j, k] + 2.0 * x[i, min(j + 1, n1 - 1), k] \
            + 4.0 * x[i, j, max(k - 1, 0)]


@fl.kernel
def copy3_unguarded(x: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    out[i, j, k] = x[i, j, k]  # the tail's writes are skipped, its reads are bounds errors


@fl.kernel(contract=fl.Contract(dims=3, block=BLOCK))
def mirror_in_block(x: fl.Array[f32, 3], slots: fl.DisjointArray[f32, 3],
                    out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    t = fl.thread.index_in_block()
    buf = fl.shared.array(256, f32)
    inside = i < out.shape[0] and j < out.shape[1] and k < out.shape[2]
    buf[t] = x[i, j, k] if inside else 0.0
    fl.sync_threads()
    if inside:
        slots[i, j, k] = fl.f32(t)
        out[i, j, k] = buf[255 - t]


@fl.kernel
def not_own(x: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    if i < out.shape[0] and j + 1 < out.shape[1] and k < out.shape[2]:
        out[i, j + 1, k] = x[i, j, k]  # refused


@fl.kernel(contract=fl.Contract(dims=3, block=BLOCK))
def not_own_exact_block(x: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    if i < out.shape[0] and j < out.shape[1] and k < out.shape[2]:
        out[i, j, fl.thread.block_index(0) * 32 + fl.thread.thread_in_block(0)] = 1.0  # refused


@fl.kernel
def swapped_axes(x: fl.Array[f32, 3], out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    if i < out.shape[1] and j < out.shape[0] and k < out.shape[2]:
        out[j, i, k] = x[j, i, k]  # refused


@fl.kernel
def plane_of_3d(x: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    i, j, k = fl.thread.index_3d()
    if j < out.shape[0] and k < out.shape[1]:
        out[j, k] = x[j, k] + fl.f32(i)  # refused


@fl.kernel
def block_2d_in_3d(out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    ty, tx = fl.thread.index_in_block_2d()  # refused
    out[i, j, k] = fl.f32(ty + tx)


@fl.kernel
def mixed(out: fl.DisjointArray[f32, 3]):
    i, j, k = fl.thread.index_3d()
    r, c = fl.thread.index_2d()  # refused
    out[i, j, k] = fl.f32(r + c)


@fl.kernel
def flat(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = 1.0
