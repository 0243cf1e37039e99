"""Tile kernels with gathers, scatters, atomics and load padding (their own module: kernels need
their source file). Used by test_gather_scatter.py, test_atomics.py and test_memory_order.py."""
from __future__ import annotations

from typing import TypeVar

import fearless as fl
from fearless import f32, i32
from fearless import tile as ft

T = TypeVar("T")


# gathers and load padding -------------------------------------------------------------------

@ft.kernel
def gather_1d(out: ft.Out[T], x: ft.In[T], idx: ft.In[i32], pad: T):
    out.store(ft.gather(x, ft.load_like(idx, out), padding=pad))


@ft.kernel
def gather_rows_cols(out: ft.Out[f32], x: ft.In[f32], rows: ft.In[i32], cols: ft.In[i32]):
    bm, bn = out.tile_shape
    i, j = out.tile_index
    r = ft.load(rows, (i,), (bm,)).reshape((bm, 1))
    c = ft.load(cols, (j,), (bn,)).reshape((1, bn))
    out.store(ft.gather(x, (r, c)))  # result[a, b] = x[rows[a], cols[b]]


@ft.kernel
def gather_scalar(out: ft.Out[f32], x: ft.In[f32], k: i32):
    v = ft.gather(x, k + out.tile_index[0], padding=-1.0)
    out.store(ft.full(out.tile_shape, v, f32))


@ft.kernel
def row_max_padded(out: ft.Out[f32], x: ft.In[f32], pad: ft.Const[float]):
    bm, bn = out.tile_shape
    t = ft.load(x, (out.tile_index[0], 0), (bm, 64), padding=pad)
    out.store(ft.broadcast(t.max(1, keepdims=True), (bm, bn)))


@ft.kernel
def load_like_padded(out: ft.Out[f32], x: ft.In[f32], pad: ft.Const[float]):
    out.store(ft.load_like(x, out, padding=pad))


@ft.kernel
def tile_max_padded(out: ft.Out[f32], x: ft.In[f32], pad: ft.Const[float]):
    out.store(ft.full(out.tile_shape, ft.max(ft.load_like(x, out, padding=pad)), f32))


# scatters ---------------------------------------------------------------------------------

@ft.kernel
def reverse_tiles(out: ft.Out[f32], x: ft.In[f32]):
    """Each tile reversed in place, then read back and doubled (a read after the scatter, a
    store after the read)."""
    n = out.tile_shape[0]
    base = out.tile_index[0] * n
    ft.scatter(out, base + (n - 1 - ft.arange(n)), ft.load_like(x, out))
    out.store(out.load() * 2.0)


@ft.kernel
def transpose_in_tile(out: ft.Out[f32], x: ft.In[f32]):
    """out[i0*b + c, j0*b + r] = x[i0*b + r, j0*b + c]: each square tile transposed in place."""
    b = out.tile_shape[0]
    i0, j0 = out.tile_index
    r = ft.arange(b).reshape((b, 1))
    c = ft.arange(b).reshape((1, b))
    ft.scatter(out, (i0 * b + c, j0 * b + r), ft.load_like(x, out))


@ft.kernel
def scatter_clamped(out: ft.Out[i32], offsets: ft.In[i32]):
    """out[clamp(base + offsets[k])] = k: coordinates from data, clamped into the own tile."""
    n = out.tile_shape[0]
    base = out.tile_index[0] * n
    at = ft.minimum(ft.maximum(base + ft.load_like(offsets, out), base), base + n - 1)
    ft.scatter(out, at, base + ft.arange(n))


@ft.kernel
def scatter_wrapped(out: ft.Out[i32], offsets: ft.In[i32]):
    """out[base + offsets[k] % n] = k, then the same with & (n - 1) over it (loop-free
    variables that are assigned twice)."""
    n = out.tile_shape[0]
    base = out.tile_index[0] * n
    o = ft.load_like(offsets, out)
    at = base + o % n
    ft.scatter(out, at, base + ft.arange(n))
    at = base + (o & (n - 1))
    ft.scatter(out, at, (base + ft.arange(n)) * 2)


@ft.kernel
def gather_own_after_scatter(out: ft.Out[f32], x: ft.In[f32]):
    """A gather of the own tile reads what the scatter before it wrote (a rotation by one)."""
    n = out.tile_shape[0]
    base = out.tile_index[0] * n
    ft.scatter(out, base + ft.arange(n), ft.load_like(x, out))
    rotated = ft.gather(out, base + (ft.arange(n) + 1) % n, padding=-5.0)
    out.store(rotated)


# atomics ----------------------------------------------------------------------------------

@ft.kernel
def histogram(ranks: ft.Out[i32], hist: ft.Atomic[i32], x: ft.In[i32]):
    """hist[b] += 1 for every b of x; ranks: the count before each element's own update.
    Elements past x's end (the padding of the last tile) get bin -1, which is skipped."""
    n = ranks.tile_shape[0]
    k = ranks.tile_index[0] * n + ft.arange(n)
    b = ft.where(k < x.shape[0], ft.load_like(x, ranks), -1)
    ranks.store(hist.add(b, 1))


@fl.func
def coordinates(idx, old):
    """``idx``'s tile at ``old``'s own tile, -1 (outside any tensor: skipped) past its end,
    where the load pads with 0, which is a coordinate like any other."""
    n = old.tile_shape[0]
    k = old.tile_index[0] * n + ft.arange(n)
    return ft.where(k < idx.shape[0], ft.load_like(idx, old), -1)


@ft.kernel
def scatter_add(old: ft.Out[T], acc: ft.Atomic[T], idx: ft.In[i32], v: ft.In[T]):
    old.store(acc.add(coordinates(idx, old), ft.load_like(v, old)))


@ft.kernel
def scatter_max(old: ft.Out[T], acc: ft.Atomic[T], idx: ft.In[i32], v: ft.In[T]):
    old.store(acc.max(coordinates(idx, old), ft.load_like(v, old)))


@ft.kernel
def scatter_min(old: ft.Out[T], acc: ft.Atomic[T], idx: ft.In[i32], v: ft.In[T]):
    old.store(acc.min(coordinates(idx, old), ft.load_like(v, old)))


@ft.kernel
def scatter_exchange(old: ft.Out[T], acc: ft.Atomic[T], idx: ft.In[i32], v: ft.In[T]):
    old.store(acc.exchange(coordinates(idx, old), ft.load_like(v, old)))


@ft.kernel
def scatter_cas(old: ft.Out[T], acc: ft.Atomic[T], idx: ft.In[i32], expected: ft.In[T],
                desired: ft.In[T]):
    old.store(acc.compare_exchange(coordinates(idx, old), ft.load_like(expected, old),
                                   ft.load_like(desired, old)))


@ft.kernel
def add_2d(old: ft.Out[i32], acc: ft.Atomic[i32], rows: ft.In[i32], cols: ft.In[i32]):
    old.store(acc.add((coordinates(rows, old), ft.load_like(cols, old)), 1))


@ft.kernel
def tickets(out: ft.Out[i32], counter: ft.Atomic[i32]):
    """Each tile block takes the next ticket of a counter (a scalar atomic) and fills its tile."""
    ticket = counter.add(0, 1)
    out.store(ft.full(out.tile_shape, ticket, i32))
