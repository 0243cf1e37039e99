"""IR types. Frozen dataclasses, compared by value, printed by ``str()``."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from fearless.dtypes import DType, bool_, i64


class Access(Enum):
    """How a kernel may touch an array parameter."""

    READ = "read"          # Slice / Array: shared, read-only
    DISJOINT = "disjoint"  # DisjointSlice / DisjointArray: each thread its own element only
    SHARED = "shared"      # block-shared memory: own-slot writes, other slots after a barrier
    UNSAFE = "unsafe"      # UnsafeSlice: any access, only inside `with fl.unsafe():`
    ATOMIC = "atomic"      # AtomicSlice: atomic read-modify-write operations only

    @property
    def writable(self) -> bool:
        return self is not Access.READ


@dataclass(frozen=True)
class Scalar:
    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True)
class Array:
    """A strided array parameter. ``contiguous`` arrays are C-ordered and get no stride operands."""

    dtype: DType
    ndim: int
    access: Access
    contiguous: bool

    def __str__(self) -> str:
        layout = "" if self.contiguous else ", strided"
        return f"array<{self.dtype.name}, {self.ndim}d, {self.access.value}{layout}>"


@dataclass(frozen=True)
class ThreadIndex:
    """The calling thread's own coordinate ``axis`` in an index space of ``space`` dimensions.

    Only ``simt.thread_index`` produces it; it is the proof that a DisjointSlice write goes to the
    thread's own element. ``simt.index_value`` turns it into a plain i64 (losing the proof).
    ``block=True``: the coordinate within the thread's block (``index_in_block``), the proof that
    a shared-memory write goes to the thread's own slot; unique within a block only.
    """

    space: int
    axis: int
    block: bool = False

    def __str__(self) -> str:
        return f"{'btid' if self.block else 'tid'}<{self.space}d, axis {self.axis}>"


@dataclass(frozen=True)
class LocalRef:
    """A mutable slot holding one value of type ``elem`` (a Python local variable)."""

    elem: "Type"

    def __str__(self) -> str:
        return f"ref<{self.elem}>"


@dataclass(frozen=True)
class Tile:
    """A tile-track value: a static-shape block of elements (``shape`` a tuple of ints >= 1)."""

    dtype: DType
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"tile<{'x'.join(map(str, self.shape))}x{self.dtype.name}>"


class Role(Enum):
    """How a tile kernel may touch a tensor parameter."""

    IN = "in"    # ft.In: shared, read-only, loaded at any tile position
    OUT = "out"  # ft.Out: a partition; each tile block owns exactly one tile of it
    ATOMIC = "atomic"  # ft.Atomic: updated by every tile block, through atomic operations only

    @property
    def written(self) -> bool:
        return self is not Role.IN


@dataclass(frozen=True)
class Layout:
    """Facts about a tensor argument that the Tile IR optimiser needs (part of the cache key).

    ``align``: bytes the base pointer is divisible by (capped at 16); ``shape_div`` and
    ``stride_div``: per axis, the largest power of two (capped at 16) dividing the extent and the
    element stride; ``unit_inner``: the last axis has stride 1. Without these facts tileiras
    cannot use TMA or vector loads (reference/tile-ir.md section 5: 22 vs 667 TFLOP/s).
    """

    align: int = 1
    shape_div: tuple[int, ...] = ()
    stride_div: tuple[int, ...] = ()
    unit_inner: bool = False


@dataclass(frozen=True)
class Persistent:
    """How a persistent launch deals an Out partition's tiles to its tile blocks: block ``b``
    of ``P`` takes tiles ``b, b + P, b + 2P, ...`` of the partition in ``order``: ``"row"``
    (axis 0 fastest, then 1, then 2) or ``"grouped"`` (``group`` tiles along axis 0 at a time,
    walking axis 1 within the group, per axis-2 slice: Triton's L2-friendly matmul order). Both
    orders are bijections onto the tiles, so every tile still has exactly one writer.
    ``stream_k``: the blocks also split the iterations of the kernel's reduction loop
    (``passes/stream_k.py``), in three launches, each compiled alone: ``phase`` 1 runs the
    whole waves of tiles, 2 the pieces of the last, partial wave's tiles (partial sums to a
    workspace), 3 adds each of those tiles' pieces and runs the rest of the body (0: not
    stream-K).
    ``single``: the launch has no more tiles than blocks, so no block gets a second tile: the
    kernel compiles as with one tile block per tile (``passes/persistent.py`` only checks it;
    with ``stream_k``, phase 1, ``passes/stream_k.py`` checks that its loop could be split)."""

    order: str = "grouped"
    group: int = 8
    stream_k: bool = False
    single: bool = False
    phase: int = 0

    def __post_init__(self):
        if (self.phase in _STREAM_K_PHASES) != self.stream_k:
            raise ValueError(f"a stream-K schedule has a phase in 1..3, any other 0; got "
                             f"stream_k={self.stream_k}, phase={self.phase}")


_STREAM_K_PHASES = {1: "stream-k whole tiles", 2: "stream-k pieces", 3: "stream-k fixup"}


@dataclass(frozen=True)
class TensorView:
    """A tile-kernel tensor parameter: ``role`` IN, OUT or ATOMIC; OUT has the partition's tile
    shape and, launched persistently, its ``schedule``."""

    dtype: DType
    ndim: int
    role: Role
    tile_shape: tuple[int, ...] | None = None
    layout: Layout = Layout()
    schedule: Persistent | None = None

    def __str__(self) -> str:
        tile = f", tile {self.tile_shape}" if self.tile_shape else ""
        if self.schedule is not None:
            kind = _STREAM_K_PHASES[self.schedule.phase] if self.schedule.stream_k else "persistent"
            tile += f", {kind} {self.schedule.order}" + (
                f" {self.schedule.group}" if self.schedule.order == "grouped" else "") + (
                " (one tile per block)" if self.schedule.single else "")
        return f"tensor<{self.dtype.name}, {self.ndim}d, {self.role.value}{tile}>"


Type = Scalar | Array | ThreadIndex | LocalRef | Tile | TensorView

BOOL = Scalar(bool_)
INDEX = Scalar(i64)  # the type of sizes, loop counters and index arithmetic (64-bit)
