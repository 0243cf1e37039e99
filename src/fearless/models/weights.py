"""The tensors of a Hugging Face checkpoint: names and shapes expected from the config, read from
``*.safetensors`` (one file, or shards listed by ``model.safetensors.index.json``) with the
``safetensors`` package in its NumPy mode (bf16 arrives as ml_dtypes.bfloat16; no torch).

Names are those ``save_pretrained`` writes for LlamaForCausalLM and Qwen3ForCausalLM
(``model.embed_tokens.weight``, ``model.layers.{i}.self_attn.q_proj.weight``, ...,
``model.norm.weight``, ``lm_head.weight``, which tied checkpoints leave out). The safetensors
library validates each file's header (offsets, sizes, dtypes) when it opens it; its error
becomes a CheckpointError naming the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes  # noqa: F401  registers 'bfloat16' with NumPy before safetensors needs it
import numpy as np

from fearless import dtypes
from fearless.errors import CheckpointError
from fearless.models.config import ModelConfig

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
FLOAT_DTYPES = {"F16": dtypes.f16, "BF16": dtypes.bf16, "F32": dtypes.f32}


def expected_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model reads, name -> shape (torch.nn.Linear layout: (out, in))."""
    h, i = c.hidden_size, c.intermediate_size
    shapes = {"model.embed_tokens.weight": (c.vocab_size, h), "model.norm.weight": (h,)}
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, h)
    for n in range(c.num_layers):
        p = f"model.layers.{n}."
        layer = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
                 "self_attn.q_proj.weight": (c.q_size, h),
                 "self_attn.k_proj.weight": (c.kv_size, h),
                 "self_attn.v_proj.weight": (c.kv_size, h),
                 "self_attn.o_proj.weight": (h, c.q_size),
                 "mlp.gate_proj.weight": (i, h), "mlp.up_proj.weight": (i, h),
                 "mlp.down_proj.weight": (h, i)}
        if c.attention_bias:
            layer.update({"self_attn.q_proj.bias": (c.q_size,),
                          "self_attn.k_proj.bias": (c.kv_size,),
                          "self_attn.v_proj.bias": (c.kv_size,), "self_attn.o_proj.bias": (h,)})
        if c.mlp_bias:
            layer.update({"mlp.gate_proj.bias": (i,), "mlp.up_proj.bias": (i,),
                          "mlp.down_proj.bias": (h,)})
        if c.qk_norm:
            layer.update({"self_attn.q_norm.weight": (c.head_dim,),
                          "self_attn.k_norm.weight": (c.head_dim,)})
        shapes.update({p + k: v for k, v in layer.items()})
    return shapes


class Checkpoint:
    """The safetensors files of a checkpoint directory, opened and validated.

    ``names()`` lists the stored tensors; ``read(name, dtype)`` returns one as a C-contiguous
    NumPy array of ``dtype`` (a fearless float DType; converted with one rounding when the
    stored dtype differs); ``stored_dtype(name)``. Use as a context manager (closes the files).
    Raises CheckpointError: no safetensors file, an index naming a missing shard or a tensor its
    shard lacks, a damaged file, a tensor of a non-float dtype.
    """

    def __init__(self, path: Path):
        try:
            from safetensors import SafetensorError, safe_open
        except ImportError:
            raise ImportError("fearless.models reads checkpoints with the safetensors "
                              "package: pip install 'fearless[models]'") from None
        self._error = SafetensorError
        self._open = safe_open
        self.path = Path(path)
        self._files: dict[str, object] = {}    # file name -> open safe_open handle
        self._where: dict[str, str] = {}       # tensor name -> file name
        try:
            self._index()
        except BaseException:
            self.close()
            raise

    def _index(self) -> None:
        index = self.path / INDEX
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError("weight_map is not an object")
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{index}: not a safetensors index ({e})") from None
            for name, file in weight_map.items():
                handle = self._file(str(file))
                if name not in handle.keys():
                    raise CheckpointError(f"{index} lists tensor {name!r} in {file}, which does "
                                          "not hold it")
                self._where[name] = str(file)
            return
        files = [self.path / SINGLE] if (self.path / SINGLE).exists() else \
            sorted(self.path.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{self.path}: no {SINGLE}, {INDEX} or *.safetensors file")
        for file in files:
            for name in self._file(file.name).keys():
                if name in self._where:
                    raise CheckpointError(f"{self.path}: tensor {name!r} is stored twice "
                                          f"({self._where[name]} and {file.name})")
                self._where[name] = file.name

    def _file(self, name: str):
        if name not in self._files:
            file = self.path / name
            if not file.is_file():
                raise CheckpointError(f"{self.path}: shard {name!r} is missing")
            try:
                self._files[name] = self._open(str(file), framework="np")
            except (self._error, OSError) as e:
                raise CheckpointError(f"{file}: damaged safetensors file ({e})") from None
        return self._files[name]

    def names(self) -> set[str]:
        return set(self._where)

    def stored_dtype(self, name: str) -> dtypes.DType:
        code = self._files[self._where[name]].get_slice(name).get_dtype()
        if code not in FLOAT_DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} has dtype {code}; expected "
                                  f"one of {', '.join(FLOAT_DTYPES)}")
        return FLOAT_DTYPES[code]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._files[self._where[name]].get_slice(name).get_shape())

    def read(self, name: str, dtype: dtypes.DType) -> np.ndarray:
        stored = self.stored_dtype(name)
        file = self._where[name]
        try:
            array = self._files[file].get_tensor(name)
        except (self._error, OSError, ValueError, TypeError) as e:
            raise CheckpointError(f"{self.path / file}: tensor {name!r} is not readable "
                                  f"({e})") from None
        if stored is not dtype:
            array = dtypes.convert(array, dtype)
        return np.ascontiguousarray(array)

    def close(self) -> None:
        for handle in self._files.values():
            exit_ = getattr(handle, "__exit__", None)
            if exit_ is not None:
                exit_(None, None, None)
        self._files.clear()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_tensors(ckpt: Checkpoint, config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The expected name -> shape map, after checking that ``ckpt`` holds each tensor with that
    shape and a float dtype. Raises CheckpointError naming the first missing or misshapen tensor
    (with both shapes). Extra tensors are ignored, as transformers ignores them."""
    want = expected_shapes(config)
    have = ckpt.names()
    for name, shape in want.items():
        if name not in have:
            hint = " (config.json says tie_word_embeddings is false)" \
                if name == "lm_head.weight" else ""
            raise CheckpointError(f"{ckpt.path}: missing tensor {name!r} of shape "
                                  f"{shape}{hint}")
        got = ckpt.shape(name)
        if got != shape:
            raise CheckpointError(f"{ckpt.path}: tensor {name!r} has shape {got}; the config "
                                  f"expects {shape}")
        ckpt.stored_dtype(name)
    return want
