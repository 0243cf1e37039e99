"""A NumPy implementation of LlamaForCausalLM and Qwen3ForCausalLM, for the model tests.

Written from transformers' modeling_llama.py / modeling_qwen3.py (and modeling_rope_utils.py's
default and llama3 RoPE), independently of fearless.nn. Arithmetic is float64. With
``round_to`` set (a NumPy dtype: ml_dtypes.bfloat16, float16, float32) the activations are
rounded to it at the steps where transformers rounds a model of that dtype (each torch op on
bf16 tensors rounds its result): the RMSNorm's normalised value and its product with the weight,
every linear (one rounding of an exact sum), the q/k norms, cos/sin, each product and the sum of
RoPE, the attention output, silu(gate) and its product with up, each residual add, the logits.
Comparing the rounded run with the exact one measures how much rounding at those steps moves
this model's logits; the tests bound fearless's error by that. ``tf32_attention`` rounds the
attention's operands (q, k, v and the probabilities) to TF32, as fearless.nn.attention
documents for f32 (its products run on tensor cores).
"""
from __future__ import annotations

import math

import numpy as np


class Reference:
    """The model of a config.json dict and name -> array weights (any float dtype)."""

    def __init__(self, config: dict, weights: dict, round_to=None, tf32_attention=False):
        self.c = config
        self.w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
        if config["tie_word_embeddings"]:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.round_to = None if round_to is None else np.dtype(round_to)
        self.tf32_attention = tf32_attention
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.qk_norm = config["model_type"] == "qwen3"
        self.inv_freq = inv_freq(config, self.head_dim)

    def r(self, x):
        """Round to the model dtype where transformers does (identity when exact)."""
        if self.round_to is None:
            return x
        # ml_dtypes rounds f64 -> bf16 through f32: a rare double rounding, far below the
        # tolerances this reference serves
        return np.asarray(x, np.float64).astype(self.round_to).astype(np.float64)

    def rms_norm(self, x, w):
        # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, .to(dtype), then weight * that
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return self.r(w * self.r(y))

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        return self.r(y)

    def rope(self, x, positions):
        # x (S, H, D); neox layout: rotate_half pairs i with i + D/2
        freqs = np.outer(positions, self.inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = self.r(np.cos(emb))[:, None, :], self.r(np.sin(emb))[:, None, :]
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return self.r(self.r(x * cos) + self.r(rot * sin))

    def attention(self, q, k, v):
        # q (S, Hq, D), k/v (Skv, Hkv, D); causal with the queries at the end of the keys
        s, skv = q.shape[0], k.shape[0]
        group = self.heads // self.kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        t = tf32 if self.tf32_attention else (lambda x: x)
        q, k, v = t(q), t(k), t(v)
        scores = np.einsum("shd,thd->hst", q, k) / math.sqrt(self.head_dim)
        mask = np.arange(skv)[None, :] > np.arange(s)[:, None] + (skv - s)
        scores = np.where(mask[None], -np.inf, scores)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return self.r(np.einsum("hst,thd->shd", t(p), v))

    def logits(self, ids) -> np.ndarray:
        """Logits (S, V) of every position of one sequence ``ids`` (S,), float64."""
        ids = np.asarray(ids)
        s = len(ids)
        positions = np.arange(s)
        h = self.w["model.embed_tokens.weight"][ids]
        for n in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{n}."
            x = self.rms_norm(h, self.w[p + "input_layernorm.weight"])
            q = self.linear(x, p + "self_attn.q_proj").reshape(s, self.heads, self.head_dim)
            k = self.linear(x, p + "self_attn.k_proj").reshape(s, self.kv_heads, self.head_dim)
            v = self.linear(x, p + "self_attn.v_proj").reshape(s, self.kv_heads, self.head_dim)
            if self.qk_norm:
                q = self.rms_norm(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.rms_norm(k, self.w[p + "self_attn.k_norm.weight"])
            q, k = self.rope(q, positions), self.rope(k, positions)
            a = self.attention(q, k, v).reshape(s, -1)
            h = self.r(h + self.linear(a, p + "self_attn.o_proj"))
            x = self.rms_norm(h, self.w[p + "post_attention_layernorm.weight"])
            act = self.r(silu(self.linear(x, p + "mlp.gate_proj")))
            m = self.linear(self.r(act * self.linear(x, p + "mlp.up_proj")), p + "mlp.down_proj")
            h = self.r(h + m)
        h = self.rms_norm(h, self.w["model.norm.weight"])
        return self.linear(h, "lm_head")


def tf32(x):
    """``x`` rounded to TF32 (f32 with 10 significand bits, nearest even): the precision of
    f32 products on tensor cores (finite values only)."""
    bits = np.asarray(x, np.float64).astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) \
        & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


def silu(x):
    return x / (1.0 + np.exp(-x))


def inv_freq(config: dict, head_dim: int) -> np.ndarray:
    """RoPE inverse frequencies (D/2,) as modeling_rope_utils computes them (default, llama3),
    in float64. transformers 4's rope_theta/rope_scaling spelling is read too."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    base = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return base
    assert kind == "llama3", kind
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old = params.get("original_max_position_embeddings", config["max_position_embeddings"])
    wavelen = 2 * math.pi / base
    scaled = np.where(wavelen > old / low, base / factor, base)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled)


def greedy(ref: Reference, prompt, steps: int) -> list[int]:
    """``steps`` greedy tokens after ``prompt`` (recomputing the whole sequence each step)."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(np.argmax(ref.logits(seq)[-1])))
    return seq[len(prompt):]
