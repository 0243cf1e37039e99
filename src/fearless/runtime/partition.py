"""Partition: a tensor moved into exclusive, tiled ownership for a kernel's output.

``t.partition(tile_shape)`` (in ``tensor.py``) checks that ``t`` is the only live handle over its
memory, moves ``t`` (the old handle raises MovedError from then on) and returns a Partition
holding a hidden handle of its own. The Partition fixes the static tile shape and the launch
grid; a tile kernel gets exclusive use of one tile per block. It can move on, into a pending
DeviceOperation (``lazy.py``) or a Graph (``graph.py``), which give it back when they are synced
or released; ``unpartition()`` ends it and returns a fresh, usable Tensor over the same buffer.

The model is cutile-rs's ``IntoPartition::partition`` (owned form): a partition consumes the
tensor, ``grid = ceil(shape / tile)`` per axis with dim0 -> x, dim1 -> y, dim2 -> z, outputs are
at most rank 3, and a tail tile may be partial (clipped by the kernel).

A persistent schedule (``schedule=fearless.tile.persistent(...)``, cutile-rs's
``MappedPartitionMut`` in spirit) launches a fixed number of tile blocks, about one wave, instead
of one per tile: block ``b`` of ``P`` runs the kernel body for tiles ``b, b + P, b + 2P, ...`` of
an order the runtime builds (``ir.types.Persistent``), each a bijection onto the tiles. The user
names an order, never a mapping, so no schedule can give one tile to two blocks or leave one out.
A stream-K schedule (``fearless.tile.stream_k``) also splits the kernel's reduction loop between
blocks for the last, partial wave's tiles, in three launches; each tile's output is still
stored by one block, for a shared tile the fixup launch's, which adds every piece's partial sum
first (``passes/stream_k.py``).
"""
from __future__ import annotations

import operator
import weakref

from dataclasses import dataclass
from math import prod

from fearless.compiler.info import tail_split
from fearless.errors import ArgumentTypeError, MovedError, PartitionError
from fearless.runtime.device import multiprocessor_count
from fearless.tracebacks import user_facing

MAX_RANK = 3
ORDERS = ("grouped", "row")


@dataclass(frozen=True)
class Persistent:
    """A persistent schedule for a partition (make it with ``fearless.tile.persistent``):
    ``blocks`` tile blocks (None: one per SM times the kernel's ``occupancy`` hint), each taking
    every ``blocks``-th tile of ``order`` (the compiled kernel depends on the order and group,
    ``ir.types.Persistent``; the block count is the launch's)."""

    blocks: int | None = None
    order: str = "grouped"
    group: int = 8


@user_facing
def persistent(blocks: int | None = None, order: str = "grouped", group: int = 8) -> Persistent:
    """A persistent schedule for ``t.partition(tile_shape, schedule=...)``: the launch runs
    ``blocks`` tile blocks (default: one per SM, times the kernel's ``occupancy`` hint; never
    more than the tiles), and block ``b`` runs the kernel body once for each of the tiles
    ``b, b + blocks, b + 2 * blocks, ...`` in ``order``: ``"grouped"`` (the default: ``group``
    tile rows, along axis 0, at a time, walking axis 1 inside the group, which keeps the rows
    of A and columns of B that concurrent blocks read in L2; Triton's matmul tutorial) or
    ``"row"`` (axis 0 fastest). Inside the kernel nothing changes: ``out.tile_index`` and
    ``out.store`` are the current tile's. Where the tiles are no more than ``blocks``, no block
    would get a second one, and the launch runs a block per tile without the loop over tiles
    (with the loop, 64-wide GEMM tiles ran 1.1-1.3x slower on the H200). A kernel with an
    early ``return`` cannot be launched persistently, whatever the size (CompileError). Raises
    ArgumentTypeError for a non-integer ``blocks`` or ``group``, PartitionError for ``blocks``
    or ``group`` below 1 or an unknown order."""
    for name, value in (("blocks", blocks), ("group", group)):
        if value is None and name == "blocks":
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"persistent({name}=...) takes an int, got {value!r}")
        if value < 1:
            raise PartitionError(f"persistent({name}={value}): at least 1")
    if order not in ORDERS:
        raise PartitionError(f"persistent(order={order!r}): one of {', '.join(ORDERS)}")
    return Persistent(blocks, order, group)


@dataclass(frozen=True)
class StreamK(Persistent):
    """A stream-K schedule (make it with ``fearless.tile.stream_k``): a persistent launch whose
    blocks also share the reduction loops of the last, partial wave's tiles
    (``passes/stream_k.py``)."""


