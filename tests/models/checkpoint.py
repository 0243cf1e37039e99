"""Tiny Hugging Face checkpoints for the tests, written without torch or transformers.

The layout is what ``save_pretrained`` writes for LlamaForCausalLM and Qwen3ForCausalLM
(transformers 5): ``config.json`` with the config classes' keys (configuration_llama.py,
configuration_qwen3.py; transformers 5 spells RoPE as ``rope_parameters``, ``legacy_rope=True``
writes the older ``rope_theta`` + ``rope_scaling``), and the tensors in ``model.safetensors`` or,
with ``shards > 1``, in ``model-0000k-of-0000n.safetensors`` listed by
``model.safetensors.index.json``. Tied checkpoints leave ``lm_head.weight`` out, as
``save_pretrained`` does. The safetensors files are written here byte by byte (an 8-byte
little-endian header length, the JSON header, the data), independently of the reader the
loader uses, so the tests can also damage them on purpose.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

CODES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
         np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.int64): "I64"}
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def tiny_config(family: str, **over) -> dict:
    """A 2-layer, hidden-64 config of ``family`` ("llama": Llama-3-shaped with llama3 RoPE
    scaling; "qwen3": q/k norm, tied embeddings), as config.json holds it. 4 query and 2 kv
    heads of head_dim 64 (fearless.nn's attention takes 64 and 128; transformers 5 writes
    head_dim for both families, and heads * head_dim need not equal hidden_size)."""
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                  max_position_embeddings=128, initializer_range=0.02, rms_norm_eps=1e-5,
                  use_cache=True, attention_bias=False, attention_dropout=0.0,
                  pad_token_id=None, bos_token_id=1, eos_token_id=2, dtype="bfloat16",
                  transformers_version="5.17.0")
    if family == "llama":
        cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", head_dim=64,
                   mlp_bias=False, pretraining_tp=1, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                    "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 32})
    elif family == "qwen3":
        cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=64,
                   tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
                   max_window_layers=2, layer_types=["full_attention"] * 2,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    else:
        raise ValueError(family)
    common.update(cfg)
    common.update(over)
    return common


def legacy_rope(config: dict) -> dict:
    """``config`` with RoPE spelled as transformers 4 wrote it (rope_theta, rope_scaling)."""
    out = dict(config)
    params = dict(out.pop("rope_parameters"))
    out["rope_theta"] = params.pop("rope_theta")
    kind = params.pop("rope_type")
    out["rope_scaling"] = None if kind == "default" else {"rope_type": kind, **params}
    out["torch_dtype"] = out.pop("dtype")
    return out


def random_weights(config: dict, rng: np.random.Generator, dtype=ml_dtypes.bfloat16) -> dict:
    """name -> array for every tensor of ``config``'s model (normal, std 0.02 * a per-tensor
    factor that keeps a tiny random model's logits away from all-equal; norms near 1)."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    d = config.get("head_dim") or h // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    qwen = config["model_type"] == "qwen3"

    def normal(*shape, std=0.25):
        return (rng.standard_normal(shape) * std).astype(dtype)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(dtype)

    w = {"model.embed_tokens.weight": normal(v, h, std=1.0), "model.norm.weight": norm(h)}
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = normal(v, h, std=0.5)
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        w.update({p + "input_layernorm.weight": norm(h),
                  p + "post_attention_layernorm.weight": norm(h),
                  p + "self_attn.q_proj.weight": normal(q, h),
                  p + "self_attn.k_proj.weight": normal(kv, h),
                  p + "self_attn.v_proj.weight": normal(kv, h),
                  p + "self_attn.o_proj.weight": normal(h, q),
                  p + "mlp.gate_proj.weight": normal(i, h),
                  p + "mlp.up_proj.weight": normal(i, h),
                  p + "mlp.down_proj.weight": normal(h, i, std=0.15)})
        if config.get("attention_bias"):
            w.update({p + f"self_attn.{x}_proj.bias": normal(m, std=0.1)
                      for x, m in (("q", q), ("k", kv), ("v", kv), ("o", h))})
        if config.get("mlp_bias"):
            w.update({p + f"mlp.{x}_proj.bias": normal(m, std=0.1)
                      for x, m in (("gate", i), ("up", i), ("down", h))})
        if qwen:
            w.update({p + "self_attn.q_norm.weight": norm(d),
                      p + "self_attn.k_norm.weight": norm(d)})
    return w


def safetensors_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    """The safetensors encoding of name -> array (tensors in the given order)."""
    header, chunks, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": CODES[np.dtype(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the writer pads the header to 8 bytes, as safetensors does
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write_checkpoint(path: Path, config: dict, weights: dict, shards: int = 1) -> Path:
    """Write ``config`` and ``weights`` as a checkpoint directory at ``path``; returns it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    meta = {"format": "pt"}
    if shards == 1:
        (path / "model.safetensors").write_bytes(safetensors_bytes(weights, meta))
        return path
    names = list(weights)
    weight_map, total = {}, 0
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[k::shards]}
        (path / file).write_bytes(safetensors_bytes(part, meta))
        weight_map.update({n: file for n in part})
        total += sum(a.nbytes for a in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path


def tiny_checkpoint(path: Path, family: str, seed: int = 0, shards: int = 1,
                    dtype=ml_dtypes.bfloat16, **over) -> tuple[Path, dict, dict]:
    """A random tiny checkpoint of ``family`` at ``path``: (path, config, weights)."""
    config = tiny_config(family, **over)
    config["dtype"] = np.dtype(dtype).name
    weights = random_weights(config, np.random.default_rng(seed), dtype)
    return write_checkpoint(path, config, weights, shards), config, weights
