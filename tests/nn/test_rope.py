"""fearless.nn.rope against a float64 NumPy emulation of HF's apply_rotary_pos_emb rounding
steps, and rope_tables against HF's inverse-frequency formulas (default and llama3)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fearless import dtypes, nn
from fearless.errors import ArgumentTypeError, ContractError
from fearless.nn.rope import inv_freq
from tests.nn._ref import call, cases, f64, host, rand, rnd, tiny, unit
from tests.support import BACKENDS

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def reference(x, cos, sin, pos, dt, interleaved):
    """HF: ``x * c + rotate(x) * s`` with c, s rounded to the dtype, each product and the sum
    rounded (emulated from float64, where 16-bit and f32 products and sums are exact)."""
    c, s = f64(rnd(cos[pos], dt))[:, None, :], f64(rnd(sin[pos], dt))[:, None, :]
    x = f64(x)
    if interleaved:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
        rot = np.empty_like(x)
        rot[..., 0::2], rot[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    else:
        c, s = np.concatenate([c, c], -1), np.concatenate([s, s], -1)
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return f64(rnd(f64(rnd(x * c, dt)) + f64(rnd(rot * s, dt)), dt))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt,interleaved,hq,hkv,d", cases(
    [(False, 4, 2, 64), (True, 4, 2, 64)], [(False, 6, 1, 128), (True, 3, 3, 48)]))
def test_rope_follows_hf_steps(backend, dt, interleaved, hq, hkv, d):
    t, max_pos = 5, 300
    cos, sin = nn.rope_tables(d, max_pos, 10000.0)
    q, k = rand(dt, (t, hq, d), 1, 2.0), rand(dt, (t, hkv, d), 2, 2.0)
    pos = np.array([0, 1, 299, 17, 5], np.int32)
    qo, ko = call(nn.rope, q, k, cos, sin, pos, interleaved=interleaved)
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype is dt
    c, s = cos.numpy(), sin.numpy()
    same(backend, dt, host(qo), reference(q, c, s, pos, dt, interleaved))
    same(backend, dt, host(ko), reference(k, c, s, pos, dt, interleaved))


def same(backend, dt, got, want):
    """Bit for bit on the cpu backend (the reference semantics); on the GPU tileiras may fuse
    ``x * c - rot * s`` into one fma, which skips a rounding: within one rounding of the sum
    (2 u relative), rarely differing."""
    if backend == "cpu":
        np.testing.assert_array_equal(f64(got), want)
    else:
        np.testing.assert_allclose(f64(got), want, rtol=2 * unit(dt), atol=2 * tiny(dt))
        assert np.mean(f64(got) != want) < 0.02


def test_rope_of_strided_views_and_int64_positions():
    """q and k as column views of one fused qkv projection output (T, (Hq + 2 Hkv) D)."""
    dt, t, hq, hkv, d = dtypes.bf16, 4, 4, 2, 64
    qkv = rand(dt, (t, (hq + 2 * hkv) * d), 3)
    q = qkv[:, :hq * d].reshape(t, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(t, hkv, d)
    cos, sin = nn.rope_tables(d, 64, 500000.0, LLAMA3)
    pos = np.array([3, 63, 0, 8], np.int64)
    qo, ko = call(nn.rope, q, k, cos, sin, pos)
    c, s = cos.numpy(), sin.numpy()
    np.testing.assert_array_equal(f64(host(qo)), reference(q, c, s, pos, dt, False))
    np.testing.assert_array_equal(f64(host(ko)), reference(k, c, s, pos, dt, False))


def test_position_outside_the_tables_gives_nan():
    cos, sin = nn.rope_tables(64, 8, 10000.0)
    q = rand(dtypes.f32, (2, 1, 64), 4)
    qo, ko = call(nn.rope, q, q, cos, sin, np.array([8, 1], np.int32))
    got = host(qo)
    assert np.isnan(got[0]).all() and not np.isnan(got[1]).any()


@pytest.mark.parametrize("d,theta", [(64, 10000.0), (128, 500000.0), (128, 1000000.0)])
def test_default_inverse_frequencies(d, theta):
    got = inv_freq(d, theta)
    want = 1.0 / theta ** (np.arange(0, d, 2) / d)
    # f32 steps: i / d, pow (amplifies the exponent's error by ln(theta) <= 14), 1 / p
    np.testing.assert_allclose(f64(got), want, rtol=(2 + 14) * 2.0 ** -24, atol=0)


def test_llama3_bands():
    """Wavelengths above old / low_freq_factor: divided by factor; below old /
    high_freq_factor: unchanged; between: the smooth interpolation (float64 formula)."""
    d, theta = 128, 500000.0
    base = f64(inv_freq(d, theta))
    got = f64(inv_freq(d, theta, LLAMA3))
    wavelen = 2 * math.pi / base
    low, high = 8192 / 1.0, 8192 / 4.0
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    want = np.where(wavelen < high, base, np.where(wavelen > low, base / 8.0,
                                                   (1 - smooth) * base / 8.0 + smooth * base))
    assert (wavelen < high).any() and (wavelen > low).any() and \
        ((wavelen >= high) & (wavelen <= low)).any()           # every band is tested
    np.testing.assert_allclose(got, want, rtol=16 * 2.0 ** -24, atol=0)


def test_tables_are_cos_and_sin_of_the_f32_angles():
    cos, sin = nn.rope_tables(128, 5000, 500000.0, LLAMA3)
    angle = f64(np.arange(5000, dtype=np.float32)[:, None] * inv_freq(128, 500000.0, LLAMA3))
    assert cos.shape == (5000, 64) and cos.dtype is dtypes.f32
    np.testing.assert_allclose(f64(cos.numpy()), np.cos(angle), rtol=0, atol=2.0 ** -25)
    np.testing.assert_allclose(f64(sin.numpy()), np.sin(angle), rtol=0, atol=2.0 ** -25)


def test_bad_input():
    cos, sin = nn.rope_tables(64, 8, 10000.0)
    q = rand(dtypes.bf16, (2, 4, 64), 1)
    pos = np.zeros(2, np.int32)
    with pytest.raises(ArgumentTypeError, match="kernel 'rope', parameter 'q'"):
        nn.rope(q[0], q, cos, sin, pos)
    with pytest.raises(ArgumentTypeError, match="kernel 'rope', parameter 'k'.*differs"):
        nn.rope(q, q.astype(np.float32), cos, sin, pos)
    with pytest.raises(ContractError, match="kernel 'rope', parameter 'k'"):
        nn.rope(q, q[:1], cos, sin, pos)
    with pytest.raises(ContractError, match="kernel 'rope', parameter 'cos'"):
        nn.rope(q, q, cos[:, :16], sin, pos)
    with pytest.raises(ContractError, match="kernel 'rope', parameter 'positions'"):
        nn.rope(q, q, cos, sin, np.zeros(3, np.int32))
    with pytest.raises(ArgumentTypeError, match="kernel 'rope', parameter 'positions'"):
        nn.rope(q, q, cos, sin, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="'yarn' is not supported"):
        nn.rope_tables(64, 8, 10000.0, {"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="needs the key 'low_freq_factor'"):
        nn.rope_tables(64, 8, 10000.0, {"rope_type": "llama3", "factor": 8.0})


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", [None, LLAMA3], ids=["default", "llama3"])
def test_against_transformers(scaling):
    """HF's own rotary embedding and apply_rotary_pos_emb (bf16) against rope_tables + rope."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig
    d, hq, hkv, t = 128, 8, 2, 40
    config = LlamaConfig(hidden_size=d * hq, num_attention_heads=hq, num_key_value_heads=hkv,
                         head_dim=d, max_position_embeddings=16384, rope_theta=500000.0,
                         rope_scaling=scaling)
    emb = llama.LlamaRotaryEmbedding(config=config).to("cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(t, hq, d, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(t, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
    pos = torch.randint(0, 16384, (t,), device="cuda", generator=g, dtype=torch.int32)
    cos_hf, sin_hf = emb(q, pos.long()[None])
    q_hf, k_hf = llama.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                            cos_hf, sin_hf)
    cos, sin = nn.rope_tables(d, 16384, 500000.0, scaling)
    qo, ko = nn.rope(q, k, torch.from_dlpack(cos), torch.from_dlpack(sin), pos)
    # cos/sin: torch's f32 cos on the GPU is within 2 ulp, pow within 1: bf16 values may
    # differ by one ulp where the f32 value is near a bf16 rounding boundary (rare)
    for got, want in ((qo, q_hf[0].transpose(0, 1)), (ko, k_hf[0].transpose(0, 1))):
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=2 ** -7)
        assert (got != want).float().mean() < 0.01


def test_decode_tokens_split_their_heads_into_groups_of_one_grid():
    # a decode step (few tokens) spreads a token's heads over 4 or 2 blocks, q's and k's
    # tiles giving the same grid; prefill (many tokens) keeps one block per token
    from fearless.nn.rope import token_tiles
    assert token_tiles((1, 16, 128), (1, 8, 128), 132) == ((1, 4, 128), (1, 2, 128))
    assert token_tiles((16, 32, 128), (16, 8, 128), 132) == ((1, 8, 128), (1, 2, 128))
    assert token_tiles((1, 12, 64), (1, 4, 64), 132) == ((1, 8, 64), (1, 2, 64))  # 2 groups
    assert token_tiles((1, 16, 128), (1, 1, 128), 132) == ((1, 16, 128), (1, 1, 128))
    assert token_tiles((2048, 16, 128), (2048, 8, 128), 132) == ((1, 16, 128), (1, 8, 128))
