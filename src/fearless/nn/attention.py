"""Attention for transformer inference: flash attention for prefill, split-K attention for decode.

Both are tile kernels over token-major tensors (``(B, S, H, D)`` views of the ``(T, H * D)``
projection outputs, read in place): scores and the softmax in f32 with an online (running
max) softmax, ``exp2`` with log2(e) folded into the scale (where a tuning asks, flushing results
below 2**-126 to 0, which a row's sum of at least 1 does not notice: one GPU instruction instead
of four), and the probabilities rounded to the input dtype for the second product on tensor
cores, as flash attention does (Dao et al., 2022, "FlashAttention", algorithm 1; the split-K
decode is their "Flash-Decoding", 2023).

Tuning lives in ``PREFILL`` and ``DECODE`` (tile sizes and Tile IR hints per head dim), which
``benchmarks/bench_attention.py`` overrides from its command line. On the GPU the prefill's
tiles are chosen by ``ft.autotune`` (``_prefill_tuned``: ``PREFILL`` first, then the tiles
``examples/tile_attention.py`` found worth trying), once per dtype, head counts, head dim,
causality and power-of-two bucket of lengths; ``FEARLESS_NN_AUTOTUNE=0`` keeps ``PREFILL``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import fearless as fl
from fearless import dtypes, f32
from fearless import tile as ft
from fearless.autotuning import agreement, driver
from fearless.errors import ArgumentTypeError
from fearless.kernel import base
from fearless.nn import _common as c
from fearless.runtime import ahead

LOG2E = math.log2(math.e)
HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class PrefillTuning:
    """Tile sizes and Tile IR hints of the prefill kernel: ``bm`` query rows and ``bn`` keys
    per step (powers of two), ``occupancy`` (tile blocks per SM, a tileiras hint; None: its
    choice), ``k_latency`` and ``v_latency`` (the load hints of the K and V tiles, 1-10; None:
    no hint) and ``ftz`` (the softmax's exp2 flushes results below 2**-126 to 0: fewer
    instructions per score, but with D 128 at occupancy 2 tileiras then spills registers)."""

    bm: int = 128
    bn: int = 64
    occupancy: int | None = 2
    k_latency: int | None = None
    v_latency: int | None = None
    ftz: bool = True


@dataclass(frozen=True)
class DecodeTuning:
    """The split-K decode kernel: ``bn`` cache rows per step, ``waves`` tile blocks per SM the
    splits aim at (the split count is fixed by max_ctx and the SM count, never by the current
    lengths, so a captured graph serves every length), ``occupancy`` and ``latency`` as for
    prefill; ``occupancy`` applies below ``many`` sequence-heads (batch x kv heads), and
    ``many_occupancy`` from there on. One wave: measured on the H200 (bf16, Hkv 8, D 128, 1100
    of 1280 rows, in a captured graph, 2026-12-02), batch 1 took 9.9 us with 1 wave, 12.8 with
    2 and 13.1 with 8; batch 16 38.4, 42.5 and 56.3 us (each block's fixed cost outweighs the
    shorter chunks). Occupancy 2 (benchmarks/bench_attention.py, full caches, 2026-12-02):
    batch 16 (128 sequence-heads) took 24.7 us instead of 32.9 at context 1024 and 130 instead
    of 141 at 8192 (64% and 97% of copy bandwidth instead of 48% and 89%); batch 1 (8) 9.0 and
    18.1 us instead of 8.6 and 16.8."""

    bn: int = 64
    waves: int = 1
    occupancy: int | None = None
    k_latency: int | None = None
    v_latency: int | None = None
    many: int = 64
    many_occupancy: int | None = 2


# keyed by head dim; benchmarks and tuning sweeps replace entries
PREFILL: dict[int, PrefillTuning] = {64: PrefillTuning(), 128: PrefillTuning(ftz=False)}
# occupancy 2 from many sequence-heads measured with D 128 only (DecodeTuning)
DECODE: dict[int, DecodeTuning] = {64: DecodeTuning(many_occupancy=None), 128: DecodeTuning()}


def _hints(occupancy: int | None) -> dict:
    return {arch: {"occupancy": occupancy} for arch in ("sm_80", "sm_90")} if occupancy else {}


@lru_cache(maxsize=None)
def _prefill_kernel(occupancy: int | None, k_latency: int | None, v_latency: int | None,
                    ftz: bool):
    @ft.kernel(hints=_hints(occupancy))
    def flash_prefill(out: ft.Out, q: ft.In, k: ft.In, v: ft.In, qk_scale: f32,
                      causal: ft.Const[int] = 1, bn: ft.Const[int] = 64):
        # out (B, S, Hq * D), tile (1, bm, D): this block's query rows of one head
        b, i, h = out.tile_index
        bm = out.tile_shape[1]
        d = out.tile_shape[2]
        skv = k.shape[1]
        offset = skv - q.shape[1]              # query row r sees keys c <= r + offset
        hk = h // (q.shape[2] // k.shape[2])
        qt = ft.load(q, (b, i, h, 0), (1, bm, 1, d)).reshape((bm, d))
        m = ft.full((bm, 1), -math.inf, f32)   # running max of the scaled scores (log2 units)
        l = ft.zeros((bm, 1), f32)             # running sum of exp2(score - m)
        acc = ft.zeros((bm, d), f32)
        # blocks [0, full) need no mask: inside Skv and, causal, at or below the diagonal of
        # the block's first query row; blocks [full, stop) are masked; none past stop
        full = skv // bn
        stop = ft.cdiv(skv, bn)
        if causal:
            full = ft.minimum(full, ft.maximum(i * bm + offset + 1, 0) // bn)
            stop = ft.cdiv(ft.minimum(ft.maximum((i + 1) * bm + offset, 0), skv), bn)
        for n in range(full):
            kt = ft.load(k, (b, n, hk, 0), (1, bn, 1, d), latency=k_latency).reshape((bn, d))
            vt = ft.load(v, (b, n, hk, 0), (1, bn, 1, d), latency=v_latency).reshape((bn, d))
            sc = ft.mma(qt, ft.transpose(kt), ft.zeros((bm, bn), f32))
            mn = ft.maximum(m, ft.max(sc, 1, keepdims=True) * qk_scale)
            p = ft.exp2(sc * qk_scale - mn, flush_to_zero=ftz)
            alpha = ft.exp2(m - mn, flush_to_zero=ftz)
            l = l * alpha + ft.sum(p, 1, keepdims=True)
            acc = ft.mma(p.astype(q.dtype), vt, acc * alpha)
            m = mn
        rows = ft.reshape(ft.arange(bm), (bm, 1)) + (i * bm + offset)
        for n in range(full, stop):
            kt = ft.load(k, (b, n, hk, 0), (1, bn, 1, d), latency=k_latency).reshape((bn, d))
            vt = ft.load(v, (b, n, hk, 0), (1, bn, 1, d), latency=v_latency).reshape((bn, d))
            sc = ft.mma(qt, ft.transpose(kt), ft.zeros((bm, bn), f32)) * qk_scale
            cols = ft.reshape(ft.arange(bn), (1, bn)) + n * bn
            # causal: cols <= rows implies cols < skv for every real query row
            sc = ft.where((cols < skv) & (cols <= rows + (1 - causal) * skv), sc, -math.inf)
            mn = ft.maximum(m, ft.max(sc, 1, keepdims=True))
            ms = ft.where(mn == -math.inf, 0.0, mn)   # a row with no key yet: no NaN
            p = ft.exp2(sc - ms, flush_to_zero=ftz)
            alpha = ft.exp2(m - ms, flush_to_zero=ftz)
            l = l * alpha + ft.sum(p, 1, keepdims=True)
            acc = ft.mma(p.astype(q.dtype), vt, acc * alpha)
            m = mn
        res = acc * (1.0 / ft.where(l == 0.0, 1.0, l))   # a row that sees no key: 0
        out.store(res.astype(out.dtype).reshape((1, bm, d)))

    return flash_prefill


@lru_cache(maxsize=None)
def _decode_kernels(occupancy: int | None, k_latency: int | None, v_latency: int | None):
    @ft.kernel(hints=_hints(occupancy))
    def decode_split(po: ft.Out[f32], pl: ft.Out[f32], q: ft.In, k: ft.In, v: ft.In,
                     lengths: ft.In, qk_scale: f32, chunk: ft.Const[int] = 512,
                     bn: ft.Const[int] = 64):
        # po (B * Hkv, splits, G * D) tile (1, 1, G * D), pl (B * Hkv, splits, G) tile
        # (1, 1, G): split sp of the cache of kv head hk of sequence b, for its whole group of
        # query heads (padded to G, a power of two), so K and V are read once
        bh, sp, _ = po.tile_index
        gp = pl.tile_shape[2]
        d = po.tile_shape[2] // gp
        hkv = k.shape[2]
        b = bh // hkv
        hk = bh % hkv
        group = q.shape[1] // hkv
        length = ft.minimum(ft.gather(lengths, b), k.shape[1])
        first = sp * (chunk // bn)
        blocks = ft.cdiv(ft.maximum(ft.minimum(length - sp * chunk, chunk), 0), bn)
        r = ft.reshape(ft.arange(gp), (gp, 1))
        heads = ft.where(r < group, hk * group + r, -1)      # padding rows read 0
        qt = ft.gather(q, (b, heads, ft.reshape(ft.arange(d), (1, d))))
        m = ft.full((gp, 1), -math.inf, f32)
        l = ft.zeros((gp, 1), f32)
        acc = ft.zeros((gp, d), f32)
        for n in range(first, first + blocks):
            kt = ft.load(k, (b, n, hk, 0), (1, bn, 1, d), latency=k_latency).reshape((bn, d))
            vt = ft.load(v, (b, n, hk, 0), (1, bn, 1, d), latency=v_latency).reshape((bn, d))
            sc = ft.mma(qt, ft.transpose(kt), ft.zeros((gp, bn), f32)) * qk_scale
            cols = ft.reshape(ft.arange(bn), (1, bn)) + n * bn
            sc = ft.where(cols < length, sc, -math.inf)
            mn = ft.maximum(m, ft.max(sc, 1, keepdims=True))
            # mn is finite: every block holds a valid row
            p = ft.exp2(sc - mn, flush_to_zero=True)
            alpha = ft.exp2(m - mn, flush_to_zero=True)
            l = l * alpha + ft.sum(p, 1, keepdims=True)
            acc = ft.mma(p.astype(q.dtype), vt, acc * alpha)
            m = mn
        empty = l == 0.0                # a split past the length: weight 0 in the merge
        o = acc * (1.0 / ft.where(empty, 1.0, l))
        lse = ft.where(empty, -math.inf, m + ft.log(ft.where(empty, 1.0, l)) * LOG2E)
        po.store(o.reshape((1, 1, gp * d)))
        pl.store(lse.reshape((1, 1, gp)))

    @ft.kernel
    def decode_merge(out: ft.Out, po: ft.In[f32], pl: ft.In[f32], splits: ft.Const[int] = 1):
        # out (B, Hq, D) tile (1, 1, D): one query head; splits: a power of two >= po.shape[1]
        b, h, _ = out.tile_index
        d = out.tile_shape[2]
        hkv = po.shape[0] // out.shape[0]
        group = out.shape[1] // hkv
        bh = b * hkv + h // group
        lse = ft.load(pl, (bh, 0, h % group), (1, splits, 1), padding=-math.inf)
        o = ft.load(po, (bh, 0, h % group), (1, splits, d))
        top = ft.max(lse, 1, keepdims=True)
        # length 0: every weight 0
        w = ft.exp2(lse - ft.where(top == -math.inf, 0.0, top), flush_to_zero=True)
        total = ft.sum(w, 1, keepdims=True)
        res = ft.sum(o * w, 1, keepdims=True) * (1.0 / ft.where(total == 0.0, 1.0, total))
        out.store(res.astype(out.dtype))

    return decode_split, decode_merge


def _tensors(fn: str, names: str, *objs) -> list:
    return [c.tensor(fn, name, obj) for name, obj in zip(names.split(), objs)]


def _launch(fn: str, first, final: tuple, shape: tuple, dt, tile: tuple, make_op):
    """Allocate the ``final``-shaped output like ``first`` (torch in, torch out), partition
    its ``shape`` view with ``tile``, run ``make_op(partition)`` and return the output."""
    out = c.output(first, final, dt)
    part = c.partition_as(fn, [("out", out.tensor, shape, tile)])[0]
    result = out.result(c.run(make_op(part))[0])
    return result if out.foreign is not None else result.reshape(final)


def _check(fn: str, name: str, x, rank: int, dims: str):
    if len(x.shape) != rank:
        raise ArgumentTypeError(f"{name} must have rank {rank} {dims}, got shape "
                                f"{tuple(x.shape)}", kernel=fn, param=name)


def _check_heads(fn: str, q, k, v, hq: int, hkv: int, d: int):
    kn, vn = ("k", "v") if fn == "attention" else ("k_cache", "v_cache")
    if tuple(k.shape) != tuple(v.shape):
        raise ArgumentTypeError(f"{kn} and {vn} must have one shape, got {tuple(k.shape)} and "
                                f"{tuple(v.shape)}", kernel=fn, param=vn)
    if k.shape[-1] != d:
        raise ArgumentTypeError(f"q has head dim {d} but {kn} and {vn} have {k.shape[-1]}",
                                kernel=fn, param=kn)
    if d not in HEAD_DIMS:
        raise ArgumentTypeError(f"head dim {d} is not supported (only {HEAD_DIMS})",
                                kernel=fn, param="q")
    if hkv == 0 or hq % hkv:
        raise ArgumentTypeError(f"{hkv} kv heads do not divide {hq} query heads",
                                kernel=fn, param=kn)
    dts = {t.dtype for t in (q, k, v)}
    if len(dts) != 1:
        raise ArgumentTypeError(f"q, {kn} and {vn} must have one dtype, got "
                                f"{', '.join(sorted(str(t) for t in dts))}", kernel=fn,
                                param=kn)
    (dt,) = dts
    if dt not in (fl.f16, fl.bf16, fl.f32):
        raise ArgumentTypeError(f"dtype {dt} is not supported (f16, bf16 or f32)",
                                kernel=fn, param="q")
    return dt


def attention(q, k, v, causal: bool = True, scale: float | None = None):
    """Multi-head attention for prefill: ``softmax(q k^T * scale + mask) v`` per head.

    q (B, S, Hq, D); k, v (B, Skv, Hkv, D) with Hkv dividing Hq (grouped-query attention:
    query head h reads kv head h // (Hq // Hkv)); D 64 or 128; any S and Skv; views of the
    projection outputs (the last two axes contiguous) are read in place. f16, bf16 or f32, one
    dtype for all three (f32 runs the products in TF32 on the GPU). ``causal``: query i sees
    keys j <= i + (Skv - S) (the last query sees every key; a query that sees no key, when
    Skv < S, gives 0). ``scale`` defaults to 1 / sqrt(D). On the GPU the tiles are tuned
    (the module docstring): the first call of a new dtype, head dim and causality compiles
    and times 5 configs (1.5-3.4 s on the H200), a new bucket of lengths times them again
    (under a second); rankings persist in the disk cache.

    Returns (B, S, Hq, D) in q's dtype, the same kind as q (torch in, torch out). Roundings:
    the scores q k^T accumulate in f32; the softmax runs in f32 with a running maximum
    (exp2 of the scores times scale * log2 e); the probabilities are rounded to q's dtype
    before their product with v, which accumulates in f32; the output is divided by the f32
    row sum and rounded once to q's dtype. This is the order of the flash kernel behind
    torch's ``scaled_dot_product_attention``, which Hugging Face transformers calls by default
    (``attn_implementation="sdpa"``); its "eager" path differs (it rounds the scaled scores to
    the activation dtype, then takes an f32 softmax rounded back before the product with v).
    Raises ArgumentTypeError for a wrong rank, head dim or dtype, Hkv not dividing Hq, or k and
    v shapes that differ.
    """
    first, (q, k, v) = q, _tensors("attention", "q k v", q, k, v)
    dt = _check_prefill(q, k, v)
    bsz, s, hq, d = q.shape
    if base.CONFIG.nn_autotune and (driver.tunes_on(fl.current_backend())
                                    or ahead.compiling_ahead()):
        # ``fearless compile`` compiles every config, as a GPU run needs them; the cpu
        # backend otherwise runs the measured tiles, the tuner's first config (its cross
        # compiles, FEARLESS_CROSS_COMPILE, stay one per call: tests/nn/test_attention.py
        # tunes the whole list once)
        return _attention_tuned(first, q, k, v, causal, scale, dt)
    return _launch("attention", first, (bsz, s, hq, d), (bsz, s, hq * d), dt, prefill_tile(d),
                   lambda part: attention_op(part, q, k, v, causal, scale))


def _attention_tuned(first, q, k, v, causal: bool, scale: float | None, dt):
    """``attention`` with its tiles chosen by ``_prefill_tuned`` (on the GPU; FEARLESS_NN_AUTOTUNE
    not 0)."""
    bsz, s, hq, d = q.shape
    out = c.output(first, (bsz, s, hq, d), dt)
    view = c.reshaped_alone("attention", "out", out.tensor, (bsz, s, hq * d))
    qk_scale = (1.0 / math.sqrt(d) if scale is None else float(scale)) * LOG2E
    tuned = _prefill_tuned(d, PREFILL[d], dt.name)
    part = c.run(tuned(view, q, k, v, qk_scale, int(bool(causal))))[0]
    result = out.result(part)
    return result if out.foreign is not None else result.reshape((bsz, s, hq, d))


def _bucket(n: int) -> int:
    """Lengths 2^(b-1) < n <= 2^b share bucket b (one tuning)."""
    return max(0, n - 1).bit_length()


# The probabilities' rounding unit per dtype (f32 products run in TF32: 10 stored bits)
_P_UNIT = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -11}


def tuning_rtol(dtype: str) -> float:
    """The tolerance within which ``_prefill_tuned``'s configs must agree for q's ``dtype``
    (a dtype name), times (|value| + the mean |value|): 12 units of the probabilities'
    rounding, never below the tuner's default for the dtype (bf16 12 * 2^-8 = 0.047, f16 1e-2,
    f32's TF32 0.0059). Configs round P after different running maxima, so each output carries
    a sum of independent roundings over its keys, and over 10^7 outputs the largest difference
    of two correct configs reached about 8 units (bf16, S 4096, D 128, causal, on the H200:
    0.0014 against a mean |out| of 0.039, which the bf16 default of 2^-5 refused); the largest
    of 10^8-10^9 outputs is 5-10% more (it grows as sqrt(2 ln n))."""
    return max(12 * _P_UNIT[dtype], agreement.default_rtol(dtypes.from_name(dtype).numpy))


@lru_cache(maxsize=None)
def _prefill_tuned(d: int, tune: PrefillTuning, dtype: str):
    """The prefill kernel of head dim ``d`` for q's ``dtype`` (a dtype name) under
    ``ft.autotune``: ``tune`` (the measured default) first, then 128 or 64 query rows by 64 or
    128 keys, with and without occupancy 2 (the spaces examples/tile_attention.py measured on
    the H200). Keyed by dtype, heads, head dim, the strides past the batch and the buckets of
    the lengths, and causality; the configs agree within ``tuning_rtol(dtype)``."""
    kern = _prefill_kernel(None, tune.k_latency, tune.v_latency, tune.ftz)
    tiles = dict.fromkeys([(tune.bm, tune.bn, tune.occupancy), (128, 64, 2), (128, 64, None),
                           (128, 128, None), (64, 64, 2), (64, 128, None)])
    configs = [ft.Config(tile=(1, bm, d), bn=bn, hints=_hints(occ)) for bm, bn, occ in tiles]
    return ft.autotune(configs=configs, rtol=tuning_rtol(dtype), key={
        "out": lambda o: (o.dtype.name, o.shape[2], _bucket(o.shape[0] * o.shape[1])),
        "q": lambda q: (q.shape[2:], q.strides[1:]),
        "k": lambda k: (k.shape[2:], k.strides[1:], _bucket(k.shape[1])),
        "v": lambda v: v.strides[1:],
        "causal": None})(kern)


def prefill_tile(d: int) -> tuple:
    """The tile of the (B, S, Hq * D) output partition ``attention_op`` writes."""
    return (1, PREFILL[d].bm, d)


def attention_op(out, q, k, v, causal: bool = True, scale: float | None = None):
    """The DeviceOperation of ``attention`` writing ``out``, a partition of a (B, S, Hq * D)
    tensor of q's dtype with tiles ``prefill_tile(D)``: for graphs and benchmarks. q, k, v
    fearless Tensors (or what ``fl.asarray`` takes); its result's first element is ``out``."""
    q, k, v = _tensors("attention", "q k v", q, k, v)
    _check_prefill(q, k, v)
    d = q.shape[3]
    tune = PREFILL[d]
    qk_scale = (1.0 / math.sqrt(d) if scale is None else float(scale)) * LOG2E
    kern = _prefill_kernel(tune.occupancy, tune.k_latency, tune.v_latency, tune.ftz)
    return kern(out, q, k, v, qk_scale, causal=int(bool(causal)), bn=tune.bn)


def _check_prefill(q, k, v):
    fn = "attention"
    _check(fn, "q", q, 4, "(B, S, Hq, D)")
    _check(fn, "k", k, 4, "(B, Skv, Hkv, D)")
    _check(fn, "v", v, 4, "(B, Skv, Hkv, D)")
    if k.shape[0] != q.shape[0]:
        raise ArgumentTypeError(f"q has batch {q.shape[0]} but k has {k.shape[0]}", kernel=fn,
                                param="k")
    return _check_heads(fn, q, k, v, q.shape[2], k.shape[2], q.shape[3])


def decode_chunk(batch: int, kv_heads: int, max_ctx: int, bn: int, waves: int) -> int:
    """The cache chunk length of split-K decode: a multiple of ``bn`` chosen so that about
    ``waves`` tile blocks per SM run (``batch * kv_heads`` times the split count), from the
    shapes alone, never from the lengths (a captured graph serves every length)."""
    target = max(1, -(-waves * fl.multiprocessor_count() // (batch * kv_heads)))
    splits = min(target, -(-max_ctx // bn))
    return -(-(-(-max_ctx // splits)) // bn) * bn


def decode_attention(q, k_cache, v_cache, lengths, scale: float | None = None):
    """Attention of one new token per sequence over a KV cache (the decode step).

    q (B, Hq, D); k_cache, v_cache (B, max_ctx, Hkv, D) with Hkv dividing Hq; lengths (B,)
    int32 device tensor: sequence b attends to cache rows [0, lengths[b]) (the new token's row
    included; values past max_ctx count as max_ctx; a length of 0 gives 0). The lengths are
    read on the device, so they may change between replays of a captured graph. D 64 or 128;
    f16, bf16 or f32, one dtype for q and the caches. ``scale`` defaults to 1 / sqrt(D).

    Split-K: each tile block reads one chunk of the cache of one kv head for all its query
    heads and writes an f32 partial output and log-sum-exp; a merge kernel combines the chunks.
    The chunk count depends on B, Hkv, max_ctx and the SM count only. Roundings: scores and
    softmax in f32 as in ``attention`` (probabilities rounded to the input dtype before the
    product with v); each chunk's output divided by its f32 sum; the merge weights and sums the
    chunks in f32 and rounds once to q's dtype. Returns (B, Hq, D) like q (torch in, torch
    out). Raises ArgumentTypeError for wrong ranks, head dims, dtypes, Hkv not dividing Hq, or
    lengths not a (B,) int32 tensor.
    """
    first, (q, k_cache, v_cache, lengths) = q, _tensors(
        "decode_attention", "q k_cache v_cache lengths", q, k_cache, v_cache, lengths)
    dt = _check_decode(q, k_cache, v_cache, lengths)
    return _launch("decode_attention", first, tuple(q.shape), tuple(q.shape), dt,
                   (1, 1, q.shape[2]),
                   lambda part: decode_attention_op(part, q, k_cache, v_cache, lengths, scale))


def decode_attention_op(out, q, k_cache, v_cache, lengths, scale: float | None = None):
    """The DeviceOperation of ``decode_attention`` writing ``out``, a partition of a
    (B, Hq, D) tensor of q's dtype with tiles (1, 1, D): the split kernel, then the merge
    (its f32 scratch tensors allocated here). For graphs and benchmarks; its result's first
    element is ``out``."""
    q, k_cache, v_cache, lengths = _tensors("decode_attention", "q k_cache v_cache lengths",
                                            q, k_cache, v_cache, lengths)
    _check_decode(q, k_cache, v_cache, lengths)
    bsz, hq, d = q.shape
    _, max_ctx, hkv, _ = k_cache.shape
    tune = DECODE[d]
    qk_scale = (1.0 / math.sqrt(d) if scale is None else float(scale)) * LOG2E
    chunk = decode_chunk(bsz, hkv, max_ctx, tune.bn, tune.waves)
    splits = -(-max_ctx // chunk)
    gp = max(c.pow2(hq // hkv), 16)   # mma rows: at least 16 (tensor core tiles)
    occupancy = tune.occupancy if bsz * hkv < tune.many else tune.many_occupancy
    split, merge = _decode_kernels(occupancy, tune.k_latency, tune.v_latency)
    po = fl.empty((bsz * hkv, splits, gp * d), f32).partition((1, 1, gp * d))
    pl = fl.empty((bsz * hkv, splits, gp), f32).partition((1, 1, gp))
    first = split(po, pl, q, k_cache, v_cache, lengths, qk_scale, chunk=chunk, bn=tune.bn)
    return first.then(lambda r: merge(out, r[0].unpartition(), r[1].unpartition(),
                                      splits=c.pow2(splits)))


def _check_decode(q, k_cache, v_cache, lengths):
    fn = "decode_attention"
    _check(fn, "q", q, 3, "(B, Hq, D)")
    _check(fn, "k_cache", k_cache, 4, "(B, max_ctx, Hkv, D)")
    _check(fn, "v_cache", v_cache, 4, "(B, max_ctx, Hkv, D)")
    bsz, hq, d = q.shape
    if k_cache.shape[0] != bsz:
        raise ArgumentTypeError(f"q has batch {bsz} but k_cache has {k_cache.shape[0]}",
                                kernel=fn, param="k_cache")
    if tuple(lengths.shape) != (bsz,) or lengths.dtype != fl.i32:
        raise ArgumentTypeError(f"lengths must be a ({bsz},) int32 tensor, got shape "
                                f"{tuple(lengths.shape)} of {lengths.dtype}",
                                kernel=fn, param="lengths")
    return _check_heads(fn, q, k_cache, v_cache, hq, k_cache.shape[2], d)