@user_facing
def stream_k(blocks: int | None = None, order: str = "grouped", group: int = 8) -> StreamK:
    """A stream-K schedule for ``t.partition(tile_shape, schedule=...)``, for a kernel whose output
    is a sum over one loop (a GEMM's K loop): the launch runs ``blocks`` tile blocks (default: one
    per SM times the kernel's ``occupancy`` hint, also when there are fewer tiles), which split the
    loop's iterations evenly (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense
    Matrix-Matrix Multiplication on the GPU", PPoPP 2023): whole waves of tiles go one to a block as
    with ``persistent``, and the last, partial wave's iterations, where its tiles are at most a
    quarter of the blocks (else they run whole, one per block as with ``persistent``), are cut into
    equal shares of at least 16 iterations where the loops are long enough (else each of those tiles
    is one block's share), so a tile may be summed by several blocks. It runs as three launches,
    each compiled alone: the whole waves; the pieces, whose partial sums go to a workspace the
    runtime keeps per stream; and the fixup, in which one block per shared tile adds its pieces'
    partials, in the accumulator's dtype and in block order from zero, and runs the rest of the
    body. So each tile is stored once, and the result is the same bits every call (it differs from
    one block's sum only by the order of the additions). No block waits for another. ``order`` and
    ``group`` as for ``persistent``. The kernel must be a sum the compiler can split (CompileError
    otherwise, at the line): one top-level ``for k in range(n)`` whose loop-carried value starts at
    zero and is only updated as ``acc = ft.mma(a, b, acc)`` or ``acc = acc + x``, no other value
    carried between iterations or out of the loop, nothing stored before or inside the loop. Raises
    ArgumentTypeError or PartitionError as ``persistent`` does. Speed on the H200 (f16 GEMM,
    benchmarks/RESULTS.md, sessions 17-18): at M 128, 1.2-1.4x faster than ``persistent`` or one
    tile per block with 128 x 128 tiles and 1.6-1.8x with 128 x 256, but 0.88-0.94x with 64 x 64
    tiles, which one per block are the fastest there (1.0-1.08x with 128 x 64); where the tail is
    too full to split, within 3.5% of ``persistent`` (4096^3, 8192^3, 512 x 4096 x 4096), and where
    such a tail is all the tiles, it runs one block per tile as ``persistent`` does."""
    p = persistent(blocks, order, group)
    return StreamK(p.blocks, p.order, p.group)


