"""A Hugging Face ``config.json`` of a Llama or Qwen3 causal LM, read into one frozen record.

The keys are those ``save_pretrained`` writes for ``LlamaForCausalLM`` and ``Qwen3ForCausalLM``
(transformers' configuration_llama.py / configuration_qwen3.py). RoPE settings come in two
spellings: transformers 5 writes ``rope_parameters`` (``{"rope_type", "rope_theta", ...}``),
older versions ``rope_theta`` beside ``rope_scaling``; both are read, as transformers'
``standardize_rope_params`` does (``type`` is the old name of ``rope_type``; ``llama3`` takes its
``original_max_position_embeddings`` from ``max_position_embeddings`` when absent).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fearless.errors import CheckpointError

# architectures entry -> family; the family decides the tensor names (weights.py)
ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}
_DEFAULT_THETA = 10000.0
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings")


@dataclass(frozen=True)
class ModelConfig:
    """What the model needs from config.json. Sizes are counts; ``rope_scaling`` is None for
    plain RoPE or the llama3 dict (``rope_type``, ``factor``, ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``); ``dtype`` is the config's
    ``dtype``/``torch_dtype`` string or None."""

    architecture: str
    family: str                 # "llama" or "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    qk_norm: bool               # Qwen3's RMSNorm of each head of q and k before RoPE
    dtype: str | None

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def read_config(path: Path) -> ModelConfig:
    """Read ``path/config.json``. Raises CheckpointError for a missing or unreadable file, an
    architecture other than LlamaForCausalLM / Qwen3ForCausalLM (naming its ``architectures``
    entry), a missing or ill-typed key, inconsistent head counts, and features fearless.models
    does not implement (sliding-window attention, RoPE types other than default and llama3,
    partial rotary embeddings, an activation other than SiLU)."""
    file = Path(path) / "config.json"
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{file}: no config.json; a Hugging Face checkpoint directory "
                              "holds config.json and *.safetensors") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{file}: not readable as JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file}: expected a JSON object, found {type(raw).__name__}")
    return parse_config(raw, str(file))


def parse_config(raw: dict, where: str = "config.json") -> ModelConfig:
    """The ModelConfig of a parsed config.json dict (``where`` names it in errors)."""
    keys = _Keys(raw, where)
    archs = raw.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise CheckpointError(f"{where}: 'architectures' is {archs!r}; expected one of "
                              f"{sorted(ARCHITECTURES)}")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{where}: architecture {arch!r} is not supported; "
                              f"fearless.models runs {', '.join(sorted(ARCHITECTURES))}")
    family = ARCHITECTURES[arch]
    hidden, heads = keys.int("hidden_size"), keys.int("num_attention_heads")
    kv_heads = keys.int("num_key_value_heads", heads)
    head_dim = keys.int("head_dim", None) or (hidden // heads if hidden % heads == 0 else 0)
    if not head_dim:
        raise CheckpointError(f"{where}: hidden_size {hidden} is not a multiple of "
                              f"num_attention_heads {heads} and no head_dim is given")
    if heads % kv_heads:
        raise CheckpointError(f"{where}: num_key_value_heads {kv_heads} does not divide "
                              f"num_attention_heads {heads}")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (only 'silu')")
    if raw.get("use_sliding_window") or any(t != "full_attention"
                                            for t in raw.get("layer_types") or ()):
        raise CheckpointError(f"{where}: sliding-window attention is not supported")
    if raw.get("pretraining_tp", 1) not in (1, None):
        raise CheckpointError(f"{where}: pretraining_tp {raw['pretraining_tp']} is not "
                              "supported (only 1)")
    theta, scaling = _rope(raw, where, keys.int("max_position_embeddings"))
    dtype = raw.get("dtype", raw.get("torch_dtype"))
    return ModelConfig(
        architecture=arch, family=family, vocab_size=keys.int("vocab_size"),
        hidden_size=hidden, intermediate_size=keys.int("intermediate_size"),
        num_layers=keys.int("num_hidden_layers"), num_heads=heads, num_kv_heads=kv_heads,
        head_dim=head_dim, max_position_embeddings=keys.int("max_position_embeddings"),
        rms_norm_eps=keys.float("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        tie_word_embeddings=keys.bool("tie_word_embeddings", False),
        attention_bias=keys.bool("attention_bias", False),
        mlp_bias=keys.bool("mlp_bias", False) if family == "llama" else False,
        qk_norm=family == "qwen3", dtype=dtype if isinstance(dtype, str) else None)


def _rope(raw: dict, where: str, max_positions: int) -> tuple[float, dict | None]:
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"{where}: rope_parameters is {params!r}; expected an object")
    theta = params.get("rope_theta", raw.get("rope_theta", _DEFAULT_THETA))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise CheckpointError(f"{where}: rope_theta {theta!r} is not a positive number")
    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise CheckpointError(f"{where}: partial_rotary_factor {partial} is not supported")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise CheckpointError(f"{where}: RoPE type {kind!r} is not supported "
                              "('default' and 'llama3' are)")
    scaling = {"rope_type": "llama3", "original_max_position_embeddings": max_positions}
    scaling.update({k: params[k] for k in _LLAMA3_KEYS if k in params})
    missing = [k for k in _LLAMA3_KEYS if not isinstance(scaling.get(k), (int, float))]
    if missing:
        raise CheckpointError(f"{where}: llama3 RoPE scaling needs a number for {missing[0]!r}")
    if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise CheckpointError(f"{where}: llama3 RoPE needs high_freq_factor > low_freq_factor")
    return float(theta), scaling


_REQUIRED = object()


class _Keys:
    """Typed reads of config keys, with the key named in the error."""

    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def _get(self, key, default, ok, what):
        if key not in self.raw or self.raw[key] is None:
            if default is _REQUIRED:
                raise CheckpointError(f"{self.where}: missing key {key!r}")
            return default
        value = self.raw[key]
        if not ok(value):
            raise CheckpointError(f"{self.where}: {key!r} is {value!r}; expected {what}")
        return value

    def int(self, key, default=_REQUIRED):
        return self._get(key, default, lambda v: type(v) is int and v > 0, "a positive integer")

    def float(self, key, default):
        return float(self._get(key, default,
                               lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                               and v > 0, "a positive number"))

    def bool(self, key, default):
        return self._get(key, default, lambda v: isinstance(v, bool), "true or false")
