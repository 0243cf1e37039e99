"""``linear(x, w, bias=None)``: the projections of a transformer, ``y = x @ w.T + bias``.

Two schedules of one tile kernel family, chosen from the token count T:

* prefill (T > 16): a tile GEMM. Each tile block owns a (bm, bn) tile of y and walks K in
  steps of bk, loading x at (i, k) and w at (j, k) in its stored (N, K) layout; the transposed
  w tile feeds ``ft.mma`` directly (K-major is Hopper's native B operand: tileiras keeps TMA
  loads and SM90 tensor cores, and the cubin is the size of the pre-transposed kernel's).
* decode (T <= 16): bandwidth-bound on w. The block's tile is (16, bn) (x padded with zero rows
  past T); by default it computes w @ x.T, so that w's tile is the warpgroup mma's A operand
  straight from shared memory. Only when N / bn gives very few blocks (under an eighth of the
  SMs) is K split: each block writes f32 partial sums of its K range into a (splits, T, N) buffer it
  owns a tile of, and a second kernel adds them, adds the bias and rounds once.

Rounding (every path, every dtype): products are exact (f16 and bf16 products fit f32; f32
inputs are split into TF32 parts: ``_linear_tiles``'s ``exact``), sums are f32 in an unspecified order,
the bias is added to the f32 sum, and the total is rounded once to x's dtype. This is what
Hugging Face's ``nn.Linear`` does in bf16: ``F.linear`` on a 2-D or contiguous 3-D input calls
``addmm(bias, x, w.t())`` (aten/native/Linear.cpp), and cuBLAS adds the bias (the Lt epilogue or
``beta * C``) to the f32 accumulator before its single rounding. (Only a non-contiguous input
takes torch's ``matmul`` then ``add_`` route, which rounds twice; Llama and Qwen3 have no bias.)
Where HF can differ by more than that rounding: torch lets cuBLAS reduce split-K partial sums
in f16/bf16 by default (``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``);
fearless's partial sums are always f32.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from fearless import dtypes
from fearless import tile as ft
from fearless.dtypes import f32
from fearless.nn import _common as c
from fearless.tracebacks import user_facing

DECODE_MAX_T = 16          # tokens up to which the decode schedule runs
_FORMS = {"mma": 0, "mma_t": 1, "sum": 2}
_H200_SMS = c.TEST_GPU_SMS


@ft.kernel
def _linear_tiles(y: ft.Out, x: ft.In, w: ft.In, bias: ft.In, bk: ft.Const[int] = 64,
                  form: ft.Const[int] = 0, exact: ft.Const[bool] = False,
                  has_bias: ft.Const[bool] = False, latency: ft.Const[int] = 0,
                  split: ft.Const[bool] = False):
    """y (T, N) tile (bm, bn), or f32 partial sums (S, T, N) tile (1, bm, bn) where split s
    covers K chunks [s * per, s * per + per): both through one body, so both schedules round
    alike. Chunks past K read zeros (the last split's tail). ``form`` 0: mma of x by w.T;
    1: mma of w by x.T (the (bn, bm) accumulator puts N on the tensor cores' M side, for
    small T); 2: products and ft.sum on the CUDA cores. ``exact``: f32 inputs split into a
    TF32 high part (Veltkamp: c = v * 8193; hi = c - (c - v) keeps 11 significand bits) and
    the rest, three mma (hi.hi + hi.lo + lo.hi) instead of one TF32 mma."""
    bm, bn = y.tile_shape[-2], y.tile_shape[-1]
    if split:
        s, i, j = y.tile_index
        per = ft.cdiv(ft.cdiv(x.shape[1], bk), y.shape[0])
        first = s * per
    else:
        i, j = y.tile_index
        per = ft.cdiv(x.shape[1], bk)
        first = 0
    if form == 0:
        acc = ft.zeros((bm, bn), f32)
    elif form == 1:
        acc = ft.zeros((bn, bm), f32)
    else:
        acc = ft.zeros((bm, bn, bk), f32)
    for k in range(first, first + per):
        a = ft.load(x, (i, k), (bm, bk))
        if latency > 0:
            b = ft.load(w, (j, k), (bn, bk), latency=latency)
        else:
            b = ft.load(w, (j, k), (bn, bk))
        if form == 2:
            acc = acc + a.astype(f32).reshape((bm, 1, bk)) * b.astype(f32).reshape((1, bn, bk))
        elif exact:
            ca = a * 8193.0
            a_hi = ca - (ca - a)
            cb = b * 8193.0
            b_hi = cb - (cb - b)
            if form == 0:
                acc = ft.mma(a_hi, b_hi.T, acc)
                acc = ft.mma(a - a_hi, b_hi.T, ft.mma(a_hi, (b - b_hi).T, acc))
            else:
                acc = ft.mma(b_hi, a_hi.T, acc)
                acc = ft.mma(b - b_hi, a_hi.T, ft.mma(b_hi, (a - a_hi).T, acc))
        elif form == 0:
            acc = ft.mma(a, b.T, acc)
        else:
            acc = ft.mma(b, a.T, acc)
    if form == 1:
        tot = acc.T
    elif form == 2:
        tot = ft.sum(acc, axis=2)
    else:
        tot = acc
    if has_bias:
        tot = tot + ft.load(bias, (j,), (bn,)).astype(f32).reshape((1, bn))
    if split:
        y.store(tot.reshape((1, bm, bn)))
    else:
        y.store(tot.astype(y.dtype))


@ft.kernel
def _linear_reduce(y: ft.Out, part: ft.In, bias: ft.In, splits: ft.Const[int] = 2,
                   has_bias: ft.Const[bool] = False):
    """y (T, N) tile (bm, bn) = the sum over the split axis of ``part`` (S, T, N) f32 (S <=
    ``splits``, a power of two: rows past S read zeros), plus the bias, rounded once."""
    bm, bn = y.tile_shape
    i, j = y.tile_index
    tot = ft.sum(ft.load(part, (0, i, j), (splits, bm, bn)), axis=0)
    if has_bias:
        tot = tot + ft.load(bias, (j,), (bn,)).astype(f32).reshape((1, bn))
    y.store(tot.astype(y.dtype))


@dataclass(frozen=True)
class Plan:
    """How one call runs: ``form`` ("mma", "mma_t", "sum"), the tile (bm, bn) of y, the K step
    bk, ``splits`` of K (1: no split, else a power of two and a second, reducing kernel),
    ``latency`` (0: no hint; 1-10: tileiras's latency hint on the loads of w)."""

    form: str
    bm: int
    bn: int
    bk: int
    splits: int = 1
    latency: int = 0


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@functools.lru_cache(maxsize=1024)  # a model calls a few shapes over and over
def plan(t: int, n: int, k: int, dtype: dtypes.DType, sms: int = _H200_SMS) -> Plan:
    """The default schedule for x (t, k) by w (n, k) in ``dtype`` on a GPU with ``sms`` SMs.

    Decode (t <= 16): the "mma_t" form (w's (64, bk) tile is the A operand of Hopper's
    warpgroup mma, read from shared memory; "mma" goes through ldmatrix and spills at f32 or
    16 x 128 tiles), (16, 64) tiles of y, bk 256 (f32: 128), K split only when there are fewer
    than ``sms // 8`` blocks (into a power of two of parts up to that many blocks, each part
    keeping at least two K steps). Measured on the H200 (bf16, T 1, 2026-12-02,
    benchmarks/bench_linear.py): one kernel over 32 blocks streams N 2048 x K 2048 in 8.8 us
    and 2048 x 6144 in 14.7 us, where K split into 4-8 parts plus the reducing kernel took
    10.9 and 18.5 us (the split's f32 partial sums and its second launch cost more than the
    idle SMs); (16, 16) tiles fall off a cliff (75-560 us), (16, 32) tiles run 10-20% slower.
    Prefill (f16, bf16): the largest of the tiles 128x128, 128x64 and 64x64 (bm no larger than
    t's power of two) whose blocks fill two thirds of the SMs, bk 64; when none does, 64x64
    tiles with K split (below). Measured on the H200 (session 14, 2026-12-03; bf16, L2 flushed,
    ``bench_linear.py`` in benchmarks/RESULTS.md), Llama-3.1-8B at T 128: q/o (N 4096) 64x64
    (128 blocks) 19.2 us, 128x64 22.0, 128x128 (32 blocks) 28.4, cuBLAS 18.8; gate (N 14336)
    128x128 (112 blocks) 42.9, 128x64 45.8, 64x64 56.9, cuBLAS 42.8; at T 512 128x128 wins
    (29.6 against 36.5 for 128x64). Where no tile fills the SMs (kv, N 1024): 64x64 in 4 parts
    14.6, in one 14.9, 128x64 in 4 parts 16.3, cuBLAS 12.3 (itself split); Qwen3-1.7B's N 1024-
    2048, K 2048-6144 rows at T 128-256 alike (the split 64x64 within 0.6 us of the best
    config, 1.1-1.5 us ahead of 128x64 split). f32: 128x64 tiles (the three TF32 mma spill
    registers at 128x128), bk 32. K is split when the blocks fill under half the SMs (f16/bf16:
    two thirds): into a power of two of parts with at most about a block per SM, each part
    keeping at least 16 K steps (f32: 48, not measured lower).
    """
    wide = dtype.itemsize == 4
    form = "mma"
    if t <= DECODE_MAX_T:
        form, bm, bn, bk, least = "mma_t", 16, 64, 128 if wide else 256, 2
        want = target = max(1, sms // 8)
    elif wide:
        bm, bn, bk, least, want, target = min(128, c.pow2(t)), 64, 32, 48, sms // 2, sms
    else:
        bm, bn = _prefill_tile(t, n, sms)
        bk, least, want, target = 64, 16, -(-2 * sms // 3), sms
    blocks = max(1, -(-t // bm) * -(-n // bn))
    splits = 1
    if blocks < want:
        splits = min(_pow2_at_most(target // blocks), _pow2_at_most(-(-k // bk) // least))
    return Plan(form, bm, bn, bk, max(1, splits))


def _prefill_tile(t: int, n: int, sms: int) -> tuple[int, int]:
    """The f16/bf16 prefill tile of y (``plan``): the largest of (bm, 128), (bm, 64), (64, 64)
    (bm = t's power of two up to 128) whose blocks number at least 2/3 of ``sms``, else the
    smallest, whose K the plan splits."""
    bm = min(128, c.pow2(t))
    tiles = ((bm, 128), (bm, 64), (min(bm, 64), 64))
    for tile in tiles:
        if 3 * -(-t // tile[0]) * -(-n // tile[1]) >= 2 * sms:
            return tile
    return tiles[-1]


@functools.lru_cache(maxsize=1024)
def _reduce_tile(t: int, n: int, splits: int, sms: int) -> tuple[int, int]:
    """The reducing kernel's tile of y: a block sums (splits, rm, rn) f32 values, at most about
    8192, and the blocks number about one per SM or more (the work is tiny: latency counts).
    Rows of 64 values (256 bytes) where that still gives a block per SM, else of 16: a prefill
    split's reduce of (2, 512, 4096) in (16, 16) tiles took longer than the GEMM (H200; the
    64-wide rows are not timed yet)."""
    rm = min(c.pow2(t), 16)
    budget = max(1, 8192 // (splits * rm))
    least = 64 if -(-t // rm) * -(-n // 64) >= sms else 16
    return rm, _pow2_at_most(min(budget, max(least, n * rm // (max(t, 1) * sms))))


def _arguments(x, w, bias):
    """x, w, bias as fearless Tensors, checked (ArgumentTypeError, ContractError)."""
    fn = "linear"
    xt, wt = c.tensor(fn, "x", x), c.tensor(fn, "w", w)
    c.check_rank(fn, "x", xt, 2, "(T, K): flatten the tokens first")
    c.check_rank(fn, "w", wt, 2, "(N, K)")
    c.check_dtype(fn, "x", xt, c.FLOATS)
    c.check_same_dtype(fn, "w", wt, "x", xt)
    c.check_shape(fn, "w", wt, (None, xt.shape[1]),
                  "x's (T, K) in torch.nn.Linear's layout (N, K)")
    if bias is None:
        return xt, wt, None
    bt = c.tensor(fn, "bias", bias)
    c.check_rank(fn, "bias", bt, 1, "(N,)")
    c.check_same_dtype(fn, "bias", bt, "x", xt)
    c.check_shape(fn, "bias", bt, (wt.shape[0],), "w's (N, K)")
    return xt, wt, bt


@user_facing
def linear(x, w, bias=None, *, variant: str | None = None, tile: tuple | None = None,
           bk: int | None = None, splits: int | None = None, latency: int | None = None):
    """``y = x @ w.T + bias``: x (T, K), w (N, K) in torch.nn.Linear's (out, in) layout, bias
    (N,) or None -> y (T, N) in x's dtype (f16, bf16 or f32; w and bias the same dtype).

    x, w, bias: fearless Tensors, torch CUDA tensors, or anything ``fl.asarray`` takes (NumPy
    on the cpu backend). y is a torch tensor when x is one, else a fearless Tensor.
    Rounding: exact products, f32 sums (unspecified order), bias added in f32, one rounding to
    the dtype. With M = |x| @ |w|.T + |bias| and S the K splits (1 unless split): at most
    k + S additions, each off by up to 2**-23 relative (tensor cores need not round to
    nearest), so |y - (x @ w.T + bias)| <= (k + S) * 2**-23 * M, plus half an ulp of y. f32
    inputs: three TF32 products per term ((3k + S) additions) and 2**-20 * M more (the split
    rounds lo to TF32 and drops lo * lo: 3 * 2**-22 relative per product); they must stay below
    2**114 in magnitude (the split multiplies by 8193).

    Tuning (keywords, for benchmarks; the defaults come from ``plan``): ``variant`` "mma",
    "mma_t" (w @ x.T on the tensor cores, then transposed: for T <= 16) or "sum" (CUDA-core
    products and a sum); ``tile`` (bm, bn) of y, powers of two; ``bk`` the K step; ``splits``
    of K (a power of two; 1: one kernel); ``latency`` 1-10, tileiras's hint on w's loads.

    Raises ArgumentTypeError (rank, dtype), ContractError (K or N mismatch) before anything
    runs; ValueError for a bad tuning keyword.
    """
    xt, wt, bt = _arguments(x, w, bias)
    (t, k), n = xt.shape, wt.shape[0]
    sms = c.planning_sms()
    p = _tuned(plan(t, n, k, xt.dtype, sms), t, variant, tile, bk, splits, latency)
    # Consts passed by position: a call without keywords takes the kernel's cached fast path
    consts = (p.bk, _FORMS[p.form], xt.dtype is f32 and p.form != "sum")
    out = c.output(x, (t, n), xt.dtype)
    if t == 0 or n == 0:
        return out.result()
    if p.splits == 1:
        has_bias = bt is not None
        y, *_ = c.run(_linear_tiles(out.partition((p.bm, p.bn)), xt, wt,
                                    bt if has_bias else wt, *consts, has_bias, p.latency, False))
        return out.result(y)
    rm, rn = _reduce_tile(t, n, p.splits, sms)
    reduce = lambda r: _linear_reduce(  # noqa: E731 - the second kernel of one operation
        out.partition((rm, rn)), r[0].unpartition(), wt if bt is None else bt,
        p.splits, bt is not None)
    part = c.output(xt, (p.splits, t, n), f32).tensor
    y, *_ = c.run(_linear_tiles(c.partition(part, (1, p.bm, p.bn)), xt, wt, wt, *consts, False,
                                p.latency, True).then(reduce))
    return out.result(y)


def _tuned(p: Plan, t: int, variant, tile, bk, splits, latency) -> Plan:
    """``p`` with the caller's tuning keywords (ValueError for a bad one). "sum" keeps a
    (bm, bn, bk) f32 accumulator: its default tile is (pow2(t) <= 16, 32) by 8192 / (bm * 32)."""
    if variant is None and tile is None and bk is None and splits is None and latency is None:
        return p  # plan's own choice
    if variant is not None:
        if variant not in _FORMS:
            raise ValueError(f"linear: variant {variant!r} is not one of {sorted(_FORMS)}")
        p = replace(p, form=variant)
        if variant == "sum":
            bm = min(c.pow2(t), 16)
            p = replace(p, bm=bm, bn=32, bk=max(1, 8192 // (bm * 32)))
    if tile is not None:
        p = replace(p, bm=tile[0], bn=tile[1])
    for name, v in (("bk", bk), ("splits", splits), ("latency", latency)):
        if v is not None:
            p = replace(p, **{name: v})
    for name in ("bm", "bn", "bk", "splits"):
        v = getattr(p, name)
        if v < 1 or v & (v - 1):
            raise ValueError(f"linear: {name} = {v} is not a power of two")
    if p.form != "sum" and min(p.bm, p.bn, p.bk) < 16:
        raise ValueError(f"linear: the mma variants need tiles of at least 16, got "
                         f"({p.bm}, {p.bn}) x {p.bk}")
    if not 0 <= p.latency <= 10:
        raise ValueError(f"linear: latency {p.latency} is not in 0..10")
    return p
