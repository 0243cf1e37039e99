"""The peers of ``bench_tile.py``: Triton kernels written for the benchmark, and a cuTile Python
GEMM. Importable without a GPU: ``triton`` is None when it does not import, and
``cutile_matmul()`` says why cuTile is unavailable.
"""
from __future__ import annotations

import math

try:  # the GPU peers; without them the module still imports and --dry-run runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the machine
    triton = tl = None


# -- Triton peers (written for this benchmark) ---------------------------------------------------

if triton is not None:
    _MM = ((128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 4, 8),
           (128, 256, 32, 4, 8), (64, 256, 64, 4, 4))   # BM, BN, BK, stages, warps

    @triton.autotune(configs=[triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8},
                                            num_stages=s, num_warps=w)
                              for bm, bn, bk, s, w in _MM], key=["M", "N", "K"])
    @triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BK"] == 0})
    @triton.jit
    def tr_matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                  EVEN_K: tl.constexpr):
        # Programs walk the tiles GROUP tile-rows at a time, so that neighbours share B in L2.
        pid = tl.program_id(0)
        rows_m, cols_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        top = pid // (GROUP * cols_n) * GROUP
        height = tl.minimum(rows_m - top, GROUP)
        within = pid % (GROUP * cols_n)
        tm, tn = top + within % height, within // height
        # Offsets wrap around M and N so that loads stay in bounds; the store is masked.
        om = tl.max_contiguous(tl.multiple_of((tm * BM + tl.arange(0, BM)) % M, BM), BM)
        on = tl.max_contiguous(tl.multiple_of((tn * BN + tl.arange(0, BN)) % N, BN), BN)
        ok = tl.arange(0, BK)
        pa = a_ptr + om[:, None] * s_am + ok[None, :] * s_ak
        pb = b_ptr + ok[:, None] * s_bk + on[None, :] * s_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BK)):
            if EVEN_K:
                ta, tb = tl.load(pa), tl.load(pb)
            else:
                ta = tl.load(pa, mask=ok[None, :] < K - kk * BK, other=0.0)
                tb = tl.load(pb, mask=ok[:, None] < K - kk * BK, other=0.0)
            acc = tl.dot(ta, tb, acc)
            pa += BK * s_ak
            pb += BK * s_bk
        rm, rn = tm * BM + tl.arange(0, BM), tn * BN + tl.arange(0, BN)
        tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    _WARPS = [triton.Config({}, num_warps=w) for w in (4, 8, 16, 32)]

    @triton.autotune(configs=_WARPS, key=["n"])
    @triton.jit
    def tr_softmax(out_ptr, x_ptr, n, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * stride
        cols = tl.arange(0, BLOCK)
        t = tl.load(x_ptr + row + cols, mask=cols < n, other=-float("inf"))
        e = tl.exp(t - tl.max(t, axis=0))
        tl.store(out_ptr + row + cols, e / tl.sum(e, axis=0), mask=cols < n)

    @triton.autotune(configs=_WARPS, key=["n"])
    @triton.jit
    def tr_layernorm(out_ptr, x_ptr, w_ptr, b_ptr, n, stride, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64) * stride
        cols = tl.arange(0, BLOCK)
        inside = cols < n
        t = tl.load(x_ptr + row + cols, mask=inside, other=0.0)
        d = tl.where(inside, t - tl.sum(t, axis=0) / n, 0.0)
        inv = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
        w = tl.load(w_ptr + cols, mask=inside, other=0.0)
        b = tl.load(b_ptr + cols, mask=inside, other=0.0)
        tl.store(out_ptr + row + cols, d * inv * w + b, mask=inside)

    @triton.jit
    def tr_add(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=inside) +
                 tl.load(y_ptr + offs, mask=inside), mask=inside)


def cutile_matmul():
    """(run(a, b, c), None) for a cuTile Python GEMM, or (None, why not)."""
    global ct  # cuTile evaluates the kernel's (string) annotations in this module's globals
    try:
        import cuda.tile as ct
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return None, f"not installed ({type(exc).__name__}: {exc})"[:160]

    @ct.kernel
    def ct_mm(A, B, C, tm: ct.Constant[int], tn: ct.Constant[int], tk: ct.Constant[int]):
        bi, bj = ct.bid(0), ct.bid(1)
        acc = ct.full((tm, tn), 0.0, dtype=ct.float32)
        for k in range(ct.cdiv(A.shape[1], tk)):
            acc = ct.mma(ct.load(A, (bi, k), (tm, tk), padding_mode=ct.PaddingMode.ZERO),
                         ct.load(B, (k, bj), (tk, tn), padding_mode=ct.PaddingMode.ZERO), acc)
        ct.store(C, (bi, bj), ct.astype(acc, C.dtype))

    def run(a, b, c, tm=128, tn=128, tk=64):
        import torch
        grid = (math.ceil(a.shape[0] / tm), math.ceil(b.shape[1] / tn), 1)
        ct.launch(torch.cuda.current_stream(), grid, ct_mm, (a, b, c, tm, tn, tk))
    return run, None
