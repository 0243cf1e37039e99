"""Block-level semantics for the cpu SIMT interpreter: lane coordinates, shared memory, barriers,
and atomics, one rule per op in ``RULES`` (merged into ``simt.RULES``).

``Lanes`` describes the threads of a group of whole blocks: lane k is thread ``k % per_block`` of
the group's block ``k // per_block``; x is the fastest axis within a block and across blocks,
as on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fearless.backends.cpu.races import ATOMIC
from fearless.errors import BarrierError, InternalError
from fearless.ir.opdef import Op

WARP = 32


@dataclass
class Lanes:
    """Coordinates of every lane of a group of ``blocks`` blocks (arrays of length ``n``)."""

    n: int
    blocks: int
    per_block: int
    grid: tuple          # blocks, x first
    block_shape: tuple   # threads per block, x first
    coords: list         # the index space: [x] (1-d), [row, col] (2-d) or [z, y, x] (3-d)
    tx: np.ndarray
    ty: np.ndarray
    bx: np.ndarray
    by: np.ndarray
    tz: np.ndarray
    bz: np.ndarray
    block: np.ndarray    # the lane's block within this group (0 .. blocks - 1)
    slot: np.ndarray     # linear thread index within the block
    gid: np.ndarray      # unique linear thread id in the launch

    def thread_name(self, gid: int) -> str:
        b, t = divmod(gid, self.per_block)
        if len(self.grid) == 1:
            return f"thread {t} of block {b}"
        return f"thread {_xyz(t, self.block_shape)} of block {_xyz(b, self.grid)}"


def _xyz(linear: int, extents: tuple) -> str:
    """``linear`` (x fastest) as ``(x, y)`` or ``(x, y, z)`` coordinates in ``extents``."""
    out = []
    for e in extents:
        linear, r = divmod(linear, e)
        out.append(str(r))
    return f"({', '.join(out)})"


def launch_lanes(space: int, grid: tuple, block: tuple, first_block: int, blocks: int) -> Lanes:
    """The lanes of blocks ``first_block ..`` (linear block order, x fastest, then y, then z)
    of a kernel using a ``space``-d thread index (0: none)."""
    gx, gy = (tuple(grid) + (1, 1))[:2]
    bdx, bdy, bdz = (tuple(block) + (1, 1))[:3]
    per_block = bdx * bdy * bdz
    local = np.arange(blocks, dtype=np.int64).repeat(per_block)
    b = first_block + local
    slot = np.tile(np.arange(per_block, dtype=np.int64), blocks)
    tx, ty, tz = slot % bdx, slot // bdx % bdy, slot // (bdx * bdy)
    bx, by, bz = b % gx, b // gx % gy, b // (gx * gy)
    col = bx * bdx + tx
    coords = [bz * bdz + tz, by * bdy + ty, col][3 - max(space, 1):]
    return Lanes(int(slot.size), blocks, per_block, tuple(grid), tuple(block), coords, tx, ty,
                 bx, by, tz, bz, local, slot, b * per_block + slot)


def allocate_shared(st, dynamic_shared: int) -> None:
    """One poison-filled copy of every shared array per block of the group."""
    for op in st.fn.walk():
        if op.name != Op.SIMT_SHARED_ALLOC:
            continue
        dtype = op.result.type.dtype
        shape = op.attrs["shape"]
        if shape is None:
            shape = (dynamic_shared // dtype.itemsize,)
        arr = np.empty((st.lanes.blocks, *shape), dtype.numpy)
        if dtype.is_float:
            arr.fill(np.nan)
        elif dtype.is_bool:
            arr.fill(True)
        else:
            arr.view(np.uint8).fill(0xFF)
        st.env[id(op.result)] = arr
        if st.races is not None:
            st.races.forget(id(op.result))


def _shared_alloc(st, op, mask):
    pass  # allocated for the whole group when the interpreter starts


_SPECIAL = {
    "block_index": lambda lanes, axis: (lanes.bx, lanes.by)[axis],
    "block_dim": lambda lanes, axis: np.int64(lanes.block_shape[axis]
                                              if axis < len(lanes.block_shape) else 1),
    "grid_dim": lambda lanes, axis: np.int64(lanes.grid[axis] if axis < len(lanes.grid) else 1),
    "thread_in_block": lambda lanes, axis: (lanes.tx, lanes.ty)[axis],
    "lane": lambda lanes, axis: lanes.slot % WARP,
    "warp_index": lambda lanes, axis: lanes.slot // WARP,
}


def _special(st, op, mask):
    st.env[id(op.result)] = _SPECIAL[op.attrs["reg"]](st.lanes, op.attrs["axis"])


def _barrier(st, op, mask):
    lanes = st.lanes
    arrived = np.bincount(lanes.block[mask], minlength=lanes.blocks)
    partial = np.flatnonzero((arrived > 0) & (arrived < lanes.per_block))
    if partial.size:
        b = int(partial[0])
        missing = np.flatnonzero((lanes.block == b) & ~mask)
        lane = int(missing[0])
        left = "has left the loop or the kernel" if st.dead[lane] else \
            "took another branch"
        raise BarrierError(
            f"this barrier was reached by {arrived[b]} of the {lanes.per_block} threads of a "
            f"block: {lanes.thread_name(int(lanes.gid[lane]))} {left}",
            kernel=st.fn.name, span=op.span,
            help="every thread of a block must reach each fl.sync_threads(): guard the "
                 "work, not the barrier, and do not return early before a barrier")
    st.epoch[arrived > 0] += 1


# atomics --------------------------------------------------------------------------------------

def _combine(kind: str, old, v, extra=None):
    if kind == "add":
        return old + v
    if kind == "sub":
        return old - v
    if kind == "min":
        return np.minimum(old, v)
    if kind == "max":
        return np.maximum(old, v)
    if kind == "and":
        return old & v
    if kind == "or":
        return old | v
    if kind == "xor":
        return old ^ v
    if kind == "exchange":
        return v
    if kind == "cas":
        return np.where(old == v, extra, old)
    raise InternalError(f"unknown atomic {kind}")


def _atomic(st, op, mask):
    array = op.operands[0]
    arr, idx, inside, bad = st.indices(op, mask)
    if bad is not None and op.attrs.get("checked"):
        st.on_error(op.attrs["site"], *bad)
    values = [np.broadcast_to(np.asarray(st.value(v)), (st.n,)) for v in op.operands[2:]]
    out = np.zeros(st.n, arr.dtype)
    st.env[id(op.result)] = out
    if not inside.any():
        return
    st.track(op, ATOMIC, arr, idx, inside)
    lanes = np.flatnonzero(inside)
    key = st.key(array, idx, inside)
    flat = np.ravel_multi_index(key, arr.shape)
    order = np.argsort(flat, kind="stable")   # thread order within each element
    lanes, flat = lanes[order], flat[order]
    key = tuple(k[order] for k in key)
    v = [x[lanes] for x in values]
    start = np.r_[True, flat[1:] != flat[:-1]]
    first = np.flatnonzero(start)
    seg = np.cumsum(start) - 1
    rank = np.arange(flat.size) - first[seg]
    kind = op.attrs["op"]
    if kind in ("add", "sub"):
        _scan_add(arr, out, lanes, key, v[0], kind == "sub", first, seg)
    elif rank.max() + 1 <= first.size:
        _by_rank(arr, out, lanes, key, v, kind, rank)
    else:
        _by_element(arr, out, lanes, key, v, kind, first)


def _scan_add(arr, out, lanes, key, v, negate, first, seg):
    """Atomic adds as a segmented prefix sum (integers wrap; floats sum in f64, rounded once)."""
    work = np.float64 if arr.dtype.kind == "f" else arr.dtype
    step = v.astype(work)
    if negate:
        step = (np.zeros((), work) - step).astype(work)
    with np.errstate(over="ignore"):
        incl = np.cumsum(step, dtype=work)
        base = incl[first] - step[first]
        before = incl - step - base[seg]
        heads = tuple(k[first] for k in key)
        start = arr[heads].astype(work)
        out[lanes] = (start[seg] + before).astype(arr.dtype)
        last = np.r_[first[1:], incl.size] - 1
        arr[heads] = (start + (incl[last] - base)).astype(arr.dtype)


def _apply(kind, arr_dtype, old, vals):
    if arr_dtype.kind == "f" and arr_dtype.itemsize < 4:
        return _combine(kind, old.astype(np.float32), *(x.astype(np.float32) for x in vals))
    return _combine(kind, old, *vals)


def _by_rank(arr, out, lanes, key, v, kind, rank):
    """One round per rank: each element sees its lanes' updates in thread order."""
    by_rank = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[by_rank], np.arange(rank.max() + 2))
    for r in range(rank.max() + 1):
        sel = by_rank[bounds[r]:bounds[r + 1]]
        k = tuple(x[sel] for x in key)
        old = arr[k]
        arr[k] = np.asarray(_apply(kind, arr.dtype, old, [x[sel] for x in v])).astype(arr.dtype)
        out[lanes[sel]] = old