def stream_k_launches(tiles: int, blocks: int) -> tuple[int, ...]:
    """The launches (``passes/stream_k.py``'s phases) a stream-K call of ``blocks`` blocks over
    ``tiles`` tiles makes, in order (``Partition.stream_k_phases``)."""
    if not tail_split(tiles, blocks):
        return (1,) if tiles else ()
    return ((1,) if tiles // blocks else ()) + (2, 3)


def splits_every_tile(launches: tuple[int, ...]) -> bool | None:
    """How ``tile_launch.idle_sm_advice`` weighs a call that makes ``launches``
    (``stream_k_launches``; () for any other schedule): its ``split`` (stream-K cuts every
    tile's loop into pieces: no whole wave), or None where the tile count does not say how busy
    the SMs are (whole waves and a split tail keep every SM busy)."""
    if 2 not in launches:
        return False
    return None if 1 in launches else True


def one_block_per_tile(tiles: int, blocks: int, stream_k: bool) -> bool:
    """Whether a persistent (or, with ``stream_k``, a stream-K) launch of ``blocks`` blocks
    over ``tiles`` tiles gives no block a second tile and splits no loop, so that it can run one
    block per tile (``Partition.one_tile_each``, which also asks that such a grid fit CUDA's
    limits)."""
    return tiles <= blocks and not (stream_k and tail_split(tiles, blocks))


def tile_shape_of(tile_shape, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``tile_shape`` (an int or a tuple of ints) checked against a tensor ``shape``.

    Raises ArgumentTypeError (a TypeError) for non-integers and PartitionError (a ValueError)
    when the rank differs from the tensor's, is 0 or above 3, or a tile dimension is below 1.
    """
    if type(tile_shape) is tuple and len(tile_shape) == len(shape) and \
            1 <= len(shape) <= MAX_RANK:
        for d in tile_shape:
            if type(d) is not int or d < 1:
                break
        else:
            return tile_shape  # the common case (what the checks below accept), in a loop
    dims = tile_shape if isinstance(tile_shape, (tuple, list)) else (tile_shape,)
    try:
        if any(isinstance(d, bool) for d in dims):
            raise TypeError
        dims = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ArgumentTypeError(f"a tile shape is an int or a tuple of ints, got "
                                f"{tile_shape!r}") from None
    if len(dims) != len(shape):
        raise PartitionError(f"tile shape {dims} has rank {len(dims)}, but the tensor has shape "
                         f"{shape} (rank {len(shape)}); give one tile dimension per axis")
    if not 1 <= len(dims) <= MAX_RANK:
        raise PartitionError(f"only tensors of rank 1 to {MAX_RANK} can be partitioned, this one has "
                         f"shape {shape}")
    if any(d < 1 for d in dims):
        raise PartitionError(f"tile shape {dims} has a dimension below 1")
    return dims


def grid_of(shape: tuple[int, ...], tile: tuple[int, ...]) -> tuple[int, int, int]:
    """Tiles per axis (ceil-div), padded to 3 with 1s: dim0 -> x, dim1 -> y, dim2 -> z."""
    grid = tuple(-(-n // t) for n, t in zip(shape, tile))
    return grid + (1,) * (MAX_RANK - len(grid))


class Partition:
    """A tensor split into tiles of ``tile_shape`` for exclusive use by one kernel launch.

    Make one with ``Tensor.partition(tile_shape, schedule=None)``. Attributes: ``tile_shape``,
    ``grid`` (tiles along x, y, z; dim0 is x), ``schedule`` (None, or the ``Persistent`` schedule
    it launches with), ``shape``/``dtype``/``ndim``/``backend`` (the tensor's). While a
    pending DeviceOperation or a Graph holds it, and after ``unpartition()``, every use but these
    attributes raises MovedError.
    """

    __slots__ = ("__weakref__", "_ended", "_holder", "_origin", "_tensor", "grid", "schedule",
                 "tile_shape")

    def __init__(self, tensor, tile_shape: tuple[int, ...], schedule: Persistent | None = None,
                 origin=None):
        self._tensor = tensor           # the hidden handle: the only live one over the memory
        self._origin = weakref.ref(origin) if origin is not None else None  # for abandon()
        self.tile_shape: tuple[int, ...] = tile_shape
        self.grid: tuple[int, int, int] = grid_of(tensor.shape, tile_shape)
        self.schedule = schedule
        self._holder = None             # weakref to the operation or graph holding it
        self._ended = False             # True: unpartition() was called; "abandoned": abandon()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._tensor.shape

    @property
    def dtype(self):
        return self._tensor.dtype

    @property
    def ndim(self) -> int:
        return self._tensor.ndim

    @property
    def backend(self) -> str:
        return self._tensor.backend

    def __repr__(self) -> str:
        state = ("unpartitioned" if self._ended else
                 f"held by {self._held_by().label}" if self._held_by() is not None else "ready")
        schedule = "" if self.schedule is None else f", schedule={self.schedule}"
        return (f"Partition(shape={self.shape}, dtype={self.dtype}, tile_shape={self.tile_shape}, "
                f"grid={self.grid}{schedule}, {state})")

    def launch_grid(self, per_sm: int = 1) -> tuple[int, int, int]:
        """The tile blocks a launch over this partition runs (x, y, z): ``grid``, one per tile;
        persistent, ``(P, 1, 1)`` with ``P`` the schedule's blocks (default ``per_sm`` per SM,
        the kernel's occupancy) when there are more tiles than that, else ``grid``
        (``one_tile_each``); stream-K, ``(P, 1, 1)`` however few the tiles (none for no
        tiles), except where it runs one block per tile as persistent does (``one_tile_each``)."""
        if self.schedule is None:
            return self.grid
        tiles, blocks = prod(self.grid), self._blocks(per_sm)
        if self._one_each(tiles, blocks):
            return self.grid
        if isinstance(self.schedule, StreamK):  # more blocks than tiles share their loops
            return (blocks if tiles else 0, 1, 1)
        return (min(blocks, tiles), 1, 1)

    def stream_k_phases(self, per_sm: int = 1) -> tuple[int, ...]:
        """The launches a stream-K call over this partition makes (``passes/stream_k.py``), in
        order: 1 (whole tiles) when there is a whole wave of tiles for the ``P`` blocks
        (``per_sm`` as for ``launch_grid``), 2 and 3 (the pieces of the tiles left, then their
        fixup) when tiles are left, and they are few enough to split (``tail_split``; else
        launch 1 runs them whole, and where they are all the tiles it is compiled without the
        loop over tiles: ``one_tile_each``); none for no tiles."""
        return stream_k_launches(prod(self.grid), self._blocks(per_sm))

    def one_tile_each(self, per_sm: int = 1) -> bool:
        """Whether a persistent launch over this partition has no more tiles than blocks
        (``per_sm`` as for ``launch_grid``) and a grid of one block per tile fits CUDA's
        limits: then no block gets a second tile, and the launch runs one block per tile,
        compiled without the loop over tiles (``ir.types.Persistent.single``). A stream-K
        launch does so too where it would not split those tiles' loops (``tail_split``)."""
        if self.schedule is None:
            return False
        return self._one_each(prod(self.grid), self._blocks(per_sm))

    def _blocks(self, per_sm: int) -> int:
        """A persistent launch's tile blocks: the schedule's, else ``per_sm`` per SM."""
        return self.schedule.blocks or max(per_sm, 1) * multiprocessor_count()

    def _one_each(self, tiles: int, blocks: int) -> bool:
        if not one_block_per_tile(tiles, blocks, isinstance(self.schedule, StreamK)):
            return False
        # imported here: tile_launch imports this module (through runtime.args and tensor)
        from fearless.runtime.tile_launch import fits, hardware_grid
        return fits(hardware_grid(self.grid, len(self.tile_shape) == 2))

    @user_facing
    def unpartition(self):
        """End the partition and return a fresh usable Tensor over the same buffer.

        The Partition is spent afterwards (MovedError), and the handle that was partitioned
        stays moved: use the returned tensor. Raises MovedError while an operation or graph
        holds the partition, or when it was unpartitioned before.
        """
        tensor = self._launch_tensor("unpartition it")
        self._ended = True
        fresh = tensor._handle()
        tensor._moved = "given back by Partition.unpartition()"
        return fresh

    def abandon(self, original) -> None:
        """Give a partition no operation took back to the handle ``original`` it was made from
        (``original.partition(...)`` returned it): the partition ends and ``original`` is usable
        again. For code that partitions arguments on a caller's behalf and then fails before
        any work holds them (``fearless.tile.tuning``). A partition an operation or graph holds
        stays as it is; another tensor than ``original`` is refused (a moved tensor comes
        back only from its own partition)."""
        if self._origin is None or self._origin() is not original:
            raise MovedError(f"{original!r} is not the tensor this partition was made from")
        if self._ended or self._holder is not None or original._moved is None:
            return
        self._ended = "abandoned"
        # the hidden handle dies (kept for shape and dtype): a cancelled operation that still
        # holds it must not count it as a live view of the memory, which partition() refuses
        self._tensor._moved = "abandoned with its Partition"
        original._moved = None

    # -- for launchers and operations (see lazy.py's docstring) -----------------------------
    def _held_by(self):
        holder = self._holder() if self._holder is not None else None
        if holder is None:
            self._holder = None
        return holder

    def _check(self, action: str) -> None:
        """Raise MovedError unless this partition is usable now."""
        if not self._ended and self._holder is None:
            return  # the common case, checked without building a message
        what = (f"Partition(shape={self.shape}, dtype={self.dtype}, "
                f"tile_shape={self.tile_shape})")
        if self._ended == "abandoned":
            raise MovedError(f"cannot {action}: {what} was given back to the tensor it was "
                             "made from", help="use that tensor, or partition it again")
        if self._ended:
            raise MovedError(f"cannot {action}: {what} was unpartitioned; its tensor moved to the "
                             "Tensor that unpartition() returned",
                             help="use that tensor, or partition it again")
        holder = self._held_by()
        if holder is not None:
            raise MovedError(f"cannot {action}: {what} was moved into {holder.label}",
                             help=holder.give_back_hint)

    def _launch_tensor(self, action: str = "use it"):
        """The hidden Tensor (pointer, shape, strides, dtype) for a launch; MovedError when the
        partition is held or ended."""
        self._check(action)
        return self._tensor

    def _hold(self, owner) -> None:
        """Move this partition into ``owner`` (an operation or graph with ``label`` and
        ``give_back_hint``); MovedError when it is not free."""
        self._check("pass it to an operation")
        self._holder = weakref.ref(owner)

    def _give_back(self, owner) -> None:
        if self._held_by() is owner:
            self._holder = None
