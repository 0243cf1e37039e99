"""Stream-K's workspace -> Tile IR: ``tile.partial_store`` and ``tile.partial_load`` (part of
``lower``; the schedule is ``passes/stream_k.py``'s).

A stream-K kernel's entry takes two more arrays after its parameters (``abi``'s order): the
partial sums, two slots of the accumulator's tile per block of the launch (a pointer and the
slot count), and one i32 counter per shared tile (a pointer and the count), all zero between
launches. The runtime keeps them per stream (``runtime/workspace.py``). A block stores its
partial sum in its slot, then adds its piece's iterations to the tile's counter with one
``acq_rel`` atomic at device scope: the release publishes the partial, and in the block whose
add completes the tile the acquire makes every other partial visible; that block resets the
counter to zero (so the next launch on the stream finds it so) and reads the slots. Nothing
waits for another block, so no schedule of the blocks can hang. The atomic is on a 0-d tile:
it runs once per tile block and its result is the block's, as the ``if`` on it needs.
Partial sums move through ordinary loads and stores, not TMA (``allow_tma=False``): TMA's
copies run in the async proxy, which the atomic's release and acquire would not order
without proxy fences. Every workspace access of a block is chained through one token slot
(``WORKSPACE``), in program order, across ``for`` and ``if`` as the variables' slots are.
"""
from __future__ import annotations

from math import prod

from fearless.backends.tileir import tir
from fearless.ir.opdef import Op

WORKSPACE = ("stream-k workspace",)   # the token slot of the block's workspace accesses
WORKSPACE_ALIGN = 16                  # bytes: the runtime's slots start 16-byte aligned


def entry_params(fn, elem) -> list:
    """The entry parameters the workspace adds for IR function ``fn`` (none unless it was
    scheduled stream-K): the partials' pointer and slot count, the counters' pointer and count;
    ``elem``: the lowering's element type of a dtype."""
    acc = fn.attrs.get("stream_k")
    if acc is None:
        return []
    return [tir.tile(tir.ptr(elem(acc.dtype))), tir.tile(tir.I32),
            tir.tile(tir.ptr(tir.I32)), tir.tile(tir.I32)]


def prologue(low, args, elem) -> None:
    """Take the workspace's entry parameters from ``args`` and make the partials' view."""
    acc = low.fn.attrs.get("stream_k")
    if acc is None:
        return
    b = low.b
    partials = b.assume_div_by(next(args), WORKSPACE_ALIGN)
    slots = b.assume_bounded(next(args), 0, None)
    counters = next(args)
    next(args)   # the counters' count: one per slot
    shape = tuple(acc.shape)
    strides = [prod(shape[k + 1:]) for k in range(len(shape))]
    tv = tir.tensor_view(elem(acc.dtype), [None, *shape], [prod(shape), *strides])
    view = b.make_tensor_view(partials, tv, [slots], [])
    low.workspace = (b.make_partition_view(view, (1, *shape)), counters, shape)
    low.slots[WORKSPACE] = low.token


def _index(low, value):
    """The partial tile's view index of slot ``value`` (an i64)."""
    _, _, shape = low.workspace
    return [low.b.trunci(low.v(value), tir.I32)] + [low.const(0, tir.I32)] * len(shape)


_NO_TMA = {"allow_tma": False}


def _partial_store(low, op):
    acc, slot = op.operands
    view, _, shape = low.workspace
    b = low.b
    low.slots[WORKSPACE] = b.store_view_tko(b.reshape(low.v(acc), (1, *shape)), view,
                                            _index(low, slot), token=low.slots[WORKSPACE],
                                            hints={low.arch or "default": _NO_TMA})


def _arrive(low, op):
    count, total = (low.b.trunci(low.v(v), tir.I32) for v in op.operands[1:])
    _, counters, _ = low.workspace
    b = low.b
    counter = b.offset(counters, low.v(op.operands[0]))
    before, done = b.atomic_rmw_tko(counter, "add", count, token=low.slots[WORKSPACE],
                                    ordering="acq_rel", scope="device")
    last = b.cmpi("eq", b.addi(before, count), total)
    low.slots[WORKSPACE] = b.store_ptr_tko(low.const(0, tir.I32), counter, mask=last,
                                           token=done)
    low.set(op, last)


def _partial_load(low, op):
    (slot,) = op.operands
    view, _, shape = low.workspace
    b = low.b
    part, low.slots[WORKSPACE] = b.load_view_tko(view, _index(low, slot),
                                                 token=low.slots[WORKSPACE],
                                                 hints={low.arch or "default": _NO_TMA})
    low.set(op, b.reshape(part, shape))


RULES = {Op.TILE_PARTIAL_STORE: _partial_store, Op.TILE_ARRIVE: _arrive,
         Op.TILE_PARTIAL_LOAD: _partial_load}
