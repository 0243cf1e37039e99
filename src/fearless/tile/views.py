"""What a static type checker (pyright, mypy) sees of the tile-kernel language.

As for SIMT kernels (``fearless.simt.views``, which explains the approach): the compiler reads a
tile kernel's annotations as kinds (``fearless.tile.lang``) and never runs its body; these
classes tell a type checker what the body's values offer. ``In``, ``Out`` and ``Atomic`` are the
tensor parameters (``Out[f16, (64, 64)]`` is accepted, its subscript ignored); ``Tile`` is a tile
value, with NumPy-style elementwise operators; ``Const[int]`` is ``int`` to the checker, so a
default (``bk: ft.Const[int] = 64``) checks. Shapes and dtypes are checked by the compiler, not
here.
No method here runs.
"""
from __future__ import annotations

from typing import Annotated, Any, TypeAlias, TypeVar, Union

from fearless.dtypes import DType
from fearless.simt.views import DTypeLike

_T = TypeVar("_T")

Const: TypeAlias = Annotated[_T, "a compile-time constant of the tile kernel"]
Shape: TypeAlias = Union[int, tuple[int, ...]]
TileLike: TypeAlias = Union["Tile", float]   # a tile, or a Python number (weak: takes the
                                             # tile's dtype)


class Tile:
    """A tile: a value with a static shape and a dtype. Arithmetic, comparisons and bitwise
    operators apply elementwise and broadcast like NumPy (extents of 1 stretch)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The static extents."""
        ...

    @property
    def ndim(self) -> int:
        """The number of axes."""
        ...

    @property
    def dtype(self) -> DType:
        """The element type."""
        ...

    @property
    def T(self) -> Tile:
        """The transpose of a 2-d tile."""
        ...

    def astype(self, dtype: DTypeLike) -> Tile:
        """The same values converted to ``dtype`` (round to nearest even)."""
        ...

    def reshape(self, shape: Shape) -> Tile:
        """``ft.reshape(self, shape)``."""
        ...

    def permute(self, axes: tuple[int, ...]) -> Tile:
        """``ft.permute(self, axes)``."""
        ...

    def transpose(self) -> Tile:
        """``ft.transpose(self)``."""
        ...

    def broadcast(self, shape: Shape) -> Tile:
        """``ft.broadcast(self, shape)``."""
        ...

    def sum(self, axis: int | None = None, keepdims: bool = False,
            acc_dtype: DTypeLike | None = None) -> Tile:
        """``ft.sum(self, axis, keepdims, acc_dtype)``."""
        ...

    def max(self, axis: int | None = None, keepdims: bool = False) -> Tile:
        """``ft.max(self, axis, keepdims)``."""
        ...

    def min(self, axis: int | None = None, keepdims: bool = False) -> Tile:
        """``ft.min(self, axis, keepdims)``."""
        ...

    def argmax(self, axis: int | None = None) -> Tile:
        """``ft.argmax(self, axis)``."""
        ...

    def __add__(self, other: TileLike) -> Tile: ...
    def __radd__(self, other: TileLike) -> Tile: ...
    def __sub__(self, other: TileLike) -> Tile: ...
    def __rsub__(self, other: TileLike) -> Tile: ...
    def __mul__(self, other: TileLike) -> Tile: ...
    def __rmul__(self, other: TileLike) -> Tile: ...
    def __truediv__(self, other: TileLike) -> Tile: ...
    def __rtruediv__(self, other: TileLike) -> Tile: ...
    def __floordiv__(self, other: TileLike) -> Tile: ...
    def __rfloordiv__(self, other: TileLike) -> Tile: ...
    def __mod__(self, other: TileLike) -> Tile: ...
    def __rmod__(self, other: TileLike) -> Tile: ...
    def __pow__(self, other: TileLike) -> Tile: ...
    def __rpow__(self, other: TileLike) -> Tile: ...
    def __and__(self, other: TileLike) -> Tile: ...
    def __rand__(self, other: TileLike) -> Tile: ...
    def __or__(self, other: TileLike) -> Tile: ...
    def __ror__(self, other: TileLike) -> Tile: ...
    def __xor__(self, other: TileLike) -> Tile: ...
    def __rxor__(self, other: TileLike) -> Tile: ...
    def __lshift__(self, other: TileLike) -> Tile: ...
    def __rshift__(self, other: TileLike) -> Tile: ...
    def __neg__(self) -> Tile: ...
    def __lt__(self, other: TileLike) -> Tile: ...
    def __le__(self, other: TileLike) -> Tile: ...
    def __gt__(self, other: TileLike) -> Tile: ...
    def __ge__(self, other: TileLike) -> Tile: ...
    def __eq__(self, other: object) -> Tile: ...  # type: ignore[override]  # elementwise
    def __ne__(self, other: object) -> Tile: ...  # type: ignore[override]


