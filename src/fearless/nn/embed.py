"""Token embedding (a row gather from the embedding table) and greedy decoding's argmax over the
vocabulary: the first and the last kernel of a model's forward pass."""
from __future__ import annotations

import math
from typing import TypeVar

from fearless import dtypes, i32
from fearless import tile as ft
from fearless.errors import ArgumentTypeError
from fearless.nn import _common as c
from fearless.tracebacks import user_facing

T = TypeVar("T")
I = TypeVar("I")

MAX_WIDTH = 4096        # embedding: elements of a row per tile block
CHUNK = 8192            # argmax: elements of a row per loop step


@ft.kernel
def embedding_rows(out: ft.Out[T], ids: ft.In[I], table: ft.In[T]):
    t, j = out.tile_index
    v = ft.gather(ids, t)
    if v >= 0 and v < table.shape[0]:
        out.store(ft.load(table, (v, j), out.tile_shape))
    else:
        out.store(ft.zeros(out.tile_shape, out.dtype))


@ft.kernel
def argmax_rows(out: ft.Out[i32], x: ft.In[T], chunk: ft.Const[int] = CHUNK):
    r = out.tile_index[0]
    # NaN ranks below every number (docs/semantics.md): the padding never wins
    t = ft.load(x, (r, 0), (1, chunk), padding=math.nan)
    best, at = ft.max(t), ft.argmax(t)
    for k in range(1, ft.cdiv(x.shape[1], chunk)):
        t = ft.load(x, (r, k), (1, chunk), padding=math.nan)
        m = ft.max(t)
        # strictly greater: the first index of the maximum; a NaN best (an all-NaN start) is
        # beaten by any number
        take = (m > best) | ((best != best) & (m == m))
        at = ft.where(take, k * chunk + ft.argmax(t), at)
        best = ft.where(take, m, best)
    out.store(ft.full(out.tile_shape, at, i32))


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
    z, *_ = c.run(embedding_rows(out.tensor.partition(tile), it, tt))
    return out.result(z)


@user_facing
def argmax(x):
    """The index of the largest element of each row of ``x`` (greedy decoding's next token).

    ``x``: (T, V) f16, bf16 or f32 logits. Returns (T,) int32 (of ``x``'s kind): the first
    index of the maximum; NaN ranks below every number, so a row's NaNs are ignored and an
    all-NaN row gives 0 (``ft.argmax``'s rule, docs/semantics.md). One tile block per row walks
    the row in chunks of 8192. Raises ArgumentTypeError for another rank or dtype.
    """
    fn = "argmax"
    xt = c.tensor(fn, "x", x)
    c.check_rank(fn, "x", xt, 2, "(T, V)")
    c.check_dtype(fn, "x", xt, c.FLOATS)
    if xt.shape[1] == 0:
        raise ArgumentTypeError("a row of no elements has no maximum", kernel=fn, param="x")
    out = c.output(x, (xt.shape[0],), dtypes.i32)
    z, *_ = c.run(argmax_rows(out.tensor.partition((1,)), xt))
    return out.result(z)
