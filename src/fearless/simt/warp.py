"""``fearless.warp``: operations among the 32 lanes of a warp (CUDA ``__shfl_*_sync``,
``__ballot_sync``, ``__any_sync``, ``__all_sync``, ``__reduce_*_sync``).

A warp is 32 consecutive threads of a block in x-fastest order (linear slot
``threadIdx.y * blockDim.x + threadIdx.x``, lanes ``slot % 32``). Every operation names the lanes
taking part with ``mask`` (a u32, bit k = lane k), by default ``FULL`` (all 32 lanes).

    lane()                              this thread's lane, 0..31 (i64)
    index()                             this thread's warp within the block, slot // 32 (i64)
    shuffle(value, src_lane, mask=FULL, width=32)     value of lane src_lane
    shuffle_down(value, delta, mask=FULL, width=32)   value of lane + delta
    shuffle_up(value, delta, mask=FULL, width=32)     value of lane - delta
    shuffle_xor(value, lane_mask, mask=FULL, width=32)  value of lane ^ lane_mask
    ballot(pred, mask=FULL) -> u32      bit k set when lane k is in mask and its pred is true
    any(pred, mask=FULL) -> bool        some lane of mask has a true pred
    all(pred, mask=FULL) -> bool        every lane of mask has a true pred
    reduce_sum / reduce_max / reduce_min(value, mask=FULL)   the same result in every lane of
                                        mask; floats: with FULL a butterfly (xor 16, 8, 4, 2, 1),
                                        else a left fold in lane order; f16/bf16 in f32, rounded
                                        once; integers wrap

Shuffles take any scalar type and follow PTX ``shfl.sync`` exactly (PTX ISA, "Parallel
Synchronization and Communication Instructions: shfl.sync"): ``width`` (a constant power of two)
splits the warp into segments; a source lane past the segment (``shuffle_down``/``xor``), before
it (``shuffle_up``) or with bits set above the segment (``shuffle``, e.g. ``src_lane >= 32``)
gives the caller's own value, and ``shuffle`` wraps ``src_lane`` modulo ``width`` otherwise.

Safety: every lane of ``mask`` must reach the operation together. With the default mask the
compiler proves it (no condition that differs within a warp may guard the call, no lane may have
left early; conditions on ``index()`` are fine), and a launch of such a kernel needs blocks of a
multiple of 32 threads. An explicit ``mask`` other than ``FULL``, or any warp operation under a
lane-dependent condition, needs ``with fl.unsafe():`` and an explicit mask; the cpu backend then
checks at run time that exactly the lanes of the mask arrive, with one mask.
Every function here is an intrinsic: only valid inside kernels (CompileError on the host).
"""
from __future__ import annotations

from typing import TypeVar

from fearless.simt.stub import intrinsic

FULL = 0xFFFFFFFF
SIZE = 32
_Number = TypeVar("_Number", bound=float)  # any scalar: int and bool are floats to a checker
_intrinsic = intrinsic("fearless.warp")

# `any` and `all` mirror __any_sync/__all_sync as fl.warp.any/all; `import *` leaves them out,
# so that it never replaces the builtins
__all__ = ["FULL", "SIZE", "lane", "index", "shuffle", "shuffle_down", "shuffle_up",
           "shuffle_xor", "ballot", "reduce_sum", "reduce_max", "reduce_min"]


@_intrinsic
def lane() -> int:
    """This thread's lane in its warp, 0..31 (i64): ``index_in_block() % 32``."""


@_intrinsic
def index() -> int:
    """This thread's warp within its block, ``index_in_block() // 32`` (i64). A condition on it
    is uniform within each warp, so full-mask warp operations may sit under it."""


@_intrinsic
def shuffle(value: _Number, src_lane: int, mask: int = FULL, width: int = 32) -> _Number:
    """The ``value`` of lane ``src_lane`` (``__shfl_sync``), any scalar type.

    ``width`` (a constant power of two up to 32) splits the warp into segments and
    ``src_lane`` counts within the caller's segment, modulo ``width``; a ``src_lane`` with bits
    set above the segment gives the caller's own value. ``mask``: the lanes taking part (see
    the module docstring; other than ``FULL`` only inside ``fl.unsafe()``).
    """


@_intrinsic
def shuffle_down(value: _Number, delta: int, mask: int = FULL, width: int = 32) -> _Number:
    """The ``value`` of lane ``lane + delta`` (``__shfl_down_sync``); past the end of the
    caller's segment of ``width`` lanes, the caller's own value."""


@_intrinsic
def shuffle_up(value: _Number, delta: int, mask: int = FULL, width: int = 32) -> _Number:
    """The ``value`` of lane ``lane - delta`` (``__shfl_up_sync``); before the start of the
    caller's segment of ``width`` lanes, the caller's own value."""


@_intrinsic
def shuffle_xor(value: _Number, lane_mask: int, mask: int = FULL, width: int = 32) -> _Number:
    """The ``value`` of lane ``lane ^ lane_mask`` (``__shfl_xor_sync``, a butterfly); outside
    the caller's segment of ``width`` lanes, the caller's own value."""


@_intrinsic
def ballot(pred: bool, mask: int = FULL) -> int:
    """A u32 with bit k set when lane k is in ``mask`` and its ``pred`` is true
    (``__ballot_sync``); the same in every lane."""


@_intrinsic
def any(pred: bool, mask: int = FULL) -> bool:  # noqa: A001 - fl.warp.any is __any_sync
    """Whether some lane of ``mask`` has a true ``pred`` (``__any_sync``); the same in every
    lane."""


@_intrinsic
def all(pred: bool, mask: int = FULL) -> bool:  # noqa: A001 - fl.warp.all is __all_sync
    """Whether every lane of ``mask`` has a true ``pred`` (``__all_sync``); the same in every
    lane."""


@_intrinsic
def reduce_sum(value: _Number, mask: int = FULL) -> _Number:
    """The sum of ``value`` over the lanes of ``mask``, the same result in every one of them.

    Integers wrap (``redux.sync`` up to 32 bits); floats: with ``FULL`` a butterfly (xor 16,
    8, 4, 2, 1), else a left fold in lane order, so the result is identical on both backends;
    f16/bf16 are summed in f32 and rounded once. A bool is a CompileError (count with
    ``ballot``).
    """


@_intrinsic
def reduce_max(value: _Number, mask: int = FULL) -> _Number:
    """The maximum of ``value`` over the lanes of ``mask``, the same in every one of them
    (order as for ``reduce_sum``)."""


@_intrinsic
def reduce_min(value: _Number, mask: int = FULL) -> _Number:
    """The minimum of ``value`` over the lanes of ``mask``, the same in every one of them
    (order as for ``reduce_sum``)."""
