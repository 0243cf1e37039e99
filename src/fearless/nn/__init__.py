"""fearless.nn: the kernels a transformer needs (RMSNorm, RoPE, attention, the KV-cache write,
a decode token's RoPE and cache write in one, SiLU-mul, embedding, linear, argmax) as functions
over fearless and torch tensors.

Each function takes fearless Tensors, torch tensors (CUDA) or anything ``fearless.asarray``
accepts (NumPy on the cpu backend) and returns results of the kind of its first tensor argument.
Every function runs on both backends; its docstring gives shapes, dtypes and each rounding step.
"""

from fearless.nn.act import add, silu_mul
from fearless.nn.attention import attention, decode_attention
from fearless.nn.decode import rope_kv_write
from fearless.nn.embed import argmax, embedding
from fearless.nn.kvcache import kv_cache_write
from fearless.nn.linear import linear
from fearless.nn.norm import rms_norm
from fearless.nn.rope import qk_norm_rope, rope, rope_tables

__all__ = ["add", "argmax", "attention", "decode_attention", "embedding", "kv_cache_write",
           "linear", "qk_norm_rope", "rms_norm", "rope", "rope_kv_write", "rope_tables",
           "silu_mul"]
