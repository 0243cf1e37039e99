"""Tensor-core and async-copy ops for the cpu SIMT interpreter, one rule per op in ``RULES``
(merged into ``simt.RULES``): the reference semantics of ``fl.mma.*`` and ``fl.async_*``.

Fragments follow the PTX ISA layouts exactly ("Matrix Fragments for mma.m16n8k16 with floating
point type"; "Warp-level matrix load instruction: ldmatrix"): with ``g = lane // 4`` and
``t = lane % 4``, register r of A holds A[g + 8 (r % 2), 2t + 8 (r // 2) + {0, 1}], register r
of B holds B[2t + 8r + {0, 1}, g], accumulator i is C[g + 8 (i // 2), 2t + i % 2]; the low 16
bits of a register hold the lower-indexed element. The product is computed in f64 and rounded
once to f32 (tensor cores add exact products in at least f32; the order is unspecified).

Async copies read their source when issued and write their destination at the
``fl.async_wait`` that completes their group (per thread, ``cp.async.wait_group`` counting), so
a read before the wait sees the old contents and the race detector sees the write at the wait.
"""
from __future__ import annotations

import numpy as np

from fearless.backends.cpu import warp as warpops
from fearless.backends.cpu.block import WARP
from fearless.backends.cpu.races import READ, WRITE
from fearless.errors import BarrierError
from fearless.ir.opdef import Op

MISALIGNED = 7  # the "axis" of a misalignment in a bounds event (see runtime/dispatch.py)

