"""Kernels with launch contracts, for tests/runtime/test_contract.py."""
import fearless as fl
from fearless import f32, i64


@fl.kernel(contract=fl.Contract(dims=1, block=128,
                                requires=("len(out) == len(x)",
                                          lambda x, n, k: len(x) >= n * k)))
def scaled(x: fl.Slice[f32], n: i64, k: i64, out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(x):
        out[i] = x[i] * 2.0


@fl.kernel(contract=fl.Contract(dims=2, max_threads=256, dynamic_shared=(0, 96 * 1024),
                                min_compute_capability=(8, 0)))
def copy2d(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[r, c]


@fl.kernel(contract=fl.Contract(dims=1, block=64, dynamic_shared=256))
def reverse(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    buf = fl.shared.dynamic(f32)
    buf[t] = x[i]
    fl.sync_threads()
    out[i] = buf[len(buf) - 1 - t]
