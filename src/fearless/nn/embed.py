"""Token embedding (a row gather from the embedding table) and greedy decoding's argmax over the
vocabulary: the first and the last kernel of a model's forward pass."""
from __future__ import annotations

import math
from typing import TypeVar

import fearless as fl
from fearless import dtypes, f32, i32
from fearless import tile as ft
from fearless.errors import ArgumentTypeError
from fearless.nn import _common as c
from fearless.runtime.tensor import empty
from fearless.tracebacks import user_facing

T = TypeVar("T")
I = TypeVar("I")

MAX_WIDTH = 4096        # embedding: elements of a row per tile block
CHUNK = 4096            # argmax: elements of a row per loop step
# argmax of a long row: up to MAX_PARTS tile blocks per row each find the first maximum of a
# part, a second kernel merges them (decode's few rows would leave all but T SMs idle)
MAX_PARTS = 64


@ft.kernel
def embedding_rows(out: ft.Out[T], ids: ft.In[I], table: ft.In[T]):
    t, j = out.tile_index
    v = ft.gather(ids, t)
    if v >= 0 and v < table.shape[0]:
        out.store(ft.load(table, (v, j), out.tile_shape))
    else:
        out.store(ft.zeros(out.tile_shape, out.dtype))


@fl.func
def _first_max(x, r, first, count, chunk):
    """(max, index of its first occurrence) over chunks ``first .. first + count - 1`` of row
    ``r`` of ``x``. NaN ranks below every number (docs/semantics.md): the NaN padding past the
    row's end never wins, and an all-NaN range gives (NaN, its first index)."""
    t = ft.load(x, (r, first), (1, chunk), padding=math.nan)
    best, at = ft.max(t), first * chunk + ft.argmax(t)
    for k in range(1, count):
        t = ft.load(x, (r, first + k), (1, chunk), padding=math.nan)
        m = ft.max(t)
        # strictly greater keeps the first index; any number beats a NaN best
        take = (m > best) | ((best != best) & (m == m))
        at = ft.where(take, (first + k) * chunk + ft.argmax(t), at)
        best = ft.where(take, m, best)
    return best, at


@ft.kernel
def argmax_rows(out: ft.Out[i32], x: ft.In[T], chunk: ft.Const[int] = CHUNK):
    _, at = _first_max(x, out.tile_index[0], 0, ft.cdiv(x.shape[1], chunk), chunk)
    out.store(ft.full(out.tile_shape, at, i32))


@ft.kernel
def argmax_parts(best: ft.Out[f32], at: ft.Out[i32], x: ft.In[T], per: ft.Const[int],
                 chunk: ft.Const[int] = CHUNK):
    r, p = best.tile_index
    m, i = _first_max(x, r, p * per, per, chunk)
    best.store(ft.full(best.tile_shape, m, f32))
    at.store(ft.full(at.tile_shape, i, i32))


@ft.kernel
def argmax_merge(out: ft.Out[i32], best: ft.In[f32], at: ft.In[i32], parts: ft.Const[int]):
    r = out.tile_index[0]
    v = ft.load(best, (r, 0), (1, parts), padding=math.nan)
    m = ft.max(v)
    # the parts are in row order: the least index holding the maximum is its first; all NaN: 0
    i = ft.min(ft.where(v == m, ft.load(at, (r, 0), (1, parts)), 2 ** 31 - 1))
    out.store(ft.full(out.tile_shape, ft.where(m == m, i, 0), i32))


@user_facing
def embedding(ids, table):
    """Rows of ``table`` at ``ids``: ``out[t] = table[ids[t]]`` (HF's ``embed_tokens``), copied
    exactly.

    ``ids``: (T,) int32 or int64, device data (read by the kernel, never on the host);
    ``table``: (V, H) f16, bf16 or f32. An id outside ``[0, V)`` gives a row of zeros (a model
    checks ids on the host before it runs). Returns (T, H) in the table's dtype, of ``ids``'s
    kind (torch for torch ``ids``). Raises ArgumentTypeError for other ranks or dtypes.
    """
    fn = "embedding"
    it, tt = c.tensor(fn, "ids", ids), c.tensor(fn, "table", table)
    c.check_rank(fn, "ids", it, 1, "(T,)")
    c.check_dtype(fn, "ids", it, c.INDEX)
    c.check_rank(fn, "table", tt, 2, "(V, H)")
    c.check_dtype(fn, "table", tt, c.FLOATS)
    out = c.output(ids, (it.shape[0], tt.shape[1]), tt.dtype)
    tile = (1, min(c.pow2(tt.shape[1]), MAX_WIDTH))
    z, *_ = c.run(embedding_rows(out.partition(tile), it, tt))
    return out.result(z)


@user_facing
def argmax(x):
    """The index of the largest element of each row of ``x`` (greedy decoding's next token).

    ``x``: (T, V) f16, bf16 or f32 logits. Returns (T,) int32 (of ``x``'s kind): the first
    index of the maximum; NaN ranks below every number, so a row's NaNs are ignored and an
    all-NaN row gives 0 (``ft.argmax``'s rule, docs/semantics.md). Rows of up to 8192
    elements: one tile kernel, a block per row; longer rows: up to 64 blocks per row find the
    first maximum of a part each, and a second kernel merges the parts. Raises
    ArgumentTypeError for another rank or dtype.
    """
    fn = "argmax"
    xt = c.tensor(fn, "x", x)
    c.check_rank(fn, "x", xt, 2, "(T, V)")
    c.check_dtype(fn, "x", xt, c.FLOATS)
    if xt.shape[1] == 0:
        raise ArgumentTypeError("a row of no elements has no maximum", kernel=fn, param="x")
    out = c.output(x, (xt.shape[0],), dtypes.i32)
    chunks = -(-xt.shape[1] // CHUNK)
    if chunks <= 2:
        z, *_ = c.run(argmax_rows(out.partition((1,)), xt))
        return out.result(z)
    per = -(-chunks // MAX_PARTS)
    parts = -(-chunks // per)
    best = c.partition(empty((xt.shape[0], parts), dtypes.f32), (1, 1))
    at = c.partition(empty((xt.shape[0], parts), dtypes.i32), (1, 1))
    best, at, *_ = c.run(argmax_parts(best, at, xt, per=per))
    z, *_ = c.run(argmax_merge(out.partition((1,)), best.unpartition(),
                               at.unpartition(), parts=c.pow2(parts)))
    return out.result(z)
