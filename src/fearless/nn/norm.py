"""RMSNorm (Llama, Qwen3, and Qwen3's per-head q/k norm), optionally fused with the residual add
that precedes it in a decoder layer: one tile kernel, one pass over each row."""
from __future__ import annotations

from typing import TypeVar

import fearless as fl
from fearless import f32
from fearless import tile as ft
from fearless.errors import ArgumentTypeError
from fearless.nn import _common as c
from fearless.tracebacks import user_facing

T = TypeVar("T")

# elements per tile block: a narrow norm (one head of 64 or 128) takes several rows per block,
# so that each block streams a few KB as one row of a wide norm does
BLOCK_ELEMENTS = 4096


@fl.func
def _normed(xt, wt, eps, n):
    """HF LlamaRMSNorm over the rows of the (R, W) tile ``xt`` (zero past the row's end),
    ``n`` the row's true length: ``(x32 * rsqrt(mean(x32^2) + eps)).to(dtype) * w``."""
    x32 = xt.astype(f32)
    ms = ft.sum(x32 * x32, 1, keepdims=True) / n
    return (x32 * ft.rsqrt(ms + eps)).astype(wt.dtype) * wt


# occupancy 3 and plain loads, as examples/tile_layernorm.py (measured there on the H200)
@ft.kernel(hints={"sm_90": {"occupancy": 3}})
def rms_norm_rows(y: ft.Out[T], x: ft.In[T], w: ft.In[T], eps: f32):
    wt = ft.load(w, (0,), (y.tile_shape[1],), allow_tma=False)
    y.store(_normed(ft.load_like(x, y, allow_tma=False), wt, eps, x.shape[1]), allow_tma=False)


@ft.kernel(hints={"sm_90": {"occupancy": 3}})
def add_rms_norm_rows(y: ft.Out[T], h: ft.Out[T], x: ft.In[T], r: ft.In[T], w: ft.In[T],
                      eps: f32):
    s = ft.load_like(x, y, allow_tma=False) + ft.load_like(r, y, allow_tma=False)  # rounded
    h.store(s, allow_tma=False)
    wt = ft.load(w, (0,), (y.tile_shape[1],), allow_tma=False)
    y.store(_normed(s, wt, eps, x.shape[1]), allow_tma=False)


@ft.kernel(hints={"sm_90": {"occupancy": 3}})
def rms_norm_heads(y: ft.Out[T], x: ft.In[T], w: ft.In[T], eps: f32):
    _, rows, width = y.tile_shape
    xt = ft.load_like(x, y, allow_tma=False).reshape((rows, width))
    wt = ft.load(w, (0,), (width,), allow_tma=False)
    y.store(_normed(xt, wt, eps, x.shape[2]).reshape((1, rows, width)), allow_tma=False)


def tile_of(rows: int, n: int) -> tuple[int, int]:
    """(rows per block, width): the width covers a whole row of ``n``; several rows share a
    block up to BLOCK_ELEMENTS."""
    width = c.pow2(n)
    return min(c.pow2(rows), max(1, BLOCK_ELEMENTS // width)), width


@user_facing
def rms_norm(x, w, eps: float, residual=None):
    """Root-mean-square norm of each row of ``x``, scaled by ``w``, as Hugging Face's
    LlamaRMSNorm / Qwen3RMSNorm compute it.

    ``x``: (T, H), or (T, heads, D) for Qwen3's per-head q/k norm (a strided view of a
    projection's output is fine); ``w``: (H,) or (D,), ``x``'s dtype; f16, bf16 or f32.
    ``eps``: the variance epsilon. ``residual`` (2-d ``x`` only): same shape and dtype as ``x``.

    Steps (HF's order, each rounding named): with a residual, ``h = x + residual`` rounded to
    the dtype (HF's ``hidden_states = residual + hidden_states``) and the norm is of ``h``;
    then ``v = mean(h_f32 ** 2)`` in f32 over the row, ``n = h_f32 * rsqrt(v + eps)`` in f32,
    rounded to the dtype (``hidden_states.to(input_dtype)``), ``y = w * n`` rounded to the
    dtype. The sum's order is not defined (tileiras's tree on the GPU). For f32 nothing is
    rounded but the f32 arithmetic itself.

    Returns ``y`` (x's shape and dtype), or ``(y, h)`` with a residual; torch tensors for a
    torch ``x``, else fearless Tensors. Raises ArgumentTypeError for a rank other than 2 or 3, a
    residual with 3-d ``x``, an unsupported or mismatched dtype; ContractError when ``w`` or
    ``residual`` does not fit ``x``'s shape.
    """
    fn = "rms_norm"
    xt, wt = c.tensor(fn, "x", x), c.tensor(fn, "w", w)
    if xt.ndim not in (2, 3):
        raise ArgumentTypeError(f"expected (T, H) or (T, heads, D), got shape {xt.shape}",
                                  kernel=fn, param="x")
    c.check_dtype(fn, "x", xt, c.FLOATS)
    c.check_same_dtype(fn, "w", wt, "x", xt)
    c.check_shape(fn, "w", wt, (xt.shape[-1],), "x's last axis")
    out = c.output(x, xt.shape, xt.dtype)
    if xt.ndim == 3:
        if residual is not None:
            raise ArgumentTypeError("a residual is fused only into the norm of 2-d rows "
                                      "(T, H)", kernel=fn, param="residual")
        rows, width = tile_of(xt.shape[1], xt.shape[2])
        y, *_ = c.run(rms_norm_heads(out.partition((1, rows, width)), xt, wt, eps))
        return out.result(y)
    tile = tile_of(xt.shape[0], xt.shape[1])
    if residual is None:
        y, *_ = c.run(rms_norm_rows(out.partition(tile), xt, wt, eps))
        return out.result(y)
    rt = c.tensor(fn, "residual", residual)
    c.check_same_dtype(fn, "residual", rt, "x", xt)
    c.check_shape(fn, "residual", rt, xt.shape, "x's shape")
    hout = c.output(x, xt.shape, xt.dtype)
    y, h, *_ = c.run(add_rms_norm_rows(out.partition(tile), hout.partition(tile),
                                       xt, rt, wt, eps))
    return out.result(y), hout.result(h)
