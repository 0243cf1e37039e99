"""Stream-K's workspace -> Tile IR: ``tile.partial_store`` and ``tile.partial_load`` (part of
``lower``; the schedule is ``passes/stream_k.py``'s).

A stream-K kernel's entry takes one more array after its parameters (``abi``'s order): the
partial sums, two slots of the accumulator's tile per block of the launch (a pointer and the
slot count). The runtime keeps it per stream (``runtime/workspace.py``). The pieces launch
stores each piece's partial sum in its slot; the fixup launch, which the stream runs after it,
reads them. The launch boundary orders the two, so the partial sums may move through TMA
(bulk tensor copies), as any tile store and load (unless the kernel is compiled without TMA,
``FEARLESS_TMA=0``). Within one launch the workspace is only written (pieces: each slot by one
block) or only read (fixup), so its accesses need no order among themselves: each takes the
entry token (after ``gdc_wait`` where the launch is a dependent one), as an unordered tile load
does. Chained through one token, the fixup's loads made tileiras 13.5 stage every partial
sum through shared memory in 2 KB steps, each behind a barrier (sm_90 SASS of the 128 x 128
fixup: 546 mbarrier operations and 36 block barriers; with the entry token none and 15, and the
32 16-byte loads of a partial issued back to back), 10-24 us per 128 x 128 partial sum on the
H200 (session 16). Where ``schedule.orders_tiles`` (small tiles), the pieces' stores are chained
(slot ``PIECE_STORES``, carried through loops as the variables' slots are), and the next piece's
loads follow them (``schedule.py``'s ``tile.select``: where they did not, ptxas serialised every
wgmma of a 64-wide tile).
"""
from __future__ import annotations

from math import prod

from fearless.backends.tileir import schedule, tir
from fearless.ir.opdef import Op
from fearless.ir.types import Role, TensorView

WORKSPACE_ALIGN = 16                  # bytes: the runtime's slots start 16-byte aligned


def entry_params(fn, elem) -> list:
    """The entry parameters the workspace adds for IR function ``fn`` (none unless it was
    scheduled stream-K): the partials' pointer and slot count; ``elem``: the lowering's element
    type of a dtype."""
    acc = fn.attrs.get("stream_k")
    if acc is None:
        return []
    return [tir.tile(tir.ptr(elem(acc.dtype))), tir.tile(tir.I32)]


def prologue(low, args, elem) -> None:
    """Take the workspace's entry parameters from ``args`` and make the partials' view."""
    acc = low.fn.attrs.get("stream_k")
    if acc is None:
        return
    b = low.b
    partials = b.assume_div_by(next(args), WORKSPACE_ALIGN)
    slots = b.assume_bounded(next(args), 0, None)
    shape = tuple(acc.shape)
    strides = [prod(shape[k + 1:]) for k in range(len(shape))]
    tv = tir.tensor_view(elem(acc.dtype), [None, *shape], [prod(shape), *strides])
    view = b.make_tensor_view(partials, tv, [slots], [])
    low.workspace = (b.make_partition_view(view, (1, *shape)), shape)
    # the Out that tile.select takes (passes/stream_k.py: the first with a schedule)
    out = next(p.value for p in low.fn.params if isinstance(p.type, TensorView)
               and p.type.role is Role.OUT and p.type.schedule is not None)
    if schedule.orders_tiles(out):
        low.slots[schedule.PIECE_STORES] = low.token


def _index(low, value):
    """The partial tile's view index of slot ``value`` (an i64)."""
    _, shape = low.workspace
    return [low.b.trunci(low.v(value), tir.I32)] + [low.const(0, tir.I32)] * len(shape)


def _hints(low) -> dict | None:
    return None if low.tma else {low.arch or "default": {"allow_tma": False}}


def _partial_store(low, op):
    acc, slot = op.operands
    view, shape = low.workspace
    b = low.b
    done = b.store_view_tko(b.reshape(low.v(acc), (1, *shape)), view, _index(low, slot),
                            token=low.slots.get(schedule.PIECE_STORES, low.token),
                            hints=_hints(low))
    if schedule.PIECE_STORES in low.slots:
        low.slots[schedule.PIECE_STORES] = done


def _partial_load(low, op):
    (slot,) = op.operands
    view, shape = low.workspace
    b = low.b
    part, _ = b.load_view_tko(view, _index(low, slot), token=low.token, hints=_hints(low))
    low.set(op, b.reshape(part, shape))


RULES = {Op.TILE_PARTIAL_STORE: _partial_store, Op.TILE_PARTIAL_LOAD: _partial_load}
