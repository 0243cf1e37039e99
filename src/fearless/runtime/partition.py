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
"""
from __future__ import annotations

import operator
import weakref

from fearless.errors import ArgumentTypeError, MovedError, PartitionError
from fearless.tracebacks import user_facing

MAX_RANK = 3


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

    Make one with ``Tensor.partition(tile_shape)``. Attributes: ``tile_shape``, ``grid`` (tiles
    along x, y, z; dim0 is x), ``shape``/``dtype``/``ndim``/``backend`` (the tensor's). While a
    pending DeviceOperation or a Graph holds it, and after ``unpartition()``, every use but these
    attributes raises MovedError.
    """

    __slots__ = ("__weakref__", "_ended", "_holder", "_tensor", "grid", "tile_shape")

    def __init__(self, tensor, tile_shape: tuple[int, ...]):
        self._tensor = tensor           # the hidden handle: the only live one over the memory
        self.tile_shape: tuple[int, ...] = tile_shape
        self.grid: tuple[int, int, int] = grid_of(tensor.shape, tile_shape)
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
        return (f"Partition(shape={self.shape}, dtype={self.dtype}, tile_shape={self.tile_shape}, "
                f"grid={self.grid}, {state})")

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
        stays as it is."""
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
