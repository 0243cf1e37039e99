"""fearless.nn.attention against float64 NumPy: prefill (causal or not, GQA, ragged lengths) and
split-K decode over a KV cache with per-sequence lengths; bad input; the GPU with torch tensors.

Error bound (per output element, inputs already rounded to their dtype so the reference sees
the same values): with P the exact softmax and u the unit roundoff of the input dtype (2^-11
f16, 2^-8 bf16; f32 runs its products in TF32 on the GPU, also 2^-11),
- each probability is rounded to the input dtype before P @ V while the row sum is not:
  u * (P |V|);
- the scores carry the f32 accumulation error over D terms (plus TF32 rounding of q and k for
  f32 inputs), e <= (2 u_mul + D 2^-24) (|q| |k|^T) scale per score; a score error e moves the
  softmax weights by a relative 2 max e to first order: 2 max_row(e) * (P |V|);
- the f32 sums over Skv keys and the exp2/rescale roundings: (Skv + 8) 2^-24 * (P |V|);
- the final rounding to the input dtype: u |out|.
Doubled for second-order terms. Split-K decode adds one f32 merge: (splits + 4) 2^-24 (P |V|).
"""
from __future__ import annotations

import dataclasses
import importlib
import math

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32
from fearless.errors import ArgumentTypeError
from fearless.kernel import base
from fearless.nn import attention, decode_attention

A = importlib.import_module("fearless.nn.attention")
UNIT = {f16: 2.0 ** -11, bf16: 2.0 ** -8, f32: 2.0 ** -11}


@pytest.fixture
def small_tiles(monkeypatch):
    """Small tiles, so short sequences still span several query and key blocks on the CPU."""
    for d in A.HEAD_DIMS:
        # both exp2 forms: flushed (D 64) and not (D 128)
        monkeypatch.setitem(A.PREFILL, d, A.PrefillTuning(bm=16, bn=16, ftz=d == 64))
        monkeypatch.setitem(A.DECODE, d, A.DecodeTuning(bn=16))


def rand(shape, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape, np.float32)
    return fl.asarray(x).numpy() if dtype is f32 else _round(x, dtype)


def _round(x, dtype):
    return np.asarray(fl.asarray(x, dtype).numpy())


def _f64(x):
    return np.asarray(fl.asarray(x).numpy() if not isinstance(x, np.ndarray) else x,
                      np.float64)