def _by_element(arr, out, lanes, key, v, kind, first):
    """Few elements, many lanes each (a global maximum): one sequential pass per element."""
    ends = np.r_[first[1:], lanes.size]
    for a, b in zip(first, ends):
        k = tuple(x[a] for x in key)
        value = arr[k]
        for j in range(a, b) if kind == "cas" else ():
            out[lanes[j]] = value
            value = np.asarray(_apply(kind, arr.dtype, np.asarray(value),
                                      [x[j:j + 1] for x in v])).astype(arr.dtype)[0]
        if kind != "cas":
            vals = v[0][a:b]
            if kind == "exchange":
                seq = np.r_[np.asarray([value], arr.dtype), vals]
            else:
                ufunc = {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
                         "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
                seq = ufunc.accumulate(np.r_[np.asarray([value], arr.dtype), vals])
            out[lanes[a:b]] = seq[:-1]
            value = seq[-1]
        arr[k] = value


def format_value(x, dtype) -> str:
    """One value as Python's print shows it in its dtype (``True``, ``7``, ``0.1``)."""
    if dtype.is_bool:
        return str(bool(x))
    if dtype.is_int:
        return str(int(x))
    return str(dtype.numpy.type(x))


def _print(st, op, mask):
    """Each thread's line, in thread order (the lanes are in launch order)."""
    values = [np.broadcast_to(np.asarray(st.value(v)), (st.n,)) for v in op.operands]
    dtypes = [v.type.dtype for v in op.operands]
    for lane in np.flatnonzero(mask):
        text = "".join(p if isinstance(p, str) else format_value(values[p][lane], dtypes[p])
                       for p in op.attrs["parts"])
        print(text, end="")


RULES = {
    Op.SIMT_PRINT: _print,
    Op.SIMT_SPECIAL: _special,
    Op.SIMT_BARRIER: _barrier,
    Op.SIMT_SHARED_ALLOC: _shared_alloc,
    Op.MEM_ATOMIC: _atomic,
}
