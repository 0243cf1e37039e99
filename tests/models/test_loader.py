"""fearless.models.load: config.json and safetensors checkpoints as save_pretrained writes them,
and the errors for everything else (another architecture, missing or misshapen tensors,
damaged files, unsupported configs)."""
from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("safetensors")

import fearless as fl  # noqa: E402
from fearless.errors import CheckpointError  # noqa: E402
from fearless.models import load  # noqa: E402
from fearless.models.config import parse_config, read_config  # noqa: E402
from tests.models.checkpoint import (legacy_rope, safetensors_bytes, tiny_checkpoint,  # noqa: E402
                                     tiny_config, write_checkpoint)


def _weights(model):
    """name -> host array of what a loaded model holds (layer 0 and the shared tensors)."""
    layer = model.layers[0]
    return {"model.embed_tokens.weight": model.embed.numpy(),
            "model.norm.weight": model.norm.numpy(), "lm_head.weight": model.lm_head.numpy(),
            "model.layers.0.self_attn.q_proj.weight": _q_proj(model, layer),
            "model.layers.0.mlp.down_proj.weight": layer.down.numpy(),
            "model.layers.1.input_layernorm.weight": model.layers[1].input_norm.numpy()}


def _q_proj(model, layer) -> np.ndarray:
    """q_proj's weight: the first q_size rows of the fused q | k | v matrix."""
    return layer.qkv[0].numpy()[:model.config.q_size]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_config_fields(family):
    c = parse_config(tiny_config(family))
    raw = tiny_config(family)
    assert (c.family, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == \
        (family, 2, 64, 4, 2, raw["head_dim"])
    assert c.qk_norm == (family == "qwen3")
    assert c.tie_word_embeddings == raw["tie_word_embeddings"]
    assert c.rope_theta == raw["rope_parameters"]["rope_theta"]
    if family == "llama":
        assert c.rope_scaling == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32}
    else:
        assert c.rope_scaling is None


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_transformers_4_rope_spelling_reads_the_same(family):
    raw = tiny_config(family)
    old = legacy_rope(raw)
    assert "rope_parameters" not in old and "rope_theta" in old
    assert parse_config(old) == parse_config(raw)


def test_head_dim_defaults_to_hidden_over_heads():
    raw = tiny_config("llama")
    del raw["head_dim"]
    assert parse_config(raw).head_dim == 64 // 4
    assert parse_config(tiny_config("llama")).head_dim == 64


def test_llama3_original_context_defaults_to_max_positions():
    raw = tiny_config("llama")
    del raw["rope_parameters"]["original_max_position_embeddings"]
    assert parse_config(raw).rope_scaling["original_max_position_embeddings"] == 128


@pytest.mark.parametrize("arch", ["MistralForCausalLM", "Qwen2ForCausalLM"])
def test_another_architecture_is_named(tmp_path, arch):
    path, config, weights = tiny_checkpoint(tmp_path, "llama")
    config["architectures"] = [arch]
    write_checkpoint(path, config, weights)
    with pytest.raises(CheckpointError, match=f"architecture '{arch}' is not supported"):
        load(path)


@pytest.mark.parametrize("change, message", [
    ({"architectures": None}, "'architectures' is None"),
    ({"hidden_size": "64"}, "'hidden_size' is '64'; expected a positive integer"),
    ({"num_key_value_heads": 3}, "num_key_value_heads 3 does not divide"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"use_sliding_window": True}, "sliding-window attention"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}},
     "RoPE type 'yarn'"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}},
     "needs a number for 'low_freq_factor'"),
])
def test_unsupported_or_bad_config(change, message):
    raw = tiny_config("qwen3")
    raw.update(change)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_config(raw)


def test_missing_key_is_named():
    raw = tiny_config("llama")
    del raw["vocab_size"]
    with pytest.raises(CheckpointError, match="missing key 'vocab_size'"):
        parse_config(raw)


