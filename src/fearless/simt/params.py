"""Parameter kinds for ``@fearless.kernel`` signatures.

    Slice[T]            1-d array, read-only, shared by all threads
    Array[T, N]         N-d array, read-only
    DisjointSlice[T]    1-d array; each thread may read and write only the element at its own
                        ``fl.thread.index_1d()``
    DisjointArray[T, N] N-d array; each thread may touch only ``[r, c]`` from ``index_2d()``
                        (``[d0, d1, d2]`` from ``index_3d()`` when N is 3)
    AtomicSlice[T]      1-d array touched only through atomic methods that return the old value:
                        ``a.add(i, v)``, ``sub``, ``min``, ``max``, ``and_``, ``or_``, ``xor``,
                        ``exchange(i, v)``, ``compare_exchange(i, expected, new)``; keywords
                        ``scope="block"|"device"|"system"`` (default device) and
                        ``order="relaxed"|"acquire"|"release"|"acq_rel"|"seq_cst"`` (default
                        relaxed). Integers (32/64-bit) take every op; floats take add, sub,
                        exchange (and compare_exchange for f32/f64).
    UnsafeSlice[T]      1-d array with any access, only inside ``with fl.unsafe():``

``T`` is a dtype (``fl.f32``), a ``typing.TypeVar`` (generic: every parameter naming the same
TypeVar gets the same dtype at a call), or left out (``fl.Slice``: any dtype). A scalar parameter
is annotated with a dtype, with ``int``/``float``/``bool`` (i64/f64/bool), with a TypeVar, or not
at all (its type comes from the argument).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


@dataclass(frozen=True)
class ArrayKind:
    """What ``Slice[f32]`` and friends evaluate to: access, element type (or None/TypeVar), rank."""

    name: str
    writable: bool
    dtype: Any
    ndim: int

    @property
    def access(self) -> str:
        """read, disjoint, atomic or unsafe (the IR's Access values)."""
        if not self.writable:
            return "read"
        return {"AtomicSlice": "atomic", "UnsafeSlice": "unsafe"}.get(self.name, "disjoint")

    def __repr__(self) -> str:
        t = getattr(self.dtype, "__name__", None) or str(self.dtype)
        return f"fearless.{self.name}[{t}, {self.ndim}]"


class _ArrayFamily:
    """``Slice``, ``DisjointSlice`` (rank 1) and ``Array``, ``DisjointArray`` (rank given)."""

    def __init__(self, name: str, writable: bool, ndim: int | None):
        self._name, self._writable, self._ndim = name, writable, ndim

    def __getitem__(self, item) -> ArrayKind:
        if self._ndim is not None:  # Slice[T]
            return ArrayKind(self._name, self._writable, item, self._ndim)
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int)
                and item[1] >= 1):
            raise TypeError(f"write fearless.{self._name}[dtype, ndim], for example "
                            f"fearless.{self._name}[fl.f32, 2]")
        return ArrayKind(self._name, self._writable, item[0], item[1])

    def any_dtype(self) -> ArrayKind:
        """The kind for a bare ``fl.Slice`` annotation: generic dtype, rank 1 (or 2 for Array)."""
        return ArrayKind(self._name, self._writable, None, self._ndim or 2)

    def __repr__(self) -> str:
        return f"fearless.{self._name}"


if TYPE_CHECKING:  # a type checker sees classes with the operations a kernel may use
    from fearless.simt.views import (Array, AtomicSlice, DisjointArray, DisjointSlice, Slice,
                                     UnsafeSlice)
else:
    Slice = _ArrayFamily("Slice", False, 1)
    DisjointSlice = _ArrayFamily("DisjointSlice", True, 1)
    Array = _ArrayFamily("Array", False, None)
    DisjointArray = _ArrayFamily("DisjointArray", True, None)
    AtomicSlice = _ArrayFamily("AtomicSlice", True, 1)
    UnsafeSlice = _ArrayFamily("UnsafeSlice", True, 1)
