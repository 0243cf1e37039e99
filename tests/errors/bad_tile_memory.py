"""Tile kernels with gathers, scatters, atomics and load paddings that must be refused, for the
golden diagnostics in test_tile_memory_diagnostics.py.

Line numbers matter: the golden texts point into this file. Append new kernels at the end.
"""
import math

from fearless import f16, f32, i32, u8
from fearless import tile as ft


@ft.kernel
def atomic_on_an_in(out: ft.Out[i32], x: ft.In[i32]):
    out.store(x.add(ft.load_like(x, out), 1))


@ft.kernel
def atomic_on_an_out(out: ft.Out[i32], x: ft.In[i32]):
    out.max(ft.load_like(x, out), 1)


@ft.kernel
def load_of_an_atomic(out: ft.Out[i32], hist: ft.Atomic[i32]):
    out.store(ft.load(hist, (0,), (16,)))


@ft.kernel
def gather_of_an_atomic(out: ft.Out[i32], hist: ft.Atomic[i32], x: ft.In[i32]):
    out.store(ft.gather(hist, ft.load_like(x, out)))


@ft.kernel
def store_to_an_atomic(out: ft.Out[i32], hist: ft.Atomic[i32], x: ft.In[i32]):
    hist.store(ft.load_like(x, out))


@ft.kernel
def scatter_at_data(out: ft.Out[f32], idx: ft.In[i32], x: ft.In[f32]):
    ft.scatter(out, ft.load_like(idx, out), ft.load_like(x, out))


@ft.kernel
def scatter_one_past(out: ft.Out[f32], x: ft.In[f32]):
    n = out.tile_shape[0]
    ft.scatter(out, out.tile_index[0] * n + ft.arange(n) + 1, ft.load_like(x, out))


@ft.kernel
def scatter_to_the_next_tile(out: ft.Out[f32], x: ft.In[f32]):
    i, j = out.tile_index
    bm, bn = out.tile_shape
    r = ft.arange(bm).reshape((bm, 1))
    c = ft.arange(bn).reshape((1, bn))
    ft.scatter(out, (i * bm + r, (j + 1) * bn + c), ft.load_like(x, out))


@ft.kernel
def scatter_in_a_loop(out: ft.Out[f32], x: ft.In[f32]):
    n = out.tile_shape[0]
    at = out.tile_index[0] * n + ft.arange(n)
    for k in range(3):
        ft.scatter(out, at, ft.load_like(x, out))
        at = at + 1


@ft.kernel
def scatter_into_an_in(out: ft.Out[f32], x: ft.In[f32]):
    ft.scatter(x, ft.arange(16), 1.0)
    out.store(ft.load_like(x, out))


@ft.kernel
def gather_another_tile(out: ft.Out[f32], x: ft.In[f32]):
    n = out.tile_shape[0]
    out.store(ft.load_like(x, out))
    out.store(ft.gather(out, ft.arange(n)))


@ft.kernel
def narrow_atomic_add(out: ft.Out[u8], counts: ft.Atomic[u8], x: ft.In[i32]):
    out.store(counts.add(ft.load_like(x, out), 1))


@ft.kernel
def half_atomic_max(out: ft.Out[f16], best: ft.Atomic[f16], x: ft.In[i32], v: ft.In[f16]):
    out.store(best.max(ft.load_like(x, out), ft.load_like(v, out)))


@ft.kernel
def float_coordinates(out: ft.Out[f32], x: ft.In[f32], at: ft.In[f32]):
    out.store(ft.gather(x, ft.load_like(at, out)))


@ft.kernel
def one_coordinate_for_2d(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.gather(x, ft.arange(16).reshape((4, 4))))


@ft.kernel
def pad_with_one_and_a_half(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load(x, out.tile_index, out.tile_shape, padding=1.5))


@ft.kernel
def pad_ints_with_inf(out: ft.Out[i32], x: ft.In[i32]):
    out.store(ft.load_like(x, out, padding=-math.inf))


@ft.kernel
def pad_with_a_variable(out: ft.Out[f32], x: ft.In[f32], p: f32):
    out.store(ft.load_like(x, out, padding=p))


@ft.kernel
def only_an_atomic(hist: ft.Atomic[i32], x: ft.In[i32]):
    hist.add(ft.load(x, (0,), (16,)), 1)
