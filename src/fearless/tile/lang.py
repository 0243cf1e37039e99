"""The tile-kernel language: parameter kinds and the functions a ``@fearless.tile.kernel`` calls.

Parameter kinds (annotations):

    Out[T]  or Out[T, (tm, tn)]  or Out   a partitioned output: the launch gives each tile block exactly
                                  one tile of it (``t.partition((tm, tn))`` on the host). The
                                  partition fixes the grid and the static tile shape; a shape in
                                  the annotation must agree with it.
    In[T]  or In                  a tensor read by every tile block, shared and read-only; any
                                  fearless Tensor, DLPack or ``__cuda_array_interface__`` object
    T (a dtype)                   a scalar
    Const[int] (or [float], ...)  a compile-time constant, with a default or given by keyword

Inside the kernel, ``out.tile_shape`` and ``out.tile_index`` are the block's static tile shape and
its coordinates in the partition grid; ``out.store(t)`` writes the block's own tile (optional
``latency=``/``allow_tma=`` hints, as for ``load``) and
``out.load()`` reads it; ``x.shape`` gives a tensor's extents. Tiles are values with a static
shape and a dtype; arithmetic, comparisons and the functions below apply elementwise and
broadcast like NumPy (extents of 1 stretch). Every function here is a stub: calling it outside a
tile kernel raises CompileError.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fearless.errors import CompileError


@dataclass(frozen=True)
class TensorKind:
    """What ``In[f32]`` / ``Out[f16, (64, 64)]`` evaluate to."""

    role: str                                # "in" or "out"
    dtype: Any                               # a DType, a TypeVar, or None (any)
    tile_shape: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        t = getattr(self.dtype, "__name__", None) or str(self.dtype)
        shape = f", {self.tile_shape}" if self.tile_shape else ""
        return f"fearless.tile.{self.role.capitalize()}[{t}{shape}]"


@dataclass(frozen=True)
class ConstKind:
    """What ``Const[int]`` evaluates to: a compile-time parameter of that Python type."""

    type: Any


class TensorFamily:
    """``In`` and ``Out``: subscript with a dtype (and for Out a tile shape), or use bare."""

    def __init__(self, role: str):
        self._role = role

    def __getitem__(self, item) -> TensorKind:
        shape = None
        if isinstance(item, tuple):
            if self._role != "out" or len(item) != 2:
                raise TypeError(f"write fearless.tile.{self._role.capitalize()}[dtype]"
                                + (" or Out[dtype, tile_shape]" if self._role == "out" else ""))
            item, shape = item
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            if not shape or not all(isinstance(n, int) and n >= 1 for n in shape):
                raise TypeError(f"tile shape {shape!r} must be positive integers")
        return TensorKind(self._role, item, shape)

    def any_dtype(self) -> TensorKind:
        return TensorKind(self._role, None)

    def __repr__(self) -> str:
        return f"fearless.tile.{self._role.capitalize()}"


class _ConstFamily:
    def __getitem__(self, item) -> ConstKind:
        return ConstKind(item)

    def __repr__(self) -> str:
        return "fearless.tile.Const"


In = TensorFamily("in")
Out = TensorFamily("out")
Const = _ConstFamily()


def _stub(name: str, doc: str):
    def stub(*args, **kwargs):
        raise CompileError(f"fearless.tile.{name}() can only be called inside a "
                           f"@fearless.tile.kernel", help="call the kernel instead")
    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    return stub


load = _stub("load", "load(x, index, shape, latency=None, allow_tma=None): the tile of "
                     "``shape`` at tile coordinates ``index`` of the grid of ``shape`` tiles "
                     "over tensor ``x``; elements past the edge read as 0. ``shape`` must be "
                     "constants (powers of two on the GPU). ``latency`` (1-10) and "
                     "``allow_tma`` are Tile IR scheduling hints for tileiras. An Out is read "
                     "only at the block's own tile (index ``out.tile_index``, shape "
                     "``out.tile_shape``; simpler: ``out.load()``); any other read of an Out "
                     "is a SafetyError.")
load_like = _stub("load_like", "load_like(x, out, latency=None, allow_tma=None): the tile of "
                               "``x`` at the position and shape of ``out``'s own tile (zero "
                               "past the edge); hints as for ``load``. ``x`` may be an Out "
                               "only with ``out``'s tile shape (then it is its own tile).")
zeros = _stub("zeros", "zeros(shape, dtype): a tile of zeros.")
full = _stub("full", "full(shape, value, dtype): a tile filled with ``value``.")
arange = _stub("arange", "arange(n): the 1-d i32 tile 0, 1, ..., n-1 (n a constant).")
cdiv = _stub("cdiv", "cdiv(a, b): ceil(a / b) for integers.")
mma = _stub("mma", "mma(a, b, acc): acc + a @ b. a (m, k) and b (k, n) f16/bf16/f32 "
                   "(f32 inputs use TF32 tensor cores on the GPU), acc (m, n) f32.")
broadcast = _stub("broadcast", "broadcast(t, shape): repeat extents of 1 up to ``shape``.")
reshape = _stub("reshape", "reshape(t, shape): the same elements (row-major) in another shape.")
permute = _stub("permute", "permute(t, axes): reorder the axes of ``t``.")
transpose = _stub("transpose", "transpose(t): swap the two axes of a 2-d tile.")
where = _stub("where", "where(cond, a, b): elementwise choice, broadcasting like NumPy.")
exp = _stub("exp", "exp(t), elementwise.")
exp2 = _stub("exp2", "exp2(t) = 2**t, elementwise.")
log = _stub("log", "log(t), natural logarithm, elementwise.")
sqrt = _stub("sqrt", "sqrt(t), elementwise.")
rsqrt = _stub("rsqrt", "rsqrt(t) = 1 / sqrt(t), elementwise.")
tanh = _stub("tanh", "tanh(t), elementwise.")
maximum = _stub("maximum", "maximum(a, b): elementwise maximum (NaN-ignoring, like fmax).")
minimum = _stub("minimum", "minimum(a, b): elementwise minimum (NaN-ignoring, like fmin).")
sum = _stub("sum", """sum(t, axis, keepdims=False, acc_dtype=None): sum along ``axis``.

The result has ``t``'s dtype (i32 for bool and integers narrower than 32 bits, which sum
exactly, wrapping at 32 bits). Floats add in the accumulator dtype and the total is rounded
once to ``t``'s dtype: by default f32 for f16 and bf16 tiles (on the CPU and the GPU alike) and
``t``'s own dtype otherwise. ``acc_dtype`` sets the accumulator: ``t``'s dtype (for f16: every
partial sum rounded to f16) or a wider float; anything else is a CompileError.
The order of the additions is not part of the language (the CPU adds in a balanced tree, the GPU
in tileiras's order), so for n elements and the accumulator's unit roundoff u (2**-24 for f32,
2**-11 for f16, 2**-8 for bf16) the two backends agree within 2 (n - 1) u sum(|t|), plus one
rounding to ``t``'s dtype each.""")  # noqa: A001
max = _stub("max", "max(t, axis, keepdims=False): maximum along ``axis``.")  # noqa: A001
min = _stub("min", "min(t, axis, keepdims=False): minimum along ``axis``.")  # noqa: A001
argmax = _stub("argmax", "argmax(t, axis): i32 index of the first maximum along ``axis``.")
