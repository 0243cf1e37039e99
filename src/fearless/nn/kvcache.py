"""The KV-cache write: the new keys and values of each sequence copied into its cache rows
``start[b] ..``, where ``start`` is device data (a captured decode step serves every position),
or rows ``start ..`` of every sequence for a ``start`` the host knows (a prefill).

A host ``start``: the caches' rows ``[start, start + S)`` are a view (B, S, Hkv * D), partitioned
into (1, rows, w) tiles that a plain copy kernel fills, every tile block its own tile: the
whole GPU shares the copy (a prefill of 2048 rows: under 10 us, where the device-data form
below, one block per sequence and column strip, took 0.8 ms on the H200).

Ownership, proved at compile time: the caches are viewed as (B, max_ctx, Hkv * D) and
partitioned into tiles of (1, span, w) with ``span`` a power of two above ``max_ctx``, so tile
block (b, 0, j) owns exactly the columns ``j * w ..`` of sequence b's cache, all rows. It
scatters its rows at ``start[b] + s`` through a clamp into ``[0, span)``, the form of
coordinate ``ft.scatter``'s proof accepts: a write into another sequence's cache, or another
block's columns, cannot be written. The rows that must not be written (``s >= S``, or
``start[b] + s`` outside ``[0, max_ctx)``) are sent to row ``span - 1``, which lies past the
cache's end because ``span > max_ctx``: a scatter writes nothing there.

What the tile language lacks for a tighter form: a scatter with a mask (the rows to drop need
a coordinate past the end today, hence ``span > max_ctx``), and a partition whose tiles sit at
offsets read from device data (``start``), checked disjoint at launch, which would make the
tile exactly the S new rows.
"""
from __future__ import annotations

from typing import TypeVar

import numpy as np

from fearless import tile as ft
from fearless.errors import ArgumentTypeError, ContractError
from fearless.nn import _common as c
from fearless.tracebacks import user_facing

T = TypeVar("T")
P = TypeVar("P")

# a step copies up to BLOCK_ELEMENTS: decode (S <= DECODE_ROWS) gives a block whole rows of up
# to DECODE_WIDTH elements; prefill gives blocks strips of PREFILL_WIDTH columns, so that
# B * Hkv * D / PREFILL_WIDTH blocks share the copy (bigger steps cost tileiras a minute)
BLOCK_ELEMENTS = 4096
DECODE_ROWS, DECODE_WIDTH, PREFILL_WIDTH = 16, 1024, 128
COPY_WIDTH = 256   # the host-start copy's tile width (its tiles: rows x COPY_WIDTH)


@ft.kernel
def kv_write_rows(kc: ft.Out[T], vc: ft.Out[T], k: ft.In[T], v: ft.In[T], start: ft.In[P],
                  rows: ft.Const[int]):
    b, r0, j = kc.tile_index
    _, span, w = kc.tile_shape
    first = ft.gather(start, b)
    s = ft.arange(rows).reshape((1, rows, 1))
    cols = j * w + ft.arange(w).reshape((1, 1, w))
    for i in range(ft.cdiv(k.shape[1], rows)):
        row = first + i * rows + s
        keep = (i * rows + s < k.shape[1]) & (row >= 0) & (row < kc.shape[1])
        at = r0 * span + ft.maximum(ft.minimum(ft.where(keep, row, span - 1), span - 1), 0)
        ft.scatter(kc, (b, at, cols), ft.load(k, (b, i, j), (1, rows, w)))
        ft.scatter(vc, (b, at, cols), ft.load(v, (b, i, j), (1, rows, w)))


@ft.kernel
def kv_copy_rows(kc: ft.Out[T], vc: ft.Out[T], k: ft.In[T], v: ft.In[T]):
    # kc, vc: the caches' rows [start, start + S) as (B, S, Hkv * D), tile (1, rows, w)
    b, i, j = kc.tile_index
    kc.store(ft.load(k, (b, i, j), kc.tile_shape))
    vc.store(ft.load(v, (b, i, j), vc.tile_shape))


def _merge_heads(fn: str, name: str, t):
    """(B, S, H, D) as a (B, S, H * D) view; the heads must be D apart with unit D stride."""
    b, s, h, d = t.shape
    if not ((d == 1 or t.strides[3] == 1) and (h == 1 or t.strides[2] == d)):
        raise ArgumentTypeError(f"the heads and head dimension must be contiguous (strides "
                                f"{t.strides})", kernel=fn, param=name,
                                help="pass a view of a (B * S, H * D) projection output, or a "
                                     "contiguous copy")
    return t.reshape((b, s, h * d))


