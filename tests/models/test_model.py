"""The tiny Llama and Qwen3 models on the cpu backend against the NumPy reference
(tests/models/reference.py, written from transformers' modeling code, not from fearless.nn).

The error bound is derived from the model itself: the reference run once exact (float64) and
once rounding to the model dtype at every step where transformers rounds (``round_to``) shows
how far rounding at those steps moves this model's logits (``emulated``). fearless rounds at the
same steps with the same unit roundoff; only its accumulation order and which way each rounding
goes differ, so its distance from the exact logits is of the same size. The bound is 4x the
emulated distance (two runs of independent rounding errors, maxima over all logits) plus 2 ulps
of the largest logit (the final rounding of each). Greedy tokens are checked step by step against the
exact reference on fearless's own sequence (teacher forcing): a token is right when its exact
logit is within 2 bounds of the best one (fearless's logits are within one bound of the exact
ones, so only then can it win); steps whose top-2 gap exceeds that must match exactly.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("safetensors")

import fearless as fl  # noqa: E402
from fearless.errors import ModelInputError  # noqa: E402
from fearless.models import load  # noqa: E402
from tests.models.checkpoint import tiny_checkpoint  # noqa: E402
from tests.models.reference import Reference  # noqa: E402

SHAPE = (2, 5)  # (batch, tokens) of every call: one set of kernel specialisations to compile
ROUND = {fl.bf16: ml_dtypes.bfloat16, fl.f16: np.float16, fl.f32: np.float32}
EPS = {fl.bf16: 2.0 ** -8, fl.f16: 2.0 ** -11, fl.f32: 2.0 ** -24}


def bound(config, weights, ids, dtype) -> tuple[np.ndarray, float]:
    """(exact logits (B, S, V), the error bound for a model of ``dtype``)."""
    exact = np.stack([Reference(config, weights).logits(s) for s in ids])
    # fearless.nn.attention runs f32 products in TF32 (its docstring): the emulation does too
    emulated = np.stack([Reference(config, weights, ROUND[dtype], dtype is fl.f32).logits(s)
                         for s in ids])
    tol = 4 * np.abs(emulated - exact).max() + 2 * EPS[dtype] * np.abs(exact).max()
    return exact, float(tol)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tiny(request, tmp_path_factory):
    path, config, weights = tiny_checkpoint(tmp_path_factory.mktemp(request.param),
                                            request.param, seed=11)
    return path, config, weights


@pytest.mark.parametrize("dtype", [fl.bf16, fl.f32], ids=["bf16", "f32"])
def test_logits_match_reference(tiny, dtype):
    check_logits(tiny, dtype)


@pytest.mark.parametrize("dtype", [fl.bf16, fl.f32], ids=["bf16", "f32"])
def test_greedy_tokens_match_reference(tiny, dtype):
    check_greedy(tiny, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [fl.bf16, fl.f32], ids=["bf16", "f32"])
def test_logits_match_reference_gpu(tiny, dtype):
    check_logits(tiny, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [fl.bf16, fl.f32], ids=["bf16", "f32"])
def test_greedy_tokens_match_reference_gpu(tiny, dtype):
    check_greedy(tiny, dtype)


def check_logits(tiny, dtype):
    path, config, weights = tiny
    model = load(path, dtype=dtype)
    ids = np.random.default_rng(5).integers(0, config["vocab_size"], SHAPE)
    exact, tol = bound(config, weights, ids, dtype)
    got = model.forward(ids)
    assert got.shape == SHAPE + (config["vocab_size"],) and got.dtype is dtype
    err = np.abs(got.numpy().astype(np.float64) - exact).max()
    assert err <= tol, f"max abs error {err:.3g} > bound {tol:.3g}"
    last = model.forward(ids, last_only=True)
    assert last.shape == (2, config["vocab_size"])
    # another number of rows may take another GEMM path: within the bound, not bit-equal
    err = np.abs(last.numpy().astype(np.float64) - exact[:, -1]).max()
    assert err <= tol, f"last_only: max abs error {err:.3g} > bound {tol:.3g}"


def check_greedy(tiny, dtype):
    path, config, weights = tiny
    model = load(path, dtype=dtype)
    prompt = np.random.default_rng(6).integers(0, config["vocab_size"], SHAPE)
    new = 8
    tokens = model.generate(prompt, new)
    assert tokens.shape == (2, new) and tokens.dtype == np.int32
    seqs = np.concatenate([prompt, tokens], axis=1)
    _, tol = bound(config, weights, seqs, dtype)
    ref = Reference(config, weights)
    decisive = 0
    for b, seq in enumerate(seqs):
        logits = ref.logits(seq)[prompt.shape[1] - 1:-1]  # the logits each new token came from
        for step, (row, token) in enumerate(zip(logits, tokens[b])):
            best = row.max()
            assert row[token] >= best - 2 * tol, \
                f"sequence {b}, step {step}: token {token} is {best - row[token]:.3g} below " \
                f"the best (bound {tol:.3g})"
            decisive += np.sort(row)[-2] < best - 2 * tol
    # f32's bound is ~1e-5 of the logits, so most steps must decide; bf16's is ~10% of their
    # spread, which leaves few decisive steps, but a wrong token still falls far below the best
    if dtype is fl.f32:
        assert decisive >= seqs.shape[0] * new // 2, f"only {decisive} steps decide anything"


def test_generate_again_replays_the_same_tokens(tiny):
    check_replays(tiny)


@pytest.mark.gpu
def test_generate_again_replays_the_same_tokens_gpu(tiny):
    check_replays(tiny)


def check_replays(tiny):
    path, config, _ = tiny
    model = load(path)
    prompt = np.random.default_rng(7).integers(0, config["vocab_size"], SHAPE)
    first = model.generate(prompt, 6)  # step 1 eager (compiles), step 2 captured, replays
    assert model.timing["graph"]
    again = model.generate(prompt, 6)  # the same cache and the same captured step
    np.testing.assert_array_equal(again, first)
    one = model.generate(prompt[1], 6)  # batch 1: its own cache
    np.testing.assert_array_equal(one, first[1:2])
    assert model.timing["decode_tokens"] == 5 and model.timing["prefill_tokens"] == SHAPE[1]


def test_generate_agrees_with_forward(tiny):
    """The decode path (KV cache, decode attention) against the prefill path (forward)."""
    path, config, weights = tiny
    model = load(path, dtype=fl.f32)
    prompt = np.random.default_rng(8).integers(0, config["vocab_size"], (1, SHAPE[1]))
    tokens = model.generate(prompt, SHAPE[1] + 1)
    seq = np.concatenate([prompt, tokens[:, :-1]], axis=1)
    _, tol = bound(config, weights, seq, fl.f32)
    logits = model.forward(seq).numpy()[0, SHAPE[1] - 1:]
    top = np.sort(logits, axis=-1)
    decided = 0
    for row, token, gap in zip(logits, tokens[0], top[:, -1] - top[:, -2]):
        if gap > 2 * tol:  # each path within tol of the exact logits: only then must they agree
            assert token == np.argmax(row)
            decided += 1
    assert decided >= 3


def test_bad_input_is_refused_before_anything_runs(tiny):
    path, config, _ = tiny
    model = load(path)
    vocab, context = config["vocab_size"], config["max_position_embeddings"]
    cases = [
        (lambda: model.forward([[1, vocab]]), rf"ids\[0, 1\] = {vocab} is outside the "
                                              rf"vocabulary \[0, {vocab}\)"),
        (lambda: model.forward([[-1, 2]]), r"ids\[0, 0\] = -1 is outside"),
        (lambda: model.forward([[1, 2], [3]]), "different lengths|expected a non-empty"),
        (lambda: model.forward([[1.5, 2.0]]), "integer token ids"),
        (lambda: model.generate([[1, 2, vocab + 5]], 4), r"prompt_ids\[0, 2\]"),
        (lambda: model.generate([[1] * (context + 1)], 1), "longer than the context"),
        (lambda: model.generate([[1, 2, 3]], context), "KV cache holds"),
        (lambda: model.generate([[1, 2, 3, 4, 5]], 5, max_ctx=8), "KV cache holds 8 tokens"),
        (lambda: model.generate([[1, 2, 3]], 0), "max_new_tokens is 0"),
    ]
    for call, message in cases:
        with pytest.raises(ModelInputError, match=message):
            call()
    assert not model._decoders  # no cache was allocated, nothing ran
    # the largest request the cache takes still runs: prompt 5 + 4 new = 8 rows
    assert model.generate([[1, 2, 3, 4, 5]], 4, max_ctx=8).shape == (1, 4)
