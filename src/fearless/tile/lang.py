"""The tile-kernel language: parameter kinds and the functions a ``@fearless.tile.kernel`` calls.

Parameter kinds (annotations):

    Out[T]  or Out[T, (tm, tn)]  or Out   a partitioned output: the launch gives each tile block exactly
                                  one tile of it (``t.partition((tm, tn))`` on the host). The
                                  partition fixes the grid and the static tile shape; a shape in
                                  the annotation must agree with it.
    In[T]  or In                  a tensor read by every tile block, shared and read-only; any
                                  fearless Tensor, DLPack or ``__cuda_array_interface__`` object
    Atomic[T]  or Atomic          a tensor every tile block may update at any element, through
                                  its atomic methods only (``a.add(indices, values)``, ``max``,
                                  ``min``, ``exchange``, ``compare_exchange``): histograms,
                                  scatter-adds. Passed as a plain tensor, held exclusively by the
                                  call like an Out (no other argument may share its memory)
    T (a dtype)                   a scalar
    Const[int] (or [float], ...)  a compile-time constant, with a default or given by keyword

Inside the kernel, ``out.tile_shape`` and ``out.tile_index`` are the block's static tile shape and
its coordinates in the partition grid; ``out.store(t)`` writes the block's own tile (optional
``latency=``/``allow_tma=`` hints, as for ``load``) and
``out.load()`` reads it; ``x.shape`` gives a tensor's extents. Tiles are values with a static
shape and a dtype; arithmetic, comparisons and the functions below apply elementwise and
broadcast like NumPy (extents of 1 stretch). Every function here is an intrinsic: the compiler
recognises it inside a tile kernel; called on the host it raises CompileError. Shapes of tiles
are static; a shape that is not made of constant ints, or operands whose shapes do not
broadcast, are CompileErrors at the call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fearless import dtypes
from fearless.simt.stub import intrinsic
from fearless.simt.views import DTypeLike
from fearless.tile.views import Shape, Tile, TileLike


@dataclass(frozen=True)
class TensorKind:
    """What ``In[f32]`` / ``Out[f16, (64, 64)]`` evaluate to."""

    role: str                                # "in", "out" or "atomic"
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


if TYPE_CHECKING:  # a type checker sees classes (fearless.tile.views); the compiler, kinds
    from fearless.tile.views import Atomic, Const, In, Out
else:
    In = TensorFamily("in")
    Out = TensorFamily("out")
    Atomic = TensorFamily("atomic")
    Const = _ConstFamily()

_intrinsic = intrinsic("fearless.tile", "a @fearless.tile.kernel", "call the kernel instead")
_Coords = Any  # one tile coordinate per axis: an int, or a tuple of ints (run-time values)


@_intrinsic
def load(x: In, index: _Coords, shape: Shape, latency: int | None = None,
         allow_tma: bool | None = None, padding: float = 0) -> Tile:
    """The tile of ``shape`` at tile coordinates ``index`` of the grid of ``shape`` tiles over
    tensor ``x``: elements ``index[k] * shape[k] ..`` along each axis k, of ``x``'s dtype.

    Elements past the tensor's edge read as ``padding``: a constant 0 (the default), -0.0,
    ``math.nan``, ``math.inf`` or ``-math.inf`` (the values Tile IR pads with; all but 0 only
    for float tensors; anything else is a CompileError), so that ``ft.max`` of a partial tile
    padded with ``-math.inf`` ignores the padding. ``index`` has one coordinate per axis of ``x``
    (run-time integers); ``shape`` one constant int per axis (powers of two on the GPU).
    ``latency`` (an int constant 1-10) and ``allow_tma`` (a bool constant) are Tile IR
    scheduling hints for tileiras; None, also as a constant (a closure variable), gives none. A rank mismatch is a CompileError. An Out is read only at
    the block's own tile (index ``out.tile_index``, shape ``out.tile_shape``; simpler:
    ``out.load()``); any other read of an Out is a SafetyError.
    """


@_intrinsic
def load_like(x: In, out: Out, latency: int | None = None,
              allow_tma: bool | None = None, padding: float = 0) -> Tile:
    """The tile of ``x`` at the position and shape of ``out``'s own tile (``out`` an Out
    partition of the same rank), of ``x``'s dtype; ``padding`` past the edge. Hints and
    ``padding`` as for ``load``. ``x`` may be an Out only with ``out``'s tile shape (then it is
    its own tile).
    """


@_intrinsic
def gather(x: In, indices: _Coords, padding: float = 0) -> Tile:
    """The elements of tensor ``x`` at element coordinates ``indices``, of ``x``'s dtype.

    ``indices``: for a 1-d ``x`` an integer tile (or scalar); for an n-d ``x`` a tuple of n of
    them, ``(rows, cols)``. They broadcast together like NumPy, and the result has their
    common shape: ``result[k] = x[rows[k], cols[k]]``. A coordinate outside its axis (negative,
    or at least the extent) reads nothing and gives ``padding`` (any number or scalar that
    converts to ``x``'s dtype; default 0). Scalar coordinates give a scalar. Float coordinates,
    or as many coordinates as ``x`` has not axes, are a CompileError. An Out is gathered from
    only inside the block's own tile (proved at compile time, as for ``scatter``); an Atomic
    not at all (SafetyError).
    """


@_intrinsic
def scatter(out: Out, indices: _Coords, values: TileLike) -> None:
    """Write ``values`` at the element coordinates ``indices`` of the Out partition ``out``,
    inside this tile block's own tile only.

    ``indices`` as for ``gather``; ``values`` broadcasts to their shape and converts to
    ``out``'s dtype by the rules of an assignment. The compiler must prove that every
    coordinate along axis k lies in ``out.tile_index[k] * out.tile_shape[k] + [0,
    out.tile_shape[k])``: write them as that base plus an offset built from ``ft.arange``,
    constants, ``+``, ``-``, ``*`` by a constant, ``%`` or ``//`` by a constant, ``&`` with a
    constant, or a clamp with ``ft.minimum``/``ft.maximum``; anything it cannot prove is a
    SafetyError with a caret under the coordinates (use an ``ft.Atomic`` tensor to write
    anywhere). Coordinates past the tensor's edge (in a partial edge tile) write nothing. Two
    elements with one coordinate write one of their values (which one is not defined: the
    CPU backend raises RaceError when its race detector is on, the default). Reads of
    ``out`` after the scatter see it.
    """


@_intrinsic
def zeros(shape: Shape, dtype: DTypeLike = dtypes.f32) -> Tile:
    """A tile of ``shape`` (constant ints) filled with 0 of ``dtype`` (default f32)."""


@_intrinsic
def full(shape: Shape, value: float, dtype: DTypeLike) -> Tile:
    """A tile of ``shape`` (constant ints) filled with ``value`` (a number or a scalar,
    converted to ``dtype``); a tile as ``value`` is a CompileError."""


@_intrinsic
def arange(n: int) -> Tile:
    """The 1-d i32 tile ``0, 1, ..., n - 1`` (``n`` a constant, a power of two on the GPU)."""


@_intrinsic
def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers ``a >= 0``, ``b > 0``: ``(a + b - 1) // b``. Floats are a
    CompileError."""


@_intrinsic
def mma(a: Tile, b: Tile, acc: Tile) -> Tile:
    """``acc + a @ b``: ``a`` (m, k) and ``b`` (k, n) of one dtype, f16, bf16, f32 (TF32
    tensor cores on the GPU) or f64; ``acc`` (m, n) f32 (f64 for f64 inputs). Returns a tile
    like ``acc``. Shapes that do not agree, or another accumulator dtype, are CompileErrors."""


@_intrinsic
def broadcast(t: Tile, shape: Shape) -> Tile:
    """``t`` with its extents of 1 repeated up to ``shape`` (NumPy's broadcasting rules)."""


@_intrinsic
def reshape(t: Tile, shape: Shape) -> Tile:
    """The same elements (row-major) in another ``shape`` with as many elements (else a
    CompileError)."""


@_intrinsic
def permute(t: Tile, axes: tuple[int, ...]) -> Tile:
    """``t`` with its axes reordered: axis k of the result is axis ``axes[k]`` of ``t``
    (``axes`` a permutation of 0..ndim-1, constants)."""


@_intrinsic
def transpose(t: Tile) -> Tile:
    """The transpose of a 2-d tile (``t.T``); another rank is a CompileError."""


@_intrinsic
def where(cond: TileLike, a: TileLike, b: TileLike) -> Tile:
    """Elementwise ``a`` where ``cond`` else ``b``, broadcasting like NumPy; ``cond`` is a
    bool tile (compare first: ``ft.where(x > 0, x, 0)``), ``a`` and ``b`` promote to one
    dtype."""


@_intrinsic
def exp(x: TileLike) -> Tile:
    """``e ** x``, elementwise (floats)."""


@_intrinsic
def exp2(x: TileLike, flush_to_zero: bool = False) -> Tile:
    """``2 ** x``, elementwise (floats). ``flush_to_zero`` (a bool constant): a result below
    2**-126 (the smallest normal f32) is 0 on both backends; on the GPU this is one
    ``ex2.approx.ftz`` instruction instead of four (softmax kernels want it). Not for f64."""


@_intrinsic
def log(x: TileLike) -> Tile:
    """The natural logarithm, elementwise (floats)."""


@_intrinsic
def sqrt(x: TileLike) -> Tile:
    """The square root, elementwise (floats)."""


@_intrinsic
def rsqrt(x: TileLike) -> Tile:
    """``1 / sqrt(x)``, elementwise (floats)."""


@_intrinsic
def tanh(x: TileLike) -> Tile:
    """The hyperbolic tangent, elementwise (floats)."""


@_intrinsic
def maximum(a: TileLike, b: TileLike) -> Tile:
    """The elementwise maximum of ``a`` and ``b``, broadcasting; a NaN loses to a number
    (like C's ``fmax``)."""


@_intrinsic
def minimum(a: TileLike, b: TileLike) -> Tile:
    """The elementwise minimum of ``a`` and ``b``, broadcasting; a NaN loses to a number
    (like C's ``fmin``)."""


@_intrinsic
def sum(t: Tile, axis: int | None = None, keepdims: bool = False,  # noqa: A001 - ft.sum
        acc_dtype: DTypeLike | None = None) -> Tile:
    """The sum of ``t`` along ``axis`` (a constant), dropping that axis (kept with extent 1
    when ``keepdims``); with no axis, the sum of every element. A result with no axis left
    (no ``axis``, or a 1-d ``t``, without ``keepdims``) is a scalar (a 0-d tile): it takes part
    in arithmetic with numbers and tiles (broadcast to their shape) and can decide an ``if`` or
    a ``while``, as in ``while ft.max(abs(t)) > eps:``.

    The result has ``t``'s dtype (i32 for bool and integers narrower than 32 bits, which sum
    exactly, wrapping at 32 bits). Floats add in the accumulator dtype and the total is rounded
    once to ``t``'s dtype: by default f32 for f16 and bf16 tiles (on the CPU and the GPU alike)
    and ``t``'s own dtype otherwise. ``acc_dtype`` sets the accumulator: ``t``'s dtype (for
    f16: every partial sum rounded to f16) or a wider float; anything else is a CompileError.
    The order of the additions is not part of the language (the CPU adds in a balanced tree,
    the GPU in tileiras's order), so for n elements and the accumulator's unit roundoff u
    (2**-24 for f32, 2**-11 for f16, 2**-8 for bf16) the two backends agree within
    2 (n - 1) u sum(|t|), plus one rounding to ``t``'s dtype each.
    """


@_intrinsic
def max(t: Tile, axis: int | None = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """The maximum of ``t`` along ``axis`` (every element with no axis), as for ``sum``. Of a
    bool tile: whether any element is True."""


@_intrinsic
def min(t: Tile, axis: int | None = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """The minimum of ``t`` along ``axis`` (every element with no axis), as for ``sum``. Of a
    bool tile: whether every element is True."""


@_intrinsic
def argmax(t: Tile, axis: int | None = None) -> Tile:
    """The i32 index of the first maximum of ``t`` along ``axis``, dropping that axis; with no
    axis, the index of the first maximum in row-major order (NumPy's flat index), a scalar."""
