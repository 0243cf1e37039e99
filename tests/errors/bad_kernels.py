"""Kernels that must be refused, for the golden diagnostics in test_diagnostics.py.

Line numbers matter: the golden texts point into this file. Append new kernels at the end.
"""
import fearless as fl
from fearless import f32


@fl.kernel
def write_input(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    x[i] = 1.0


@fl.kernel
def neighbour(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i + 1 < len(out):
        out[i + 1] = x[i]


@fl.kernel
def reversed_index(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    j = len(out) - 1 - i
    out[j] = x[i]


@fl.kernel
def swapped(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    out[c, r] = a[r, c]


@fl.kernel
def read_neighbour_output(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = out[i - 1]


@fl.kernel
def undefined_name(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = not_defined_anywhere


@fl.kernel
def float_index(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = x[1.5]


@fl.kernel
def both_spaces(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    r, c = fl.thread.index_2d()
    out[i] = 1.0


@fl.kernel
def float_to_int(x: fl.Slice[f32], out: fl.DisjointSlice[fl.i32]):
    i = fl.thread.index_1d()
    out[i] = x[i]


@fl.kernel
def returns_value(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    return 1.0


@fl.kernel
def list_literal(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    values = [1.0, 2.0]
    out[i] = 0.0


@fl.kernel
def uses_2d(a: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[r, c]


@fl.kernel
def copy(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i + 2]


@fl.kernel
def huge_shift(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = float(i >> (1 << (1 << 40)))  # Python would build a 2**40-bit int first
