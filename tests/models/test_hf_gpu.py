"""fearless.models against Hugging Face transformers on the GPU: a Llama-3-shaped and a
Qwen3-shaped model built with ``AutoModelForCausalLM.from_config`` (fixed seed, bf16), saved
with ``save_pretrained`` and loaded by fearless.

Logits: the last prompt position's logits of fearless (bf16) against transformers run in f32 on
the same bf16 weights ("exact"); the bound is 4x the distance of transformers' own bf16 run from
it plus 2 bf16 ulps of the largest logit (the derivation of tests/models/test_model.py, with
transformers' bf16 run as the emulation). The max absolute and relative errors against the bf16
run are printed (``-s``).

Tokens: 32 greedy tokens. Each fearless token is checked against transformers' bf16 logits on
fearless's own sequence (teacher forcing): its logit must be within 2 (bound + transformers'
bf16 error) of the best. Where every step of transformers' own greedy run has a top-2 gap above
that (no near-tie a bf16 rounding could flip), the 32 tokens must be identical; the number of
identical leading tokens is printed either way.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from fearless.models import load  # noqa: E402

pytestmark = pytest.mark.gpu
NEW = 32

SHAPES = {
    # Llama 3: GQA 4:1, head_dim 128, llama3 RoPE scaling, untied lm_head
    "llama3": lambda: transformers.LlamaConfig(
        vocab_size=32768, hidden_size=1024, intermediate_size=3584, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128,
        max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}),
    # Qwen3: q/k norm, head_dim 128 with hidden 1024 (q_size 2048 != hidden), tied embeddings
    "qwen3": lambda: transformers.Qwen3Config(
        vocab_size=32768, hidden_size=1024, intermediate_size=3072, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def pair(request, tmp_path_factory):
    """(fearless model, transformers bf16 model, transformers f32 model) on the GPU."""
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(SHAPES[request.param](),
                                                       dtype=torch.bfloat16)
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    hf = hf.cuda().eval()
    hf32 = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return request.param, load(path), hf, hf32.cuda().eval()


def _prompt(vocab: int) -> np.ndarray:
    return np.random.default_rng(1).integers(0, vocab, (1, 24))


@torch.no_grad()
def _last_logits(hf, ids: np.ndarray) -> np.ndarray:
    out = hf(torch.as_tensor(ids, device="cuda")).logits[:, -1]
    return out.float().cpu().numpy().astype(np.float64)


def _bound(hf, hf32, ids) -> tuple[np.ndarray, np.ndarray, float]:
    exact, hf16 = _last_logits(hf32, ids), _last_logits(hf, ids)
    tol = 4 * np.abs(hf16 - exact).max() + 2 * 2.0 ** -8 * np.abs(exact).max()
    return exact, hf16, float(tol)


def test_last_logits_match_transformers(pair):
    name, model, hf, hf32 = pair
    ids = _prompt(model.config.vocab_size)
    exact, hf16, tol = _bound(hf, hf32, ids)
    got = model.forward(ids, last_only=True).numpy().astype(np.float64)
    err = np.abs(got - exact).max()
    err16 = np.abs(got - hf16).max()
    print(f"\n{name}: fearless vs transformers bf16: max abs {err16:.4g}, max rel "
          f"{err16 / np.abs(hf16).max():.3g}; vs f32 {err:.4g} (bound {tol:.4g}; "
          f"transformers bf16 vs f32 {np.abs(hf16 - exact).max():.4g})")
    assert err <= tol


@torch.no_grad()
def _hf_greedy(hf, ids: np.ndarray, steps: int) -> tuple[list[int], list[float]]:
    """transformers' greedy tokens (its KV cache, eager loop) and each step's top-2 gap."""
    out = hf(torch.as_tensor(ids, device="cuda"), use_cache=True)
    tokens, gaps = [], []
    for _ in range(steps):
        logits = out.logits[0, -1].float()
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        tokens.append(int(torch.argmax(logits)))
        out = hf(torch.tensor([[tokens[-1]]], device="cuda"),
                 past_key_values=out.past_key_values, use_cache=True)
    return tokens, gaps


@torch.no_grad()
def test_greedy_tokens_match_transformers(pair):
    name, model, hf, hf32 = pair
    ids = _prompt(model.config.vocab_size)
    exact, hf16, tol = _bound(hf, hf32, ids)
    # fearless within tol of exact, transformers' bf16 within e16 of it: a token fearless
    # picks is at most 2 (tol + e16) below transformers' best
    slack = 2 * (tol + np.abs(hf16 - exact).max())
    ours = model.generate(ids, NEW)[0].tolist()
    theirs, gaps = _hf_greedy(hf, ids, NEW)
    same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), NEW)
    print(f"\n{name}: {same} of {NEW} greedy tokens identical; decode "
          f"{model.timing['decode_tokens'] / model.timing['decode_s']:.1f} tokens/s (first "
          f"call, compiles included)")
    seq = torch.as_tensor(np.concatenate([ids[0], ours[:-1]])[None], device="cuda")
    logits = hf(seq).logits[0, ids.shape[1] - 1:].float().cpu().numpy()
    for step, (row, token) in enumerate(zip(logits, ours)):
        assert row[token] >= row.max() - slack, \
            f"step {step}: token {token} is {row.max() - row[token]:.3g} below the best"
    if min(gaps) > slack:
        assert ours == theirs
