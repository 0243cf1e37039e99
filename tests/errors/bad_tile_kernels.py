"""Tile kernels that must be refused, for the golden diagnostics in test_tile_diagnostics.py.

Line numbers matter: the golden texts point into this file. Append new kernels at the end.
"""
import fearless as fl
from fearless import f32
from fearless import tile as ft


@ft.kernel
def neighbour_tile(out: ft.Out[f32], x: ft.In[f32]):
    i, j = out.tile_index
    out.store(ft.load_like(x, out))
    out.store(ft.load(out, (i, j + 1), out.tile_shape))


@ft.kernel
def part_of_a_tile(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out))
    half = ft.load(out, out.tile_index, (8, 32))


@ft.kernel
def load_like_other_shape(out: ft.Out[f32], small: ft.Out[f32], x: ft.In[f32]):
    small.store(ft.load_like(x, small))
    out.store(ft.load_like(x, out) + ft.load_like(small, out))


@fl.func
def right_neighbour(o):
    i, j = o.tile_index
    return ft.load(o, (i, j + 1), o.tile_shape)


@ft.kernel
def neighbour_in_helper(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out))
    out.store(right_neighbour(out))


@ft.kernel
def while_on_a_tile(out: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, out)
    while t > 1.0:
        t = t * 0.5
    out.store(t)


@ft.kernel
def if_on_a_tile(out: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, out)
    if t.max(1) > 0 and t.min() < 0:
        t = -t
    out.store(t)
