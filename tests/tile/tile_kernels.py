"""Tile kernels used by the tile tests (a module of its own: kernels need their source file)."""
from __future__ import annotations

import math

import fearless as fl
from fearless import bf16, f16, f32, i32
from fearless import tile as ft


@ft.kernel
def elementwise(out: ft.Out[f32], x: ft.In[f32], y: ft.In[f32], s: f32):
    a = ft.load_like(x, out)
    b = ft.load_like(y, out)
    r = ft.where(a > b, a * s - b, ft.maximum(a, b) / 2.0)
    r = r + ft.exp(ft.minimum(a, 1.0)) - ft.sqrt(ft.maximum(b, 0.0)) + ft.tanh(a)
    out.store(r + ft.rsqrt(b * b + 1.0) + ft.log(a * a + 1.0) + abs(a) % 1.5)


@ft.kernel
def rows(out: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, out)
    total = ft.sum(t, 1, keepdims=True)
    hi = ft.max(t, axis=1, keepdims=True)
    lo = t.min(1, keepdims=True)
    out.store(t * 0.0 + total + hi * 10.0 - lo)


@ft.kernel
def argmax_rows(out: ft.Out[i32], x: ft.In[f32]):
    bm, bn = out.tile_shape
    t = ft.load(x, (out.tile_index[0], 0), (bm, 64))
    out.store(ft.broadcast(ft.reshape(ft.argmax(t, 1), (bm, 1)), (bm, bn)))


@ft.kernel
def argmax_rows_u8(out: ft.Out[i32], x: ft.In[fl.u8]):
    bm, bn = out.tile_shape
    t = ft.load(x, (out.tile_index[0], 0), (bm, 64))
    out.store(ft.broadcast(ft.reshape(ft.argmax(t, 1), (bm, 1)), (bm, bn)))


@ft.kernel
def argmax_rows_u32(out: ft.Out[i32], x: ft.In[fl.u32]):
    bm, bn = out.tile_shape
    t = ft.load(x, (out.tile_index[0], 0), (bm, 64))
    out.store(ft.broadcast(ft.reshape(ft.argmax(t, 1), (bm, 1)), (bm, bn)))


@ft.kernel
def transpose(out: ft.Out[f32], x: ft.In[f32]):
    i, j = out.tile_index
    bm, bn = out.tile_shape
    out.store(ft.load(x, (j, i), (bn, bm)).T)


@ft.kernel
def loops(out: ft.Out[f32], x: ft.In[f32], n: int):
    acc = ft.zeros(out.tile_shape, f32)
    for k in range(n):
        if k % 2 == 0:
            acc = acc + ft.load_like(x, out) * k
        else:
            acc = acc - 1.0
    out.store(acc)


@ft.kernel
def iota(out: ft.Out[i32]):
    (n,) = out.tile_shape
    out.store(ft.arange(n) + out.tile_index[0] * n)


@ft.kernel
def iota3(out: ft.Out[i32]):
    i, j, k = out.tile_index
    out.store(ft.full(out.tile_shape, i + j + k, i32))


@ft.kernel
def matmul(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@ft.kernel
def two_outputs(p: ft.Out[f32], q: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, p)
    p.store(t + 1.0)
    q.store(t * 2.0)


@ft.kernel
def fixed_tile(out: ft.Out[f32, 256], x: ft.In[f32]):
    out.store(ft.load_like(x, out))


@ft.kernel
def mixed(out: ft.Out[f16], x: ft.In[bf16]):
    out.store((ft.load_like(x, out).astype(f32) * math.pi).astype(f16))


# memory order: a tile block reads back and rewrites its own tile -----------------------------

@ft.kernel
def store_load_store(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out) * 2.0)
    back = out.load()
    out.store(back + 1.0)
    out.store(out.load() * 3.0)


@ft.kernel
def store_load_in_loop(out: ft.Out[f32], x: ft.In[f32], n: int):
    out.store(ft.load_like(x, out))
    for k in range(n):
        out.store(out.load() * 2.0 + k)


@ft.kernel
def store_load_in_branch(out: ft.Out[f32], x: ft.In[f32], flip: int):
    t = ft.load_like(x, out)
    out.store(t)
    if flip > 0:
        out.store(-out.load())
    else:
        out.store(out.load() + t)
    if flip > 1:  # a branch without else: its tokens leave through the if's results too
        out.store(out.load() * 4.0)
    out.store(out.load() * 0.5)