def test_no_config_json(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not readable as JSON"):
        read_config(tmp_path)
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load(tmp_path / "absent")


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("shards", [1, 3])
def test_weights_load_exactly(tmp_path, family, shards):
    path, config, weights = tiny_checkpoint(tmp_path, family, seed=3, shards=shards)
    model = load(path)
    assert model.dtype is fl.bf16
    got = _weights(model)
    if config["tie_word_embeddings"]:
        assert "lm_head.weight" not in weights  # save_pretrained leaves the tied copy out
        weights = dict(weights, **{"lm_head.weight": weights["model.embed_tokens.weight"]})
    for name, value in got.items():
        assert value.dtype == ml_dtypes.bfloat16, name
        np.testing.assert_array_equal(value.view(np.uint16), weights[name].view(np.uint16),
                                      err_msg=name)


def test_dtype_conversion(tmp_path):
    path, _, weights = tiny_checkpoint(tmp_path, "qwen3", seed=4)
    model = load(path, dtype="f32")
    assert model.dtype is fl.f32
    want = weights["model.layers.0.self_attn.q_proj.weight"].astype(np.float32)
    np.testing.assert_array_equal(_q_proj(model, model.layers[0]), want)  # bf16 -> f32: exact
    f16_model = load(path, dtype=fl.f16)
    f16 = _q_proj(f16_model, f16_model.layers[0])
    np.testing.assert_array_equal(f16, want.astype(np.float16))


def test_f16_checkpoint_keeps_f16(tmp_path):
    path, _, weights = tiny_checkpoint(tmp_path, "llama", dtype=np.float16)
    model = load(path)
    assert model.dtype is fl.f16
    np.testing.assert_array_equal(model.embed.numpy(), weights["model.embed_tokens.weight"])


def test_missing_tensor_is_named_with_its_shape(tmp_path):
    path, config, weights = tiny_checkpoint(tmp_path, "llama")
    del weights["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(path, config, weights)
    with pytest.raises(CheckpointError, match=r"missing tensor 'model.layers.1.mlp.up_proj"
                                              r".weight' of shape \(160, 64\)"):
        load(path)


def test_untied_checkpoint_needs_lm_head(tmp_path):
    path, config, weights = tiny_checkpoint(tmp_path, "qwen3")
    config["tie_word_embeddings"] = False
    write_checkpoint(path, config, weights)
    with pytest.raises(CheckpointError, match="missing tensor 'lm_head.weight'.*"
                                              "tie_word_embeddings is false"):
        load(path)


def test_misshapen_tensor_names_both_shapes(tmp_path):
    path, config, weights = tiny_checkpoint(tmp_path, "qwen3")
    name = "model.layers.0.self_attn.k_proj.weight"
    weights[name] = weights[name][:32]
    write_checkpoint(path, config, weights)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' has shape \(32, 64\); the "
                                              r"config expects \(128, 64\)"):
        load(path)


def test_integer_tensor_is_refused(tmp_path):
    path, config, weights = tiny_checkpoint(tmp_path, "qwen3")
    weights["model.norm.weight"] = np.ones(64, np.int64)
    write_checkpoint(path, config, weights)
    with pytest.raises(CheckpointError, match="'model.norm.weight' has dtype I64"):
        load(path)


def _damage(data: bytes, how: str) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    if how == "truncated":
        return data[:len(data) - 100]
    if how == "empty":
        return b""
    if how == "huge header length":
        return struct.pack("<Q", 1 << 40) + data[8:]
    if how == "garbage header":
        return data[:8] + b"\xff" * n + data[8 + n:]
    name = "model.norm.weight"
    if how == "offsets past the end":
        header[name]["data_offsets"] = [0, 1 << 30]
    elif how == "shape disagrees with bytes":
        header[name]["shape"] = [65]
    elif how == "unknown dtype":
        header[name]["dtype"] = "Q7"
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


@pytest.mark.parametrize("how", ["truncated", "empty", "huge header length", "garbage header",
                                 "offsets past the end", "shape disagrees with bytes",
                                 "unknown dtype"])
def test_damaged_file_is_a_clear_error(tmp_path, how):
    path, _, _ = tiny_checkpoint(tmp_path, "qwen3")
    file = path / "model.safetensors"
    file.write_bytes(_damage(file.read_bytes(), how))
    with pytest.raises(CheckpointError, match="model.safetensors: damaged safetensors file"):
        load(path)


def test_writer_matches_the_format(tmp_path):
    """The tests' writer against the safetensors library's own reader (bf16 included)."""
    from safetensors import safe_open
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
              "b": np.array([1.5, -2.0], ml_dtypes.bfloat16)}
    (tmp_path / "x.safetensors").write_bytes(safetensors_bytes(arrays))
    with safe_open(str(tmp_path / "x.safetensors"), framework="np") as f:
        for name, a in arrays.items():
            got = f.get_tensor(name)
            assert got.dtype == a.dtype and got.shape == a.shape
            np.testing.assert_array_equal(got, a)


def test_index_naming_a_missing_shard(tmp_path):
    path, _, _ = tiny_checkpoint(tmp_path, "llama", shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="shard 'model-00002-of-00002.safetensors' is "
                                              "missing"):
        load(path)


def test_index_naming_a_tensor_its_shard_lacks(tmp_path):
    path, _, _ = tiny_checkpoint(tmp_path, "llama", shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors" \
        if index["weight_map"]["model.norm.weight"].startswith("model-00002") else \
        "model-00002-of-00002.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="lists tensor 'model.norm.weight' in"):
        load(path)


def test_no_safetensors_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("llama")))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load(tmp_path)
