"""Warp ops for the cpu SIMT interpreter, one rule per op in ``RULES`` (merged into
``simt.RULES``): the reference semantics of ``fl.warp.*``.

A warp is 32 consecutive slots of a block (``Lanes.slot``, x fastest). Before each op, the lanes
that arrive are compared with the op's mask: every lane named by the mask (among the lanes the
block has) must arrive, no other lane may, and all must give one mask, or ``BarrierError``
(on the GPU that is a hang or undefined values). Shuffles follow PTX ``shfl.sync``'s definition
of the source lane and its clamp to the segment (``c = ((32 - width) << 8) | clamp``, clamp 31,
or 0 for up); reading a lane outside the mask is an error too. Reductions with the full mask run
the butterfly the GPU runs (``v = v op shfl.bfly(v, k)`` for k = 16, 8, 4, 2, 1), others a left
fold in lane order; f16/bf16 are reduced in f32 and rounded once.
"""
from __future__ import annotations

import numpy as np

from fearless.backends.cpu.block import WARP
from fearless.errors import BarrierError
from fearless.ir.opdef import Op
from fearless.ir.ops.arith import maximum_number, minimum_number

_CALL = {Op.WARP_SHUFFLE: "warp shuffle", Op.WARP_VOTE: "warp vote",
         Op.WARP_REDUCE: "warp reduction", Op.WARP_MMA: "tensor-core mma",
         Op.WARP_LDMATRIX: "ldmatrix"}


