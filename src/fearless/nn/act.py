"""Elementwise steps of a decoder layer: the SwiGLU gate (``silu(gate) * up``) and the residual
add, each one tile kernel over tensors of rank 1 to 3 (strided views too)."""
from __future__ import annotations

from typing import TypeVar

from fearless import f32
from fearless import tile as ft
from fearless.errors import ArgumentTypeError
from fearless.nn import _common as c
from fearless.tracebacks import user_facing

T = TypeVar("T")

# elements per tile block of an elementwise kernel, and the widest tile row
BLOCK_ELEMENTS = 4096
MAX_WIDTH = 1024


@ft.kernel
def silu_mul_tiles(out: ft.Out[T], gate: ft.In[T], up: ft.In[T]):
    g = ft.load_like(gate, out).astype(f32)
    s = (g / (1.0 + ft.exp(-g))).astype(out.dtype)     # F.silu: f32 math, rounded
    out.store(s * ft.load_like(up, out))                # rounded once


@ft.kernel
def add_tiles(out: ft.Out[T], a: ft.In[T], b: ft.In[T]):
    out.store(ft.load_like(a, out) + ft.load_like(b, out))


def elementwise_tile(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A tile for an elementwise kernel over ``shape``: up to MAX_WIDTH along the last axis,
    then whole rows up to BLOCK_ELEMENTS, then 1."""
    tile, left = [], BLOCK_ELEMENTS
    for i, n in enumerate(reversed(shape)):
        t = min(c.pow2(n), MAX_WIDTH if i == 0 else left)
        tile.append(t)
        left = max(1, left // t)
    return tuple(reversed(tile))


def _pair(fn: str, names: tuple[str, str], a, b):
    at, bt = c.tensor(fn, names[0], a), c.tensor(fn, names[1], b)
    if not 1 <= at.ndim <= 3:
        raise ArgumentTypeError(f"expected a tensor of rank 1 to 3, got shape {at.shape}",
                                  kernel=fn, param=names[0])
    c.check_dtype(fn, names[0], at, c.FLOATS)
    c.check_same_dtype(fn, names[1], bt, names[0], at)
    c.check_shape(fn, names[1], bt, at.shape, f"{names[0]}'s shape")
    return at, bt


@user_facing
def silu_mul(gate, up):
    """``silu(gate) * up``, the gated MLP of Llama and Qwen3 (HF: ``act_fn(gate_proj(x)) *
    up_proj(x)`` with ``act_fn = SiLU``).

    ``gate``, ``up``: the same shape, rank 1 to 3, usually (T, I); f16, bf16 or f32, one
    dtype; strided views are fine. Steps: ``s = g / (1 + exp(-g))`` in f32 from ``g = gate``
    (torch's silu kernel computes in f32), rounded to the dtype; ``s * up`` rounded to the
    dtype. ``exp`` is the GPU's fast exponential within docs/semantics.md's bound.

    Returns a new contiguous tensor of that shape and dtype (torch for a torch ``gate``).
    Raises ArgumentTypeError for a rank outside 1-3 or an unsupported or mismatched dtype,
    ContractError when the shapes differ.
    """
    g, u = _pair("silu_mul", ("gate", "up"), gate, up)
    out = c.output(gate, g.shape, g.dtype)
    z, *_ = c.run(silu_mul_tiles(out.partition(elementwise_tile(g.shape)), g, u))
    return out.result(z)


@user_facing
def add(a, b):
    """``a + b`` rounded once to the dtype (HF's residual add ``residual + hidden_states``).

    ``a``, ``b``: the same shape, rank 1 to 3; f16, bf16 or f32, one dtype. Returns a new
    contiguous tensor (torch for a torch ``a``). Raises ArgumentTypeError for a rank outside
    1-3 or an unsupported or mismatched dtype, ContractError when the shapes differ.
    """
    at, bt = _pair("add", ("a", "b"), a, b)
    out = c.output(a, at.shape, at.dtype)
    z, *_ = c.run(add_tiles(out.partition(elementwise_tile(at.shape)), at, bt))
    return out.result(z)
