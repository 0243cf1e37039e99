"""Flash attention with tiles, as a user writes it: softmax(q k^T scale) v for every head, causal
or not, one tile block per (head, bm query rows), with an online softmax (Dao et al., 2022,
"FlashAttention", algorithm 1) and two ``ft.mma`` per step. The tile sizes and tileiras's
occupancy hint are chosen by ``ft.autotune`` per shape: they move this kernel by 1.3x on the H200
(benchmarks/RESULTS.md), and no one choice is best everywhere.

Layout: q, k, v, out (heads, S, D), f16 or bf16, D 64 or 128; scores and sums in f32, the
probabilities rounded to the input dtype for the second product (as flash attention does).
``fearless.nn.attention`` is the library form (token-major views, GQA, any offset of the
queries in the keys); this example keeps to what a first kernel needs.
"""
from __future__ import annotations

import math

import numpy as np

import fearless as fl
from fearless import f16, f32
from fearless import tile as ft

try:
    from examples._common import Result, check, compiling_ahead, config_note, sizes, timed_op
except ImportError:
    from fearless.examples._common import (Result, check, compiling_ahead, config_note, sizes,
                                           timed_op)

LOG2E = math.log2(math.e)


@ft.kernel
def attention(out: ft.Out, q: ft.In, k: ft.In, v: ft.In, scale: f32,
              causal: ft.Const[bool] = True, bn: ft.Const[int] = 64):
    h, i, _ = out.tile_index
    bm, d = out.tile_shape[1], out.tile_shape[2]
    s = k.shape[1]
    qt = ft.load(q, (h, i, 0), (1, bm, d)).reshape((bm, d))
    m = ft.full((bm, 1), -math.inf, f32)    # running row max of the scores, in log2 units
    l = ft.zeros((bm, 1), f32)              # running sum of exp2(score - m)
    acc = ft.zeros((bm, d), f32)
    rows = ft.reshape(ft.arange(bm), (bm, 1)) + i * bm
    # key blocks [0, full) need no mask (inside S, and below the diagonal of the first row)
    full = ft.minimum(s, i * bm + 1) // bn if causal else s // bn
    stop = ft.cdiv(ft.minimum(s, (i + 1) * bm), bn) if causal else ft.cdiv(s, bn)
    for n in range(stop):
        kt = ft.load(k, (h, n, 0), (1, bn, d)).reshape((bn, d))
        vt = ft.load(v, (h, n, 0), (1, bn, d)).reshape((bn, d))
        sc = ft.mma(qt, ft.transpose(kt), ft.zeros((bm, bn), f32)) * (scale * LOG2E)
        if n >= full:  # the diagonal's blocks and S's last one
            cols = ft.reshape(ft.arange(bn), (1, bn)) + n * bn
            keep = (cols < s) & (cols <= rows) if causal else cols < s
            sc = ft.where(keep, sc, -math.inf)
        # every row keeps key 0 (causal) or all of block 0: m is finite from the first step
        mn = ft.maximum(m, ft.max(sc, 1, keepdims=True))
        p = ft.exp2(sc - mn)
        alpha = ft.exp2(m - mn)
        l = l * alpha + ft.sum(p, 1, keepdims=True)
        acc = ft.mma(p.astype(q.dtype), vt, acc * alpha)
        m = mn
    out.store((acc * (1.0 / l)).astype(out.dtype).reshape((1, bm, d)))


