"""Every fearless.nn kernel of this package compiles for sm_80 and sm_90 at the tile shapes that
real models pick (Llama-3.1-8B: hidden 4096, 32 q heads, 8 kv heads, head 128, intermediate
14336; a 4096-row KV cache; prefill 64 tokens, decode 1): tileiras accepts them. Nothing runs."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import dtypes, nn
from fearless.backends.tileir import tileiras
from fearless.runtime import ahead
from tests.nn._ref import CROSS_ARCHS, rand

pytestmark = pytest.mark.skipif(tileiras.find() is None, reason="tileiras is not installed")

BF16 = dtypes.bf16
HIDDEN, HQ, HKV, D, INTER, CTX = 4096, 32, 8, 128, 14336, 4096


@pytest.mark.parametrize("t", [1, 64], ids=["decode", "prefill"])
def test_llama_8b_shapes_compile(t):
    x, w = rand(BF16, (t, HIDDEN), 1), rand(BF16, (HIDDEN,), 2)
    q, k = rand(BF16, (t, HQ, D), 3), rand(BF16, (t, HKV, D), 4)
    cos, sin = nn.rope_tables(D, CTX, 500000.0)
    pos = np.arange(t, dtype=np.int32)
    cache = np.zeros((1, CTX, HKV, D), BF16.numpy)
    gate = rand(BF16, (t, INTER), 5)
    with ahead.compile_only(CROSS_ARCHS) as made:
        nn.rms_norm(x, w, 1e-5)
        nn.rms_norm(x, w, 1e-5, residual=x)
        nn.rms_norm(q, w[:D], 1e-6)                      # Qwen3's per-head norm
        nn.rope(q, k, cos, sin, pos)
        nn.kv_cache_write(cache, cache.copy(), k[None], k[None], np.zeros(1, np.int32))
        nn.silu_mul(gate, gate)
        nn.add(x, x)
        nn.embedding(pos, x)
        nn.argmax(rand(BF16, (t, 128256), 6))         # the vocabulary: parts and a merge
    names = {m[0].name for m in made}
    assert names == {"rms_norm_rows", "add_rms_norm_rows", "rms_norm_heads", "rope_tokens", "kv_write_rows",
                     "silu_mul_tiles", "add_tiles", "embedding_rows", "argmax_parts",
                     "argmax_merge"}
    assert {m[3] for m in made} == set(CROSS_ARCHS)
