"""Kernels whose mistakes are inside device functions or in calls of them (for golden tests:
line numbers matter, append new cases at the end)."""
import fearless as fl
from fearless import f32, tile as ft


@fl.func
def add_undefined(v):
    return v + not_defined_anywhere


@fl.func
def twice_undefined(v):
    return add_undefined(v) * 2.0


@fl.kernel
def nested(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = twice_undefined(x[i])


@fl.func
def put_next(out, i, v):
    out[i + 1] = v


@fl.kernel
def writes_neighbour(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    put_next(out, i, x[i])


@fl.func
def next_of(x, i):
    return x[i + 1]


@fl.kernel
def reads_past_end(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = next_of(x, i)


@fl.func
def leaky(v, slope=0.1, *, bias=0.0):
    return (v if v > 0 else v * slope) + bias


@fl.kernel
def unknown_keyword(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = leaky(x[i], slop=0.2)


@fl.kernel
def two_values(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = leaky(x[i], 0.2, slope=0.3)


@fl.kernel
def missing_argument(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = leaky(slope=0.3)


@fl.kernel
def too_many(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = leaky(x[i], 0.2, 1.0)


@fl.func
def scaled(v, /, factor=2.0):
    return v * factor


@fl.kernel
def positional_only_by_name(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = scaled(v=x[i])


@fl.func
def with_list_default(v, table=[1.0, 2.0]):
    return v


@fl.kernel
def bad_default(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = with_list_default(x[i])


@fl.func
def varargs(*vs):
    return vs[0]


@fl.kernel
def star_parameter(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = varargs(x[i])


@fl.func
def tile_plus_text(t):
    return t + "text"


@ft.kernel
def tile_calls_bad(z: ft.Out[f32], x: ft.In[f32]):
    z.store(tile_plus_text(ft.load_like(x, z)))
