"""A kernel's ABI: the ordered parameter slots its entry takes, emitted by each backend.

The backends decide the layout (``backends/llvm/lower.py`` for SIMT kernels,
``backends/tileir/lower.py`` for tile kernels) and describe it with an ``Abi``; the runtime packs
launch arguments from it (``runtime/pack.py``) without knowing either backend. A slot is one
value: an array parameter's device pointer, one extent or stride (in elements), a scalar
parameter's value, or a launch-wide value the backend added (the bounds-error word's address, the
thread count of a coarsened axis). ``code`` is its ``struct`` code; 16-bit floats travel as their
bits (``"H"``), as the PTX ``.param`` space holds them.
"""
from __future__ import annotations

from typing import NamedTuple

from fearless import dtypes

PTR, EXTENT, STRIDE, SCALAR, ERROR_WORD, THREADS = \
    "ptr", "extent", "stride", "scalar", "error_word", "threads"

_CODES = {"bool": "B", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "f16": "H", "bf16": "H",
          "i32": "i", "u32": "I", "f32": "f", "i64": "q", "u64": "Q", "f64": "d"}


class Slot(NamedTuple):
    """One parameter value: ``kind`` (PTR ... THREADS), the index of the kernel parameter it
    comes from (-1 for ERROR_WORD and THREADS), the axis of an EXTENT or STRIDE (and of the
    THREADS count), and its ``struct`` code."""

    kind: str
    param: int
    axis: int
    code: str


class Abi(NamedTuple):
    """The ordered slots of a kernel entry. ``offsets``: their byte offsets when the backend
    fixes them, else None (each slot aligned to its own size, the PTX ``.param`` rule; the
    runtime may also ask the driver)."""

    slots: tuple
    offsets: tuple | None = None

    def has(self, kind: str) -> bool:
        return any(s.kind == kind for s in self.slots)


def scalar_code(dtype: dtypes.DType) -> str:
    """The ``struct`` code of a scalar parameter of ``dtype`` (16-bit floats as bits)."""
    return _CODES[dtype.name]


def array_slots(param: int, ndim: int, strides: int, index_code: str) -> list[Slot]:
    """An array parameter's slots: its pointer, ``ndim`` extents, then the strides of its first
    ``strides`` axes, each extent and stride of struct code ``index_code``."""
    return ([Slot(PTR, param, 0, "Q")] + [Slot(EXTENT, param, k, index_code) for k in range(ndim)]
            + [Slot(STRIDE, param, k, index_code) for k in range(strides)])


def simt_abi(params, checked: bool = False, coarsen_axis: int | None = None) -> Abi:
    """The slots of a SIMT kernel entry (``backends/llvm/lower.py`` emits it; foreign kernels,
    ``kernel/foreign.py``, must take it). ``params``: per kernel parameter ``(dtype, ndim,
    contiguous)``, ``ndim`` None for a scalar. A scalar is one slot of its own dtype; an array is
    its pointer, its extents (i64) and, when not contiguous, its strides in elements (i64).
    ``checked``: the launch's error word follows (a pointer); ``coarsen_axis``: then the thread
    count along that axis (i64)."""
    slots = []
    for k, (dtype, ndim, contiguous) in enumerate(params):
        if ndim is None:
            slots.append(Slot(SCALAR, k, 0, scalar_code(dtype)))
        else:
            slots += array_slots(k, ndim, 0 if contiguous else ndim, "q")
    if checked:
        slots.append(Slot(ERROR_WORD, -1, 0, "Q"))
    if coarsen_axis is not None:
        slots.append(Slot(THREADS, -1, coarsen_axis, "q"))
    return Abi(tuple(slots))