class In:
    """A tensor parameter read by every tile block (``ft.In[f32]``)."""

    def __class_getitem__(cls, item: Any) -> Any:
        """``In[f32]``, ``Out[f16, (64, 64)]``: the checker takes the class (see the module)."""
        return cls

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's extents (run-time values)."""
        ...

    @property
    def ndim(self) -> int:
        """The number of axes."""
        ...

    @property
    def dtype(self) -> DType:
        """The element type."""
        ...

    def __len__(self) -> int:
        """The extent of axis 0."""
        ...


class Out(In):
    """A partitioned output (``ft.Out[f32]``): each tile block owns one tile of it."""

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The static shape of the block's tile (from the partition)."""
        ...

    @property
    def tile_index(self) -> tuple[int, ...]:
        """The block's tile coordinates in the partition grid."""
        ...

    def store(self, value: TileLike, latency: int | None = None,
              allow_tma: bool | None = None) -> None:
        """Write the block's own tile (clipped at the tensor's edge); ``value`` broadcasts to
        ``tile_shape``. ``latency``/``allow_tma``: hints, as for ``ft.load``."""
        ...

    def load(self) -> Tile:
        """Read the block's own tile back (zero past the tensor's edge)."""
        ...


_Coords = Any  # an integer tile or scalar, or a tuple of them (one per axis)


class Atomic(In):
    """A tensor every tile block may update at any element (``ft.Atomic[i32]``), through these
    atomic methods only. Each takes element coordinates as ``ft.gather`` does (an integer tile
    for a 1-d tensor, a tuple of them for n-d), broadcasting together and with the values, and
    returns a tile of the elements' values just before this update (a scalar for scalar
    coordinates). Coordinates outside the tensor update nothing and give 0. Updates of one
    element happen one at a time, in an order that is not defined between tile blocks nor
    between the elements of one call. Integer adds wrap; float adds round each sum to the dtype
    (their order not defined, see docs/semantics.md); float max/min follow IEEE 754 totalOrder
    (-NaN < -inf < ... < -0.0 < +0.0 < ... < inf < +NaN). Which dtypes each method takes (32-
    and 64-bit integers; float add also f16, bf16; no 8- or 16-bit integers) is Tile IR's rule;
    another is a CompileError."""

    def add(self, indices: _Coords, values: TileLike) -> Tile:
        """``a[i] += v`` atomically, per element; the old values."""
        ...

    def max(self, indices: _Coords, values: TileLike) -> Tile:
        """``a[i] = max(a[i], v)`` atomically, per element; the old values."""
        ...

    def min(self, indices: _Coords, values: TileLike) -> Tile:
        """``a[i] = min(a[i], v)`` atomically, per element; the old values."""
        ...

    def exchange(self, indices: _Coords, values: TileLike) -> Tile:
        """``a[i] = v`` atomically, per element; the old values."""
        ...

    def compare_exchange(self, indices: _Coords, expected: TileLike,
                         desired: TileLike) -> Tile:
        """``a[i] = desired`` where ``a[i] == expected`` (floats compared bit for bit), atomically
        per element; the old values (equal to ``expected`` where the swap happened)."""
        ...