def tile_of(rows: int, width: int, max_ctx: int) -> tuple[tuple[int, int, int], int]:
    """(cache tile, rows per step) for S = ``rows`` new rows of ``width`` = Hkv * D."""
    span = c.pow2(max_ctx + 1)                  # above max_ctx: row span - 1 is past the end
    w = min(c.pow2(width), DECODE_WIDTH if rows <= DECODE_ROWS else PREFILL_WIDTH)
    return (1, span, w), max(1, min(c.pow2(rows), BLOCK_ELEMENTS // w))


def copy_tile_of(rows: int, width: int) -> tuple[int, int, int]:
    """The copy kernel's tile for S = ``rows`` new rows (host start) of ``width`` = Hkv * D:
    up to COPY_WIDTH columns by enough rows for BLOCK_ELEMENTS elements."""
    w = min(c.pow2(width), COPY_WIDTH)
    return (1, max(1, min(c.pow2(rows), BLOCK_ELEMENTS // w)), w)


@user_facing
def kv_cache_write(k_cache, v_cache, k, v, start):
    """Copy the new keys and values into the caches: ``cache[b, start[b] + s] = new[b, s]`` for
    ``s < S``, and nothing else.

    ``k_cache``, ``v_cache``: (B, max_ctx, Hkv, D), contiguous, one dtype (f16, bf16, f32);
    ``k``, ``v``: (B, S, Hkv, D) of that dtype (views of the projection outputs are fine when
    each token's heads are contiguous); ``start``: (B,) int32 or int64, device data, or a
    Python int: the first row of every sequence, known on the host (a prefill's 0). With
    device data, a row ``start[b] + s`` outside ``[0, max_ctx)`` is not written (the copy of
    that row is dropped: a full cache loses the new rows; a model checks the length on the
    host first); a host ``start`` whose rows do not fit is refused (ContractError). Values are
    copied exactly. One tile kernel writes both caches.

    Returns ``(k_cache, v_cache)``: the caches given for torch tensors; otherwise fearless
    Tensors over the same memory (NumPy caches are written in place). Fearless Tensor caches
    given are moved into the write, which owns them while it writes: later uses raise
    MovedError, use the returned handles. Raises ArgumentTypeError
    for wrong ranks, dtypes or non-contiguous caches, ContractError for mismatched shapes.
    """
    fn = "kv_cache_write"
    kct, vct = c.tensor(fn, "k_cache", k_cache), c.tensor(fn, "v_cache", v_cache)
    kt, vt = c.tensor(fn, "k", k), c.tensor(fn, "v", v)
    host = isinstance(start, (int, np.integer)) and not isinstance(start, bool)
    st = None if host else c.tensor(fn, "start", start)
    check_caches(fn, kct, vct)
    nb, max_ctx, heads, d = kct.shape
    for name, t in (("k", kt), ("v", vt)):
        c.check_rank(fn, name, t, 4, "(B, S, Hkv, D)")
        c.check_same_dtype(fn, name, t, "k_cache", kct)
        c.check_shape(fn, name, t, (nb, kt.shape[1], heads, d), "the caches' (B, ?, Hkv, D) and "
                      "k's S")
    flat, new = (nb, max_ctx, heads * d), kt.shape[1]
    km, vm = _merge_heads(fn, "k", kt), _merge_heads(fn, "v", vt)
    if host:
        first = int(start)
        if first < 0 or first + new > max_ctx:
            raise ContractError(f"rows {first}..{first + new - 1} do not fit a cache of "
                                f"{max_ctx} rows", kernel=fn, param="start")
        tile = copy_tile_of(new, heads * d)
        rows = (slice(None), slice(first, first + new))
        items = [("k_cache", kct, flat, tile, rows), ("v_cache", vct, flat, tile, rows)]
        with c.moved_into(fn, items) as (kp, vp):
            kp, vp, *_ = c.run(kv_copy_rows(kp, vp, km, vm))
    else:
        c.check_rank(fn, "start", st, 1, "(B,)")
        c.check_dtype(fn, "start", st, c.INDEX)
        c.check_shape(fn, "start", st, (nb,), "the caches' B")
        tile, step = tile_of(new, heads * d, max_ctx)
        items = [("k_cache", kct, flat, tile), ("v_cache", vct, flat, tile)]
        with c.moved_into(fn, items) as (kp, vp):
            kp, vp, *_ = c.run(kv_write_rows(kp, vp, km, vm, st, rows=step))
    return caches_back(k_cache, v_cache, kct, vct, kp, vp)


def check_caches(fn: str, kct, vct) -> None:
    """The caches' checks: (B, max_ctx, Hkv, D), a float dtype, one shape and dtype for both."""
    c.check_rank(fn, "k_cache", kct, 4, "(B, max_ctx, Hkv, D)")
    c.check_dtype(fn, "k_cache", kct, c.FLOATS)
    c.check_same_dtype(fn, "v_cache", vct, "k_cache", kct)
    c.check_shape(fn, "v_cache", vct, kct.shape, "k_cache's shape")


def caches_back(k_cache, v_cache, kct, vct, kp, vp):
    """What a cache write returns once it has run through ``kp``, ``vp`` (partitions of views
    of the caches, possibly of a row window only): the caches given for torch ones, else new
    handles of the whole fearless caches ``kct``, ``vct`` (the caches given were moved)."""
    kp.unpartition(), vp.unpartition()
    if c.is_torch(k_cache):
        return k_cache, v_cache
    return kct._handle(), vct._handle()
