"""``rope_kv_write``: a decode step's RoPE (with Qwen3's q/k norm when given) and KV-cache write
in one kernel, where ``rope`` (or ``qk_norm_rope``) and ``kv_cache_write`` take two.

One new token per sequence: tile block b rotates sequence b's query heads into its tile of the
output, and writes its rotated key heads and its value heads into row ``positions[b]`` of its
own caches. Ownership as in ``kvcache.py``: each cache is viewed as (B, max_ctx, Hkv * D) and
partitioned into (1, span, pow2(Hkv * D)) tiles, span a power of two above max_ctx, so block b
owns all of sequence b's cache; the row goes through a clamp into ``[0, span)``, the coordinate
form ``ft.scatter``'s proof accepts, and a row that must not be written (a position outside
``[0, max_ctx)``, a padding head or column) is sent to row ``span - 1``, past the cache's end,
where a scatter writes nothing. The values are ``rope``'s (or ``qk_norm_rope``'s), bit for bit:
the same helpers compute them.

Speed: one launch less per layer, but measured slower on the H200 than the two kernels it
replaces (a captured Qwen3-1.7B decode step, batch 1: 380.8 tokens/s with it, 435.9 without,
2026-12-02), so ``fearless.models`` does not use it yet; the per-element scatter and gather of
whole head tiles (coordinates per element) against the two kernels' row-vector copies is the
suspect, not yet profiled.
"""
from __future__ import annotations

from typing import TypeVar

from fearless import dtypes, f32
from fearless import tile as ft
from fearless.errors import ArgumentTypeError
from fearless.nn import _common as c
from fearless.nn.kvcache import caches_back, check_caches
from fearless.nn.rope import _checked, _checked_weights, _normed_rotated, _rotated
from fearless.tracebacks import user_facing

T = TypeVar("T")
P = TypeVar("P")


@ft.kernel
def rope_kv_rows(qo: ft.Out[T], ko: ft.Out[T], kc: ft.Out[T], vc: ft.Out[T], q: ft.In[T],
                 k: ft.In[T], v: ft.In[T], qw: ft.In[T], kw: ft.In[T], eps: f32,
                 cos: ft.In[dtypes.f32], sin: ft.In[dtypes.f32], positions: ft.In[P],
                 normed: ft.Const[int] = 0, interleaved: ft.Const[int] = 0):
    # qo (B, Hq, D), ko (B, Hkv, D) tiles (1, pow2 heads, pow2 D): token b's rotated heads;
    # kc, vc (B, max_ctx, Hkv * D) tiles (1, span, w): sequence b's caches
    b, r0, j = kc.tile_index  # r0 = j = 0: one tile spans a whole cache row range and width
    _, span, w = kc.tile_shape
    _, hp, dp = ko.tile_shape
    heads, d = k.shape[1], k.shape[2]
    pos = ft.gather(positions, b)
    if normed:
        qo.store(_normed_rotated(q, qw, eps, qo, cos, sin, pos, interleaved))
        kr = _normed_rotated(k, kw, eps, ko, cos, sin, pos, interleaved)
    else:
        qo.store(_rotated(q, qo, cos, sin, pos, interleaved))
        kr = _rotated(k, ko, cos, sin, pos, interleaved)
    ko.store(kr)  # unused by the caller: it gives the helpers the key tile's shape (B * Hkv * D
    #               elements, a few KB per step)
    h = ft.arange(hp).reshape((1, hp, 1))
    col = ft.arange(dp).reshape((1, 1, dp))
    keep = (h < heads) & (col < d) & (pos >= 0) & (pos < kc.shape[1])
    row = r0 * span + ft.maximum(ft.minimum(ft.where(keep, pos, span - 1), span - 1), 0)
    at = j * w + ft.maximum(ft.minimum(h * d + col, w - 1), 0)
    ft.scatter(kc, (b, row, at), kr)
    ft.scatter(vc, (b, row, at), ft.gather(v, (b, h, col)))