_g = np.arange(WARP) // 4
_t = np.arange(WARP) % 4
# (lane, register, half) -> row, col of each fragment
_A_ROW = _g[:, None, None] + 8 * (np.arange(4) % 2)[None, :, None] + 0 * np.arange(2)
_A_COL = (2 * _t[:, None, None] + 8 * (np.arange(4) // 2)[None, :, None]
          + np.arange(2)[None, None, :])
_B_ROW = 2 * _t[:, None, None] + 8 * np.arange(2)[None, :, None] + np.arange(2)[None, None, :]
_B_COL = np.broadcast_to(_g[:, None, None], (WARP, 2, 2))
_C_ROW = _g[:, None] + 8 * (np.arange(4) // 2)[None, :]
_C_COL = 2 * _t[:, None] + (np.arange(4) % 2)[None, :]


def _full_warps(st, op, mask):
    """Every lane of every warp that arrives must be there (``.sync.aligned``)."""
    lanes = st.lanes
    if lanes.per_block % WARP:
        raise BarrierError(f"a {warpops._CALL[op.name]} needs blocks of whole warps, and this "
                           f"block has {lanes.per_block} threads", kernel=st.fn.name,
                           span=op.span, help="launch blocks of a multiple of 32 threads")
    w = warpops._Warps(st, np.uint32(0xFFFFFFFF), mask)
    warpops._check(st, op, w)
    return np.flatnonzero(mask[::WARP])  # the warps that run it (lane-array index // 32)


def _halves(regs: np.ndarray, ab: str) -> np.ndarray:
    """u32 registers (..., r) -> float64 (..., r, 2), low half first."""
    r = regs.astype(np.uint32)
    h = np.stack([r & 0xFFFF, r >> 16], axis=-1).astype(np.uint16)
    if ab == "f16":
        return h.view(np.float16).astype(np.float64)
    return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _mma(st, op, mask):
    warps = _full_warps(st, op, mask)
    vals = [np.broadcast_to(np.asarray(st.value(v)), (st.n,)) for v in op.operands]
    a = np.stack(vals[:4], -1).reshape(-1, WARP, 4)[warps]
    b = np.stack(vals[4:6], -1).reshape(-1, WARP, 2)[warps]
    c = np.stack(vals[6:], -1).reshape(-1, WARP, 4)[warps].astype(np.float64)
    ab = op.attrs["ab"]
    A = np.zeros((len(warps), 16, 16))
    B = np.zeros((len(warps), 16, 8))
    C = np.zeros((len(warps), 16, 8))
    A[:, _A_ROW, _A_COL] = _halves(a, ab)
    B[:, _B_ROW, _B_COL] = _halves(b, ab)
    C[:, _C_ROW, _C_COL] = c
    D = (A @ B + C).astype(np.float32)
    out = [np.zeros(st.n, np.float32) for _ in range(4)]
    lanes = (warps[:, None] * WARP + np.arange(WARP)).ravel()
    d = D[:, _C_ROW, _C_COL].reshape(-1, 4)
    for i in range(4):
        out[i][lanes] = d[:, i]
    for r, v in zip(op.results, out):
        st.env[id(r)] = v


def _flat_rows(st, op, mask, arr, idx, width: int, align_elems: int):
    """Per lane: whether its row of ``width`` elements at ``idx`` (of a shared array's
    block copy) is in bounds and aligned, and its flat element offset (0 where not)."""
    shape = arr.shape[1:]
    ok = mask.copy()
    first_bad = None
    for axis, (i, extent) in enumerate(zip(idx, shape)):
        hi = extent - (width - 1 if axis == len(shape) - 1 else 0)
        good = (i >= 0) & (i < hi)
        bad = ok & ~good
        if first_bad is None and bad.any():
            lane = int(np.argmax(bad))
            first_bad = (int(i[lane]), int(extent), axis)
        ok &= good
    flat = np.ravel_multi_index(tuple(np.where(ok, i, 0) for i in idx), shape)
    bad = ok & (flat % align_elems != 0)
    if first_bad is None and bad.any():
        lane = int(np.argmax(bad))
        first_bad = (int(flat[lane] * arr.itemsize), align_elems * arr.itemsize, MISALIGNED)
    ok &= ~bad
    return ok, np.where(ok, flat, 0), first_bad


def _track_flat(st, op, kind, arr, flat, lanes_sel):
    """Race-detector record of accesses to a shared array by flat element (per lane)."""
    if st.races is None or lanes_sel.size == 0:
        return
    array = op.operands[0]
    shape = arr.shape[1:]
    size = int(np.prod(shape))
    blocks = st.lanes.block[lanes_sel]
    name = array.hint or "shared memory"
    st.races.access(id(array), arr.size, name, shape, op, kind,
                    blocks * size + flat, st.lanes.gid[lanes_sel],
                    st.epoch[blocks])


def _ldmatrix(st, op, mask):
    warps = _full_warps(st, op, mask)
    array = op.operands[0]
    arr = st.value(array)
    idx = [np.broadcast_to(np.asarray(st.value(v), np.int64), (st.n,)) for v in op.operands[1:]]
    count = op.attrs["count"]
    supply = mask & ((st.lanes.slot % WARP) < 8 * count)  # lanes whose address is used
    ok, flat, bad = _flat_rows(st, op, supply, arr, idx, 8, 8)
    if bad is not None and op.attrs.get("checked"):
        st.on_error(op.attrs["site"], *bad)
    bits = arr.reshape(arr.shape[0], -1).view(np.uint16)
    rows = bits[st.lanes.block[:, None], flat[:, None] + np.arange(8)]  # (n, 8)
    for e in range(8):
        _track_flat(st, op, READ, arr, flat[ok] + e, np.flatnonzero(ok))
    rows = rows.reshape(-1, WARP, 8)[warps]            # (W, lane, 8)
    lane = np.arange(WARP)
    for k, r in enumerate(op.results):
        m = rows[:, 8 * k:8 * k + 8, :]                # matrix k: (W, row, col)
        if op.attrs["trans"]:
            lo, hi = m[:, 2 * _t, lane // 4], m[:, 2 * _t + 1, lane // 4]
        else:
            lo, hi = m[:, lane // 4, 2 * _t], m[:, lane // 4, 2 * _t + 1]
        out = np.zeros(st.n, np.uint32)
        sel = (warps[:, None] * WARP + lane).ravel()
        out[sel] = (lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)).ravel()
        st.env[id(r)] = out


def _pack(st, op, mask):
    lo, hi = (np.asarray(st.value(v)) for v in op.operands)
    d = op.operands[0].type.dtype
    bits = [(x.astype(np.float16).view(np.uint16) if d.name == "f16"
             else x.astype(d.numpy).view(np.uint16)).astype(np.uint32) for x in (lo, hi)]
    st.env[id(op.result)] = bits[0] | (bits[1] << 16)


class AsyncCopies:
    """Copies in flight of one group of blocks: per lane, the groups it committed, and the
    pending copies (lanes, group number, destination elements, data)."""

    def __init__(self, n: int):
        self.committed = np.zeros(n, np.int64)
        self.pending: list[list] = []


def _async(st) -> AsyncCopies:
    if getattr(st, "async_copies", None) is None:
        st.async_copies = AsyncCopies(st.n)
    return st.async_copies


def _async_copy(st, op, mask):
    nd = op.attrs["ndst"]
    dst_v, src_v = op.operands[0], op.operands[1 + nd]
    dst, src = st.value(dst_v), st.value(src_v)
    e = op.attrs["size"] // dst.itemsize
    didx = [np.broadcast_to(np.asarray(st.value(v), np.int64), (st.n,))
            for v in op.operands[1:1 + nd]]
    didx[-1] = didx[-1] * e
    sidx = [np.broadcast_to(np.asarray(st.value(v), np.int64), (st.n,))
            for v in op.operands[2 + nd:]]
    dok, dflat, _ = _flat_rows(st, op, mask, dst, didx, e, 1)  # outside the array: skipped
    sok = mask.copy()
    bad = None
    for axis, (i, extent) in enumerate(zip(sidx, src.shape)):
        hi = extent - (e - 1 if axis == len(src.shape) - 1 else 0)
        good = (i >= 0) & (i < hi)
        if bad is None and (sok & ~good).any():
            lane = int(np.argmax(sok & ~good))
            bad = (int(sidx[axis][lane]), int(extent), axis)
        sok &= good
    sflat = np.ravel_multi_index(tuple(np.where(sok, i, 0) for i in sidx), src.shape) \
        if src.size else np.zeros(st.n, np.int64)
    base = src.__array_interface__["data"][0] if src.size else 0
    misaligned = sok & ((base + sflat * src.itemsize) % op.attrs["size"] != 0)
    if bad is None and misaligned.any():
        lane = int(np.argmax(misaligned))
        bad = (int(base + sflat[lane] * src.itemsize) % 4096, op.attrs["size"], MISALIGNED)
    sok &= ~misaligned
    if bad is not None and op.attrs.get("checked"):
        st.on_error(op.attrs["site"], *bad)
    lanes = np.flatnonzero(dok)
    flat_src = src.reshape(-1) if src.size else np.zeros(1, src.dtype)
    data = np.where(sok[lanes, None], flat_src[np.minimum(sflat[lanes, None] + np.arange(e), flat_src.size - 1)], 0)
    data = data.astype(dst.dtype)
    q = _async(st)
    q.pending.append([op, lanes, q.committed[lanes].copy(), dflat[lanes], data])


def _async_commit(st, op, mask):
    _async(st).committed[mask] += 1


def _async_wait(st, op, mask):
    q = _async(st)
    n = op.attrs["n"]
    keep = []
    for rec in q.pending:
        cop, lanes, group, flat, data = rec
        done = mask[lanes] & (group < q.committed[lanes] - n)
        if done.any():
            dst = st.value(cop.operands[0])
            sel = lanes[done]
            block = st.lanes.block[sel]
            e = data.shape[1]
            view = dst.reshape(dst.shape[0], -1)
            for k in range(e):
                _track_flat(st, cop, WRITE, dst, flat[done] + k, sel)
                view[block, flat[done] + k] = data[done, k]
        if (~done).any():
            keep.append([cop, lanes[~done], group[~done], flat[~done], data[~done]])
    q.pending = keep


RULES = {
    Op.WARP_MMA: _mma,
    Op.WARP_LDMATRIX: _ldmatrix,
    Op.MMA_PACK: _pack,
    Op.MEM_ASYNC_COPY: _async_copy,
    Op.MEM_ASYNC_COMMIT: _async_commit,
    Op.MEM_ASYNC_WAIT: _async_wait,
}
