"""Tile kernels of the control-flow tests: scalars from reductions, while, break, continue and
return (a module of its own: kernels need their source file). Each has a NumPy model in
test_control_flow.py or test_scalar_reductions.py."""
from __future__ import annotations

from fearless import f32
from fearless import tile as ft

# scalars from reductions --------------------------------------------------------------------


@ft.kernel
def every_reduction(out: ft.Out[f32], x: ft.In, bm: ft.Const[int] = 16, bn: ft.Const[int] = 32):
    """Block i reduces the (bm, bn) tile i of x down the rows: out[i, :] holds its sum, max,
    min and flat argmax, the sum and argmax of its first row (1-d), its keepdims sum and
    whether any element is > 0."""
    i = out.tile_index[0]
    t = ft.load(x, (i, 0), (bm, bn))
    line = ft.reshape(ft.load(x, (i * bm, 0), (1, bn)), (bn,))
    slot = ft.reshape(ft.arange(8), (1, 8))
    got = ft.where(slot == 0, ft.full((1, 8), ft.sum(t), f32), 0.0)
    got = ft.where(slot == 1, ft.full((1, 8), ft.max(t), f32), got)
    got = ft.where(slot == 2, ft.full((1, 8), t.min(), f32), got)
    got = ft.where(slot == 3, ft.full((1, 8), ft.argmax(t), f32), got)
    got = ft.where(slot == 4, ft.full((1, 8), ft.sum(line, 0), f32), got)
    got = ft.where(slot == 5, ft.full((1, 8), line.argmax(0), f32), got)
    got = ft.where(slot == 6, ft.sum(t, keepdims=True).astype(f32), got)
    got = ft.where(slot == 7, ft.full((1, 8), ft.max(t > 0), f32), got)
    out.store(got)


@ft.kernel
def softmax_tile(out: ft.Out[f32], x: ft.In[f32]):
    """The softmax of each whole tile (a scalar max and sum, no keepdims)."""
    t = ft.load_like(x, out)
    e = ft.exp(t - ft.max(t))
    out.store(e / ft.sum(e))


@ft.kernel
def sign_of_sum(out: ft.Out[f32], x: ft.In[f32]):
    """An if on tile data: tiles whose sum is positive are kept, the others negated."""
    t = ft.load_like(x, out)
    total = ft.sum(t)
    if total > 0:
        out.store(t)
    else:
        out.store(-t)