@ft.kernel
def rmsnorm_rope(out: ft.Out[f16], x: ft.In[f16], w: ft.In[f16], cos: ft.In[f32],
                 sin: ft.In[f32], half: ft.Const[int] = 16):
    """RMSNorm of each row, stored; then the rotary embedding (NeoX halves) of its first
    ``2 * half`` columns, read back from ``out`` and stored again with the rest kept: the fused
    RMSNorm + partial RoPE of issue 9. ``cos``/``sin``: (rows, half). The tile holds whole rows;
    its first two ``half``-column pieces are picked from ``out.load()`` (only the block's own
    tile of an output may be read back)."""
    bm, bn = out.tile_shape
    i = out.tile_index[0]
    t = ft.load_like(x, out).astype(f32)
    ms = ft.sum(t * t, 1, keepdims=True) / bn
    out.store((t * ft.rsqrt(ms + 1e-6) * ft.load(w, (0, 0), (1, bn)).astype(f32)).astype(f16))
    # each (bm, half) piece repeated along the row: column c holds piece[c % half]; a piece is
    # picked by zeroing the others and summing over them (exact: it adds zeros)
    reps = (bm, bn // half, half)
    pieces = ft.reshape(out.load(), reps).astype(f32)
    which = ft.reshape(ft.arange(bn // half), (1, bn // half, 1))
    x1 = ft.reshape(ft.broadcast(ft.sum(ft.where(which == 0, pieces, 0.0), 1, keepdims=True),
                                 reps), (bm, bn))
    x2 = ft.reshape(ft.broadcast(ft.sum(ft.where(which == 1, pieces, 0.0), 1, keepdims=True),
                                 reps), (bm, bn))
    c = ft.reshape(ft.broadcast(ft.reshape(ft.load(cos, (i, 0), (bm, half)), (bm, 1, half)),
                                reps), (bm, bn))
    s = ft.reshape(ft.broadcast(ft.reshape(ft.load(sin, (i, 0), (bm, half)), (bm, 1, half)),
                                reps), (bm, bn))
    col = ft.reshape(ft.arange(bn), (1, bn))
    rotated = ft.where(col < half, x1 * c - x2 * s, x2 * c + x1 * s)
    out.store(ft.where(col < 2 * half, rotated.astype(f16), out.load()))


@fl.func
def own_tile(o):
    """The calling block's own tile of Out ``o``, read in a helper."""
    return ft.load(o, o.tile_index, o.tile_shape)


@ft.kernel
def read_own_tile(out: ft.Out[f32], aux: ft.Out[f32], x: ft.In[f32]):
    """Every read of an output a tile block may make, each its own tile: ``out.load()``,
    ``ft.load`` at ``out.tile_index`` with ``out.tile_shape`` (also in a helper), and
    ``ft.load_like`` of an Out (itself, or another Out of the same tile shape)."""
    out.store(ft.load_like(x, out))
    aux.store(ft.load_like(x, out) * 2.0 + 1.0)
    i, j = out.tile_index
    a = out.load() + ft.load(out, (i, j), out.tile_shape, latency=2)
    b = ft.load_like(out, out) * 4.0 + ft.load_like(aux, out) * 8.0
    out.store(a + b + own_tile(aux) * 16.0)


# sums of 16-bit floats -----------------------------------------------------------------------

@ft.kernel
def row_sum(out: ft.Out, x: ft.In, n: ft.Const[int] = 1024):
    t = ft.load(x, (out.tile_index[0], 0), (out.tile_shape[0], n))
    out.store(ft.sum(t, 1, keepdims=True))


@ft.kernel
def row_sum_own_dtype(out: ft.Out, x: ft.In, n: ft.Const[int] = 1024):
    t = ft.load(x, (out.tile_index[0], 0), (out.tile_shape[0], n))
    out.store(t.sum(1, keepdims=True, acc_dtype=x.dtype))


@ft.kernel
def masked_row_max(out: ft.Out[f32], x: ft.In[f32], n: ft.Const[int] = 64):
    t = ft.load(x, (out.tile_index[0], 0), (out.tile_shape[0], n))
    keep = ft.reshape(ft.arange(n), (1, n)) % 3 != 0
    out.store(ft.max(ft.where(keep, t, -float("inf")), 1, keepdims=True))


# max and min of a column, 16 rows: tileiras reduces across warps from the identity ----------

@ft.kernel
def col_max(out: ft.Out, x: ft.In):
    out.store(ft.max(ft.load(x, (0, out.tile_index[0]), (16, out.tile_shape[0])), 0))


@ft.kernel
def col_min(out: ft.Out, x: ft.In):
    out.store(ft.min(ft.load(x, (0, out.tile_index[0]), (16, out.tile_shape[0])), 0))
