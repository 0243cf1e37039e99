"""What a static type checker (pyright, mypy) sees of the SIMT kernel language.

The compiler reads a kernel's annotations as *kinds* (``fl.Slice[f32]`` is an ArrayKind, see
``fearless.simt.params``) and never runs the body; a type checker reads the body as Python.
These classes tell it what a kernel's values offer: an array parameter has ``len()``, indexing
and ``shape``; a DisjointSlice can be assigned to; atomic and shared arrays have the atomic
methods. A scalar is the Python number type of its dtype's kind (``fl.f32`` is ``float``,
``fl.i32`` is ``int``, ``fl.bool_`` is ``bool``), so ``a: fl.f32``, ``acc: fl.f64 = 0`` and
``fl.f32(x)`` all check. Subscripts (``Slice[f32]``, ``Array[f32, 2]``) are accepted and
ignored (``__class_getitem__``): elements are ``Any`` to the checker, since no static type
system expresses the rank in ``Array[T, 2]`` or the language's promotion of weak literals. The
compiler checks those, with errors that point at the source line.

``fearless/__init__.py`` and ``fearless.simt.params`` give type checkers these names in place
of the runtime objects (under ``typing.TYPE_CHECKING``); the intrinsics' annotations use them.
No method here runs: the compiler never calls them, and kernels never receive these objects.
The price: to a checker ``fl.f16`` is ``float``, so host code reading a dtype's attributes
(``fl.f16.numpy``, ``.itemsize``) is flagged; ``fearless.dtypes.f16`` (the same object) is typed
as the DType it is, and ``tensor.dtype`` is one too.
"""
from __future__ import annotations

from typing import Any, Callable, Literal, TypeAlias, Union

from fearless.dtypes import DTypeLike as DTypeLike  # re-exported for the intrinsics

# The dtypes, as a type checker sees them: the Python number type of each dtype's kind.
bool_: TypeAlias = bool
i8: TypeAlias = int
i16: TypeAlias = int
i32: TypeAlias = int
i64: TypeAlias = int
u8: TypeAlias = int
u16: TypeAlias = int
u32: TypeAlias = int
u64: TypeAlias = int
f16: TypeAlias = float
bf16: TypeAlias = float
f32: TypeAlias = float
f64: TypeAlias = float

Index: TypeAlias = Union[int, tuple[int, ...]]   # an element: one integer per axis
Scope: TypeAlias = Literal["block", "device", "system"]
Order: TypeAlias = Literal["relaxed", "acquire", "release", "acq_rel", "seq_cst"]


class _Array:
    """What every array has inside a kernel: its extents, and a cast to its element type."""

    def __class_getitem__(cls, item: Any) -> Any:
        """``Slice[f32]``, ``Array[f32, 2]``: the checker takes the class (see the module)."""
        return cls

    def __len__(self) -> int:
        """The extent of axis 0."""
        ...

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents, one per axis."""
        ...

    @property
    def ndim(self) -> int:
        """The number of axes (a compile-time constant)."""
        ...

    @property
    def size(self) -> int:
        """The number of elements."""
        ...

    @property
    def dtype(self) -> Callable[[Any], Any]:
        """The element type; ``x.dtype(v)`` casts ``v`` to it (for generic kernels)."""
        ...


class _Readable(_Array):
    def __getitem__(self, index: Index) -> Any:
        """The element at ``index`` (one integer per axis). Out of bounds: 0, and
        ``KernelBoundsError`` at the next synchronisation."""
        ...


class _Atomics:
    """Atomic read-modify-write methods (``AtomicSlice`` and shared arrays). Each returns the
    element's old value. ``scope``: which threads see the operation in order ("block" for
    shared arrays by default, else "device"); ``order``: the memory ordering (default
    "relaxed"). PTX ``atom.<order>.<scope>``."""

    def add(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] += value``; returns the old value."""
        ...

    def sub(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] -= value``; returns the old value."""
        ...

    def min(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] = min(a[index], value)`` (integers); returns the old value."""
        ...

    def max(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] = max(a[index], value)`` (integers); returns the old value."""
        ...

    def and_(self, index: Index, value: Any, *, scope: Scope = "device",
             order: Order = "relaxed") -> Any:
        """``a[index] &= value`` (integers); returns the old value."""
        ...

    def or_(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] |= value`` (integers); returns the old value."""
        ...

    def xor(self, index: Index, value: Any, *, scope: Scope = "device",
            order: Order = "relaxed") -> Any:
        """``a[index] ^= value`` (integers); returns the old value."""
        ...

    def exchange(self, index: Index, value: Any, *, scope: Scope = "device",
                 order: Order = "relaxed") -> Any:
        """``a[index] = value``; returns the old value."""
        ...

    def compare_exchange(self, index: Index, expected: Any, new: Any, *, scope: Scope = "device",
                         order: Order = "relaxed") -> Any:
        """``a[index] = new`` if it equals ``expected``; returns the old value either way."""
        ...


class Slice(_Readable):
    """A read-only 1-d array parameter, shared by all threads."""


class Array(_Readable):
    """A read-only N-d array parameter: ``a[r, c]``."""


class DisjointSlice(_Readable):
    """A 1-d array each thread reads and writes only at its own ``fl.thread.index_1d()``."""

    def __setitem__(self, index: Index, value: Any) -> None:
        """Write the thread's own element (a write past the end is skipped)."""
        ...


class DisjointArray(DisjointSlice):
    """An N-d array each thread touches only at its own ``index_2d()`` (or, 3-d,
    ``index_3d()``) element (or, 2-d, elements the compiler proves are its own)."""


class AtomicSlice(_Array, _Atomics):
    """A 1-d array touched only through its atomic methods."""


class UnsafeSlice(DisjointSlice):
    """A 1-d array with any access, only inside ``with fl.unsafe():``."""


class SharedArray(DisjointSlice, _Atomics):
    """A block-shared array (``fl.shared.array``, ``fl.shared.dynamic``): a thread writes its own
    slot; reads of other slots need a barrier in between; the atomic methods default to
    ``scope="block"``."""