# Tried per shape, dtype and causality at the first call (the ranking persists in the disk
# cache). First, and what runs where nothing tunes: 128 query rows by 64 keys at two tile blocks
# per SM, the fastest of these on the H200 at S 4096, D 128 (f16, 64 heads): 478 TFLOP/s
# non-causal where tileiras's own occupancy gave 380 (benchmarks/RESULTS.md).
OCC2 = {"sm_80": {"occupancy": 2}, "sm_90": {"occupancy": 2}}
attention_tuned = ft.autotune(configs=[
    ft.Config(tile=(1, 128, None), bn=64, hints=OCC2),
    ft.Config(tile=(1, 128, None), bn=64),
    ft.Config(tile=(1, 128, None), bn=128),
    ft.Config(tile=(1, 64, None), bn=64, hints=OCC2),
    ft.Config(tile=(1, 64, None), bn=128),
])(attention)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
              causal: bool) -> np.ndarray:
    """softmax(q k^T scale) v in float64, (heads, S, D) each."""
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    sc = np.einsum("hid,hjd->hij", q64, k64) * scale
    if causal:
        s = sc.shape[-1]
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    return np.einsum("hij,hjd->hid", p / p.sum(-1, keepdims=True), v64)


def error_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                unit: float) -> np.ndarray:
    """|got - want| per element: a score is exact products summed in f32 (d terms: d 2^-24 of
    scale |q| |k|, and 2^-24 more for the scale and the exp2), so each weight is off by at
    most twice that relative (numerator and the sum it is divided by); rounding p to the
    dtype adds ``unit`` relative per weight, and the output's rounding ``unit`` of it. With
    weights summing to 1, both bound |err| by (2 ds + unit) max|v| + unit |out| (and 2^-20 of
    max|v| for the f32 sums over the keys)."""
    d = q.shape[-1]
    qk = scale * np.abs(q.astype(np.float64)).max() * np.abs(k.astype(np.float64)).max() * d
    ds = (d + 2) * 2.0 ** -24 * qk
    vmax = np.abs(v.astype(np.float64)).max()
    return np.full(q.shape, (2 * ds + unit + 2.0 ** -20) * vmax)


def run(shape: tuple | None = None, dtype=f16, causal: bool = True,
        tile: tuple | None = None, repeat: int = 10) -> Result:
    """Attention over ``shape`` (heads, S, D) in ``dtype``, checked against float64 NumPy.
    ``tile`` None: the config ``attention_tuned`` picks (tuned at the first call of a new
    shape, which ``first_ms`` includes); (bm, bn) pins the query rows and keys per step."""
    # D is one value on both backends: it is the tile's width, so it picks the kernel
    heads, s, d = shape or (sizes(64, 3), sizes(4096, 200), 128)
    rng = np.random.default_rng(8)
    qh, kh, vh = (rng.standard_normal((heads, s, d), np.float32).astype(dtype.numpy)
                  for _ in range(3))
    q, k, v = fl.asarray(qh), fl.asarray(kh), fl.asarray(vh)
    scale = 1.0 / math.sqrt(d)

    def step(out):
        op = attention_tuned(out, q, k, v, scale, causal=causal) if tile is None else attention(
            out.partition((1, tile[0], d)), q, k, v, scale, causal=causal, bn=tile[1])
        return op.sync()[0].unpartition()

    out, first, steady = timed_op(step, fl.full((heads, s, d), np.nan, dtype), repeat)
    unit = 2.0 ** -11 if dtype is f16 else 2.0 ** -8
    name = "tile_attention"
    # `fearless compile` runs nothing: no reference to compute (at the GPU's sizes, it is slow)
    err = 0.0 if compiling_ahead() else check(
        name, out.numpy(), reference(qh, kh, vh, scale, causal), rtol=unit,
        atol=error_bound(qh, kh, vh, scale, unit))
    flops = 4 * heads * s * s * d // (2 if causal else 1)
    size = f"{heads}x{s}x{d} {dtype.name}{' causal' if causal else ''}"
    result = Result(name, fl.current_backend(), size, first, steady,
                    2 * 4 * heads * s * d, err)
    result.notes.append(f"{flops / (steady * 1e9):.1f} TFLOP/s")
    result.notes.append(config_note(attention_tuned, out, q, k, v, scale, causal)
                        if tile is None else f"tile {tile[0]}x{tile[1]} (pinned)")
    return result


if __name__ == "__main__":
    print(run())
    print(run(causal=False))
