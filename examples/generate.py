"""Serve a model: load a Hugging Face checkpoint directory with ``fearless.models`` and generate.

    python examples/generate.py [PATH]

With a PATH (a Llama or Qwen3 checkpoint: config.json + *.safetensors), that model; without,
a small Qwen3-shaped checkpoint with random weights, written here in the Hugging Face layout
(config.json + model.safetensors through the ``safetensors`` package), so the example runs
anywhere. The check: the decode path (KV cache, one captured step replayed per token) picks the
tokens that one full forward pass over the generated sequence ranks first, except at near-ties,
which it counts (random weights make close calls common).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import fearless as fl

try:
    from examples._common import Result, compiling_ahead, sizes
except ImportError:
    from fearless.examples._common import Result, compiling_ahead, sizes


def random_checkpoint(path: Path, hidden: int, layers: int, vocab: int, seed: int = 0) -> Path:
    """A Qwen3ForCausalLM checkpoint of random bf16 weights in ``path`` (config.json with the
    keys transformers writes, model.safetensors with its tensor names; tied embeddings)."""
    from safetensors.numpy import save_file

    heads, kv_heads, head_dim, inter = hidden // 64, max(hidden // 128, 1), 64, hidden * 3
    config = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=vocab,
                  hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                  hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, attention_bias=False, dtype="bfloat16",
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape, np.float32) * scale).astype(ml_dtypes.bfloat16)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden),
               "model.norm.weight": w(hidden, scale=0.1) + 1}
    for n in range(layers):
        p = f"model.layers.{n}."
        tensors.update({
            p + "input_layernorm.weight": w(hidden, scale=0.1) + 1,
            p + "post_attention_layernorm.weight": w(hidden, scale=0.1) + 1,
            p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": w(head_dim, scale=0.1) + 1,
            p + "self_attn.k_norm.weight": w(head_dim, scale=0.1) + 1,
            p + "mlp.gate_proj.weight": w(inter, hidden),
            p + "mlp.up_proj.weight": w(inter, hidden),
            p + "mlp.down_proj.weight": w(hidden, inter)})
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def run(path: str | None = None, new_tokens: int = 16) -> Result:
    import fearless.models

    with tempfile.TemporaryDirectory() as tmp:
        if path is None:
            path = random_checkpoint(Path(tmp) / "qwen3-random", hidden=sizes(1024, 128),
                                     layers=sizes(8, 2), vocab=sizes(32000, 512))
        t0 = time.perf_counter()
        model = fearless.models.load(path)
    load_ms = (time.perf_counter() - t0) * 1e3
    prompt = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, 8))
    t0 = time.perf_counter()
    model.generate(prompt, 2)                 # compiles every kernel, captures the decode step
    first = (time.perf_counter() - t0) * 1e3
    tokens = model.generate(prompt, new_tokens)
    t = model.timing
    steady = (t["prefill_s"] + t["decode_s"]) * 1e3
    c = model.config
    near = _check(model, prompt, tokens)
    result = Result("generate", fl.current_backend(),
                    f"{c.num_layers} layers x {c.hidden_size}, {new_tokens} tokens", first,
                    steady, _weight_bytes(model), 0.0)
    result.notes.append(f"load {load_ms:.0f} ms; decode "
                        f"{t['decode_tokens'] / max(t['decode_s'], 1e-9):.1f} tokens/s; "
                        f"{near} near-ties")
    return result


def _check(model, prompt: np.ndarray, tokens: np.ndarray) -> float:
    """The decode path's tokens against one forward pass over prompt + tokens. A token may
    differ only where the forward pass's top two logits are within ``tie`` of each other: the
    logits are rounded to bf16 (2^-8 relative) by both paths, whose roundings differ before
    that, so a gap below a few bf16 ulps of the largest logit is a coin toss. Returns the
    number of near-ties."""
    if compiling_ahead():
        return 0
    seq = np.concatenate([prompt, tokens], axis=1)
    logits = model.forward(seq).numpy().astype(np.float64)[0, prompt.shape[1] - 1:-1]
    top2 = np.sort(logits, axis=1)[:, -2:]
    tie = 4 * 2.0 ** -8 * np.abs(logits).max(axis=1)
    near = top2[:, 1] - top2[:, 0] <= tie
    chosen = logits[np.arange(len(logits)), tokens[0]]
    wrong = ~near & (chosen < top2[:, 1])
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        raise AssertionError(f"generate: new token {k} is {tokens[0, k]}, but the forward pass "
                             f"ranks {int(logits[k].argmax())} first by "
                             f"{top2[k, 1] - chosen[k]:.4g} (ties below {tie[k]:.3g})")
    return int(near.sum())


def _weight_bytes(model) -> int:
    c = model.config
    per_layer = (c.hidden_size * (c.q_size + 2 * c.kv_size) + c.q_size * c.hidden_size
                 + 3 * c.hidden_size * c.intermediate_size)
    return (per_layer * c.num_layers + c.vocab_size * c.hidden_size) * model.dtype.bits // 8


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else None))