@user_facing
def rope_kv_write(q, k, v, k_cache, v_cache, cos, sin, positions, q_weight=None,
                  k_weight=None, eps: float = 0.0, interleaved: bool = False):
    """One decode token per sequence: ``rope`` of q and k (``qk_norm_rope`` when ``q_weight``
    and ``k_weight`` are given), and the rotated k and v written to row ``positions[b]`` of
    sequence b's caches, in one kernel. The same values as ``rope`` (or ``qk_norm_rope``)
    followed by ``kv_cache_write(k_cache, v_cache, k_rotated[:, None], v[:, None],
    positions)``.

    ``q`` (B, Hq, D), ``k`` and ``v`` (B, Hkv, D), one dtype (f16, bf16, f32; strided views of
    a fused projection output are fine when each token's heads are contiguous); ``k_cache``,
    ``v_cache`` (B, max_ctx, Hkv, D) contiguous, that dtype; ``positions`` (B,) int32 or int64
    device data; ``cos``, ``sin`` and ``interleaved`` as for ``rope``; ``q_weight``, ``k_weight``
    (D,) and ``eps`` as for ``qk_norm_rope``. A position outside ``[0, max_ctx)`` writes no
    row (a model checks the room on the host first).

    Returns ``(q_out, k_cache, v_cache)``: the rotated q (torch for a torch q) and the caches
    as ``kv_cache_write`` returns them (fearless Tensor caches are moved into the write: use
    the returned handles). Raises as ``rope``, ``qk_norm_rope`` and ``kv_cache_write`` do.
    """
    fn = "rope_kv_write"
    qt, kt, vt = c.tensor(fn, "q", q), c.tensor(fn, "k", k), c.tensor(fn, "v", v)
    kct, vct = c.tensor(fn, "k_cache", k_cache), c.tensor(fn, "v_cache", v_cache)
    ct, st, pt = _checked(fn, qt, kt, cos, sin, positions)
    c.check_shape(fn, "v", vt, kt.shape, "k's (B, Hkv, D)")
    c.check_same_dtype(fn, "v", vt, "q", qt)
    normed = q_weight is not None or k_weight is not None
    if normed and (q_weight is None or k_weight is None):
        raise ArgumentTypeError("q_weight and k_weight come together (Qwen3's q and k norms) or "
                                "not at all", kernel=fn,
                                param="q_weight" if q_weight is None else "k_weight")
    qwt, kwt = _checked_weights(fn, qt, q_weight, k_weight) if normed else (qt, qt)  # qt: unread
    nb, heads, d = kt.shape
    c.check_rank(fn, "k_cache", kct, 4, "(B, max_ctx, Hkv, D)")
    c.check_same_dtype(fn, "k_cache", kct, "q", qt)
    c.check_shape(fn, "k_cache", kct, (nb, None, heads, d), "k's (B, ?, Hkv, D)")
    check_caches(fn, kct, vct)
    max_ctx = kct.shape[1]
    qout, kout = c.output(q, qt.shape, qt.dtype), c.output(qt, kt.shape, qt.dtype)
    dp = c.pow2(d)
    qp = qout.partition((1, c.pow2(qt.shape[1]), dp))
    kp = kout.partition((1, c.pow2(heads), dp))
    flat, tile = (nb, max_ctx, heads * d), (1, c.pow2(max_ctx + 1), c.pow2(heads * d))
    with c.moved_into(fn, [("k_cache", kct, flat, tile), ("v_cache", vct, flat, tile)]) as parts:
        qp, _, kcp, vcp, *_ = c.run(rope_kv_rows(qp, kp, *parts, qt, kt, vt, qwt, kwt,
                                                 float(eps), ct, st, pt, int(normed),
                                                 int(interleaved)))
    return (qout.result(qp), *caches_back(k_cache, v_cache, kct, vct, kcp, vcp))