class _Warps:
    """Per-lane warp facts of one op: warp id, lane, the lane-array index of lane 0, and the
    number of lanes the warp has (a block of 48 threads has a warp of 16)."""

    def __init__(self, st, mask_values, active):
        lanes = st.lanes
        per_warp_block = -(-lanes.per_block // WARP)
        first_slot = (lanes.slot // WARP) * WARP
        self.lane = lanes.slot % WARP
        self.wid = lanes.block * per_warp_block + lanes.slot // WARP
        self.base = np.arange(lanes.n) - self.lane
        self.size = np.minimum(WARP, lanes.per_block - first_slot)
        self.count = lanes.blocks * per_warp_block
        self.active = active
        self.mask = np.broadcast_to(np.asarray(mask_values, np.uint64), (lanes.n,))

    def exists(self, j):
        return (j >= 0) & (j < self.size)


def _check(st, op, w: _Warps) -> None:
    """Exactly the lanes of one mask arrive (see the module docstring)."""
    act = np.flatnonzero(w.active)
    wmask = np.zeros(w.count, np.uint64)
    wmask[w.wid[act]] = w.mask[act]
    bad = act[w.mask[act] != wmask[w.wid[act]]]
    if bad.size:
        _fail(st, op, int(bad[0]), "gave another mask than the other lanes of its warp")
    touched = np.zeros(w.count, bool)
    touched[w.wid[act]] = True
    named = touched[w.wid] & ((wmask[w.wid] >> w.lane.astype(np.uint64)) & 1).astype(bool)
    extra = np.flatnonzero(w.active & ~named)
    if extra.size:
        _fail(st, op, int(extra[0]), f"is not in the mask {int(w.mask[extra[0]]):#010x}, but "
                                     f"reached it")
    missing = np.flatnonzero(named & ~w.active)
    if missing.size:
        lane = int(missing[0])
        why = "has left the loop or the kernel" if st.dead[lane] else "took another branch"
        _fail(st, op, lane, f"is in the mask {int(wmask[w.wid[lane]]):#010x} but {why}")


def _fail(st, op, lane: int, what: str):
    name = st.lanes.thread_name(int(st.lanes.gid[lane]))
    raise BarrierError(f"a {_CALL[op.name]} needs every lane of its mask, together: {name} "
                       f"(lane {int(st.lanes.slot[lane]) % WARP}) {what}",
                       kernel=st.fn.name, span=op.span,
                       help="call warp operations where every lane of the mask arrives (guard "
                            "the work, not the call), with one mask per warp")


def _prepare(st, op, mask) -> _Warps:
    w = _Warps(st, st.value(op.operands[-1]), mask)
    _check(st, op, w)
    return w


def source_lane(mode: str, lane, b, width: int):
    """PTX shfl.sync: the lane read by ``lane`` (own lane when out of the segment)."""
    segmask = 32 - width
    clamp = 0 if mode == "up" else 0x1F
    max_lane = (lane & segmask) | (clamp & ~segmask)
    min_lane = lane & segmask
    b = b.astype(np.int64) & 0x1F  # PTX: bval[4:0] = b[4:0]; a source lane of 35 is lane 3
    if mode == "up":
        j = lane - b
        ok = j >= max_lane
    elif mode == "down":
        j = lane + b
        ok = j <= max_lane
    elif mode == "bfly":
        j = lane ^ b
        ok = j <= max_lane
    else:
        j = min_lane | (b & (~segmask & 0xFFFFFFFF))
        ok = j <= max_lane
    return np.where(ok, j, lane)


def _shuffle(st, op, mask):
    w = _prepare(st, op, mask)
    value = np.broadcast_to(np.asarray(st.value(op.operands[0])), (st.n,))
    b = np.broadcast_to(np.asarray(st.value(op.operands[1]), np.uint32), (st.n,))
    j = source_lane(op.attrs["mode"], w.lane, b, op.attrs["width"])
    src = w.base + j
    ok = w.exists(j)
    inside = np.zeros(st.n, bool)
    inside[w.active] = ok[w.active] & w.active[np.where(ok, src, 0)][w.active]
    bad = np.flatnonzero(w.active & ~inside)
    if bad.size:
        _fail(st, op, int(bad[0]), f"reads lane {int(j[bad[0]])}, which is not in the mask")
    out = value.copy()
    out[w.active] = value[src[w.active]]
    st.env[id(op.result)] = out


def _ballots(w: _Warps, pred):
    bits = np.where(pred, np.uint64(1) << w.lane.astype(np.uint64), np.uint64(0))
    per_warp = np.zeros(w.count, np.uint64)
    np.bitwise_or.at(per_warp, w.wid[w.active], bits[w.active])
    return per_warp[w.wid]


def _vote(st, op, mask):
    w = _prepare(st, op, mask)
    pred = np.broadcast_to(np.asarray(st.value(op.operands[0]), bool), (st.n,))
    ballot = _ballots(w, pred)
    mode = op.attrs["mode"]
    if mode == "ballot":
        st.env[id(op.result)] = ballot.astype(np.uint32)
    elif mode == "any":
        st.env[id(op.result)] = ballot != 0
    else:
        st.env[id(op.result)] = ballot == _ballots(w, np.ones(st.n, bool))


def _combine(kind: str, is_float: bool):
    if kind == "sum":
        return np.add
    if kind == "max":
        return maximum_number if is_float else np.maximum
    return minimum_number if is_float else np.minimum


def _reduce(st, op, mask):
    w = _prepare(st, op, mask)
    d = op.result.type.dtype
    value = np.broadcast_to(np.asarray(st.value(op.operands[0])), (st.n,))
    work = value.astype(np.float32) if d.is_float and d.itemsize < 4 else value.copy()
    fn = _combine(op.attrs["op"], d.is_float)
    if op.attrs.get("full"):
        idx = np.arange(st.n)
        for k in (16, 8, 4, 2, 1):
            j = w.lane ^ k
            partner = np.where(w.exists(j), w.base + j, idx)
            work = fn(work, work[partner])
    else:  # a left fold over the lanes of the mask, in lane order
        acc = np.zeros(w.count, work.dtype)
        started = np.zeros(w.count, bool)
        for k in range(WARP):
            sel = np.flatnonzero(w.active & (w.lane == k))
            if sel.size:
                wid = w.wid[sel]
                acc[wid] = np.where(started[wid], fn(acc[wid], work[sel]), work[sel])
                started[wid] = True
        work = acc[w.wid]
    st.env[id(op.result)] = np.asarray(work).astype(d.numpy)


RULES = {
    Op.WARP_SHUFFLE: _shuffle,
    Op.WARP_VOTE: _vote,
    Op.WARP_REDUCE: _reduce,
}
