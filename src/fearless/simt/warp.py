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
Only valid inside kernels.
"""
from __future__ import annotations

from fearless.simt.thread import _stub

FULL = 0xFFFFFFFF
SIZE = 32

lane = _stub("warp.lane")
index = _stub("warp.index")
shuffle = _stub("warp.shuffle")
shuffle_down = _stub("warp.shuffle_down")
shuffle_up = _stub("warp.shuffle_up")
shuffle_xor = _stub("warp.shuffle_xor")
ballot = _stub("warp.ballot")
any = _stub("warp.any")  # shadows the builtin on purpose: fl.warp.any mirrors __any_sync
all = _stub("warp.all")
reduce_sum = _stub("warp.reduce_sum")
reduce_max = _stub("warp.reduce_max")
reduce_min = _stub("warp.reduce_min")