def reference(q, k, v, causal, scale=None, lengths=None):
    """float64 attention with (out, bound numerator terms): out (B, S, Hq, D), pv = P |V|,
    qk = max over visible keys of |q| |k| scale per query row (B, S, Hq, 1)."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    _, s, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    k, v = np.repeat(k, hq // hkv, axis=2), np.repeat(v, hq // hkv, axis=2)
    sc = np.einsum("bshd,bthd->bhst", q, k) * scale
    mag = np.einsum("bshd,bthd->bhst", np.abs(q), np.abs(k)) * scale
    visible = np.ones((q.shape[0], 1, s, skv), bool)
    if causal:
        visible &= np.arange(skv)[None, :] <= np.arange(s)[:, None] + (skv - s)
    if lengths is not None:
        visible &= np.arange(skv)[None, None, None, :] < np.asarray(lengths)[:, None, None, None]
    sc = np.where(visible, sc, -np.inf)
    top = sc.max(-1, keepdims=True)
    p = np.exp(sc - np.where(np.isfinite(top), top, 0))
    total = p.sum(-1, keepdims=True)
    p = p / np.where(total == 0, 1, total)
    out = np.einsum("bhst,bthd->bshd", p, v)
    pv = np.einsum("bhst,bthd->bshd", p, np.abs(v))
    qk = np.where(visible, mag, 0).max(-1, keepdims=True).transpose(0, 2, 1, 3)
    return out, pv, qk


def check(got, q, k, v, dtype, causal, scale=None, lengths=None, merge_terms=0):
    want, pv, qk = reference(q, k, v, causal, scale, lengths)
    if got.ndim == 3:                       # decode: (B, Hq, D) against S = 1
        want, pv, qk = want[:, 0], pv[:, 0], qk[:, 0]
    u, d, skv = UNIT[dtype], q.shape[-1], k.shape[1]
    u_mul = 2.0 ** -11 if dtype is f32 else 0.0
    bound = 2 * (pv * (u + 2 * (2 * u_mul + d * 2.0 ** -24) * qk
                       + (skv + 8 + merge_terms) * 2.0 ** -24) + u * np.abs(want))
    got = _f64(got)
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    err = np.abs(got - want)
    assert (err <= bound).all(), f"max error {err.max():.3g}, worst ratio {(err / bound).max():.3g}"


@pytest.mark.parametrize("dtype", [f16, bf16, f32])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_matches_float64(small_tiles, dtype, d, causal):
    # S and Skv not multiples of the tile; GQA with a group of 3
    b, s, hq, hkv = 2, 37, 6, 2
    q, k, v = (rand((b, s, h, d), dtype, seed) for h, seed in ((hq, 1), (hkv, 2), (hkv, 3)))
    got = attention(fl.asarray(q), fl.asarray(k), fl.asarray(v), causal=causal).numpy()
    check(got, q, k, v, dtype, causal)


@pytest.mark.parametrize("s, skv", [(20, 53), (40, 17), (1, 33)])
def test_prefill_causal_with_other_key_counts(small_tiles, s, skv):
    # Skv > S: the queries are the last S positions; Skv < S: the first S - Skv queries see no
    # key and give 0
    q, k, v = rand((1, s, 4, 64), f16, 4), rand((1, skv, 1, 64), f16, 5), rand((1, skv, 1, 64),
                                                                            f16, 6)
    got = attention(q, k, v).numpy()
    check(got, q, k, v, f16, True)
    if skv < s:
        assert (got[:, :s - skv] == 0).all()


def test_prefill_default_tiles_strided_views_and_scale():
    # the default tiles (one block of 128 queries), q, k, v as views of one fused projection
    # output (T, (Hq + 2 Hkv) D), and a given scale
    b, s, hq, hkv, d = 1, 150, 4, 2, 64
    qkv = rand((b, s, hq + 2 * hkv, d), bf16, 7)
    t = fl.asarray(qkv)
    q, k, v = t[:, :, :hq], t[:, :, hq:hq + hkv], t[:, :, hq + hkv:]
    got = attention(q, k, v, causal=True, scale=0.3).numpy()
    check(got, qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:], bf16, True, 0.3)


def test_prefill_through_the_tuner_once_per_bucket(tune, monkeypatch):
    """On the GPU (here the cpu backend made to tune): the prefill's tiles come from
    ft.autotune, once per bucket of lengths (S 150 and 200 share one, 300 is the next), right
    every time; the output's coverage is read from the kernel's IR, never run to check."""
    fake, timed = tune
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, nn_autotune=True))
    tuned = A._prefill_tuned(64, A.PREFILL[64], "f16")
    configs = tuned.configs
    monkeypatch.setattr(importlib.import_module("fearless.autotuning.tuner"), "covers",
                        lambda *a: pytest.fail("a coverage run"))
    fake.times = [float(len(configs) - n) for n in range(len(configs))] * 2
    for s in (150, 200, 300):
        q, k, v = (rand((1, s, h, 64), f16, s + h) for h in (4, 2, 2))
        check(attention(q, k, v, causal=True).numpy(), q, k, v, f16, True)
    assert len(timed) == 2 * len(configs)
    assert configs[0].tile == (1, A.PREFILL[64].bm, 64) and configs[0].consts["bn"] == 64


@pytest.mark.parametrize("dtype, units", [("bf16", 12), ("f16", 20.48), ("f32", 12)])
def test_tuned_configs_agree_within_the_rounding_of_p(dtype, units):
    """The prefill's configs are compared within 12 units of P's rounding (bf16 2^-8, f16 and
    TF32 2^-11), f16 keeping the tuner's default 1e-2: two correct bf16 configs differed by 8
    units on the H200, while a config 10% off is refused."""
    tuned = A._prefill_tuned(64, A.PREFILL[64], dtype)
    unit = A._P_UNIT[dtype]
    assert tuned.rtol == pytest.approx(units * unit)
    agreement = importlib.import_module("fearless.autotuning.agreement")
    ref = np.random.default_rng(3).standard_normal(4096) * 0.04
    assert agreement.differs({"o": ref * (1 + 8 * unit)}, {"o": ref}, tuned.rtol) is None
    assert agreement.differs({"o": ref * 1.1}, {"o": ref}, tuned.rtol) is not None


def test_prefill_output_is_fresh_and_poison_free(small_tiles):
    q = rand((1, 5, 2, 64), f16, 8)
    a = attention(q, q, q).numpy()
    b = attention(q, q, q).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float16 and a.shape == (1, 5, 2, 64)


@pytest.mark.parametrize("dtype", [f16, bf16])
@pytest.mark.parametrize("hq, hkv", [(8, 2), (6, 2), (4, 4)])
def test_decode_matches_float64(small_tiles, dtype, hq, hkv):
    # lengths differ per sequence and are not multiples of the chunk; 0 gives 0; a length past
    # max_ctx counts as max_ctx
    b, ctx, d = 5, 150, 128
    q = rand((b, hq, d), dtype, 10)
    kc, vc = rand((b, ctx, hkv, d), dtype, 11), rand((b, ctx, hkv, d), dtype, 12)
    lengths = np.array([1, 150, 77, 0, 400], np.int32)
    got = decode_attention(q, kc, vc, fl.asarray(lengths)).numpy()
    splits = -(-ctx // A.decode_chunk(b, hkv, ctx, 16, A.DECODE[d].waves))
    check(got, q[:, None], kc, vc, dtype, False, lengths=np.minimum(lengths, ctx),
          merge_terms=splits)
    assert (got[3] == 0).all()


def test_decode_occupancy_follows_the_sequence_heads(monkeypatch):
    """``DecodeTuning.occupancy`` below ``many`` sequence-heads (batch x kv heads), else
    ``many_occupancy``: the hint the split kernel is built with."""
    built = []
    real = A._decode_kernels
    monkeypatch.setattr(A, "_decode_kernels", lambda occ, kl, vl: built.append(occ) or
                        real(occ, kl, vl))
    monkeypatch.setitem(A.DECODE, 64, A.DecodeTuning(bn=16, many=8))
    kc = rand((4, 40, 2, 64), f16, 19)
    for b in (2, 3, 4):   # 4, 6, 8 sequence-heads
        got = decode_attention(rand((b, 4, 64), f16, 20), kc[:b], kc[:b],
                               np.full(b, 40, np.int32)).numpy()
        assert np.isfinite(got).all()
    assert built == [None, None, 2]


def test_decode_chunks_cover_the_cache(monkeypatch, small_tiles):
    # many splits (one block of 16 rows each) against one: the same values within the bound
    monkeypatch.setattr(A.fl, "multiprocessor_count", lambda: 64)
    assert A.decode_chunk(1, 2, 150, 16, 2) == 16
    q, kc, vc = rand((1, 4, 64), f16, 13), rand((1, 150, 2, 64), f16, 14), rand(
        (1, 150, 2, 64), f16, 15)
    lengths = np.array([131], np.int32)
    got = decode_attention(q, kc, vc, lengths).numpy()
    check(got, q[:, None], kc, vc, f16, False, lengths=lengths, merge_terms=10)


@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_decode_graph_serves_every_length(small_tiles, where):
    # captured once, replayed after the lengths changed in place (the decode loop of a model)
    q, kc, vc = rand((2, 4, 64), f16, 16), rand((2, 100, 2, 64), f16, 17), rand(
        (2, 100, 2, 64), f16, 18)
    if where == "cpu":
        lengths = fl.asarray(np.array([3, 50], np.int32))
        host = lengths.host_view()
    else:
        torch = _torch()
        host = torch.tensor([3, 50], dtype=torch.int32, device="cuda")
        lengths = fl.asarray(host)
    out = fl.full((2, 4, 64), np.nan, f16).partition((1, 1, 64))
    graph = fl.graph(A.decode_attention_op(out, fl.asarray(q), fl.asarray(kc),
                                           fl.asarray(vc), lengths))
    for now in ([3, 50], [100, 7], [64, 1]):
        host[0], host[1] = now
        graph.sync()
    out = graph.release()[0].unpartition()
    check(out.numpy(), q[:, None], kc, vc, f16, False, lengths=np.array([64, 1]),
          merge_terms=16)


def test_decode_split_count_ignores_the_lengths(monkeypatch):
    monkeypatch.setattr(A.fl, "multiprocessor_count", lambda: 132)
    # batch 1, 8 kv heads: 33 splits of a 8192-row cache fill 2 waves of 132 SMs
    chunk = A.decode_chunk(1, 8, 8192, 64, 2)
    assert chunk % 64 == 0 and -(-8192 // chunk) * 8 >= 132
    # batch 16: 128 blocks per split already, so 3 splits (384 blocks) reach 2 waves
    assert A.decode_chunk(16, 8, 8192, 64, 2) == 2752


def _bad(fn, *args, match):
    with pytest.raises(ArgumentTypeError, match=match):
        fn(*args)


def test_bad_input_is_refused():
    q, k = rand((1, 4, 6, 64), f16, 20), rand((1, 4, 4, 64), f16, 21)
    _bad(attention, q, k, k, match="4 kv heads do not divide 6 query heads")
    _bad(attention, q, rand((1, 4, 2, 128), f16, 22), rand((1, 4, 2, 128), f16, 22),
         match="q has head dim 64 but k and v have 128")
    _bad(attention, q[0], k, k, match="q must have rank 4")
    q96 = rand((1, 4, 2, 96), f16, 23)
    _bad(attention, q96, q96, q96, match="head dim 96 is not supported")
    _bad(attention, q, rand((1, 4, 2, 64), bf16, 24), rand((1, 4, 2, 64), bf16, 24),
         match="one dtype")
    _bad(attention, q, k[:, :, :2], k[:, :3, :2], match="k and v must have one shape")
    qd, kc = rand((2, 4, 64), f16, 25), rand((2, 16, 2, 64), f16, 26)
    _bad(decode_attention, qd, kc, kc, np.array([1, 2], np.int64),
         match=r"lengths must be a \(2,\) int32 tensor")
    _bad(decode_attention, qd, kc, kc, np.array([1], np.int32), match="lengths must be")
    _bad(decode_attention, qd[None], kc, kc, np.array([1, 2], np.int32),
         match="q must have rank 3")
    with pytest.raises(ArgumentTypeError) as info:
        decode_attention(rand((2, 3, 64), f16, 27), kc, kc, np.array([1, 2], np.int32))
    assert "kernel 'decode_attention', parameter 'k_cache'" in str(info.value)


# -- GPU: torch tensors in, torch tensors out, against float64 NumPy and torch SDPA --------------

def _torch():
    return pytest.importorskip("torch")


def _poison_pool(torch, nbytes: int):
    """Leave a NaN-filled block of ``nbytes`` in torch's caching allocator, freed at once: the
    output the function allocates next with that size reuses it, so an element it does not
    write stays NaN (``check`` asserts every element finite)."""
    torch.full((nbytes // 2,), float("nan"), dtype=torch.float16, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_prefill_torch(dtype, d, causal, monkeypatch):
    """The measured tiles (``PREFILL``), as FEARLESS_NN_AUTOTUNE=0 runs them."""
    torch = _torch()
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, nn_autotune=False))
    tdt = getattr(torch, dtype)
    b, s, hq, hkv = 2, 1000, 8, 2
    g = torch.Generator(device="cuda").manual_seed(30)
    qkv = torch.randn((b * s, (hq + 2 * hkv) * d), generator=g, device="cuda", dtype=tdt)
    view = qkv.view(b, s, hq + 2 * hkv, d)
    q, k, v = view[:, :, :hq], view[:, :, hq:hq + hkv], view[:, :, hq + hkv:]
    _poison_pool(torch, b * s * hq * d * 2)
    got = attention(q, k, v, causal=causal)
    assert isinstance(got, torch.Tensor) and got.shape == (b, s, hq, d) and got.dtype == tdt
    fdt = {"float16": f16, "bfloat16": bf16}[dtype]
    host = [x.float().cpu().numpy() for x in (q, k, v)]
    check(got.float().cpu().numpy(), *host, fdt, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_gpu_prefill_tuned(monkeypatch, causal, dtype):
    """The default on the GPU: the tuner's winner (its configs agreeing with each other
    within the rounding of P, each one's coverage checked) right against float64, at two
    lengths of one bucket and at a long one (S 4096, where the configs' roundings differ the
    most: the tuner's bf16 default refused two correct configs there)."""
    torch = _torch()
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, nn_autotune=True))
    hq, hkv, d = 8, 2, 128
    fdt = {"float16": f16, "bfloat16": bf16, "float32": f32}[dtype]
    for s in (700, 1000, 4096):
        g = torch.Generator(device="cuda").manual_seed(32 + s)
        q, k, v = (torch.randn((1, s, h, d), generator=g, device="cuda",
                               dtype=getattr(torch, dtype)) for h in (hq, hkv, hkv))
        _poison_pool(torch, s * hq * d * fdt.itemsize)
        got = attention(q, k, v, causal=causal)
        host = [x.float().cpu().numpy() for x in (q, k, v)]
        check(got.float().cpu().numpy(), *host, fdt, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("b, hq, hkv, d", [(3, 16, 8, 128), (3, 32, 8, 128), (3, 28, 4, 64),
                                           (16, 16, 8, 128)])   # 128 sequence-heads: many
def test_gpu_decode_torch(b, hq, hkv, d):
    torch = _torch()
    ctx = 3000
    g = torch.Generator(device="cuda").manual_seed(31)
    q = torch.randn((b, hq, d), generator=g, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn((b, ctx, hkv, d), generator=g, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn((b, ctx, hkv, d), generator=g, device="cuda", dtype=torch.bfloat16)
    lengths = torch.tensor(([1, 2049, 3000] * 6)[:b], device="cuda", dtype=torch.int32)
    _poison_pool(torch, b * hq * d * 2)
    got = decode_attention(q, kc, vc, lengths)
    assert isinstance(got, torch.Tensor) and got.shape == (b, hq, d)
    host = [x.float().cpu().numpy() for x in (q, kc, vc)]
    check(got.float().cpu().numpy(), host[0][:, None], host[1], host[2], bf16, False,
          lengths=lengths.cpu().numpy(), merge_terms=256)
