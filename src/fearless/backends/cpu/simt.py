"""Interpret a SIMT kernel's IR with NumPy: many threads at once as vector lanes with masks.

Each IR value holds one element per lane. Control flow runs both sides of a branch under masks;
loops run until no lane is left; ``cf.break``/``continue``/``return`` park lanes in a ``dead`` mask
until the loop iteration, the loop or the inlined function they leave is over.

Blocks run whole, a group of blocks at a time in block order, all their threads in lockstep: so
a barrier is a point every lane of a block reaches together, and one reached by only some
threads of a block (others took another branch, or left a loop or the kernel) raises
``BarrierError``. Shared memory has one copy per block (a leading block axis), poison-filled
(NaN, or all bits set for integers) so a read of an unwritten slot shows; each barrier advances
its block's epoch for the race detector (``races.py``), which sees every access to shared,
UnsafeSlice and AtomicSlice arrays when enabled. Atomics on one element are applied in thread
order, one after another, each lane getting the value before its own update.

Out-of-bounds reads (and atomics) are skipped (they read zero) and the first one is reported
through ``on_bounds_error(site, index, extent, axis)``, like the error word on the GPU.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fearless.backends.cpu import block as blockops
from fearless.backends.cpu import mma as mmaops
from fearless.backends.cpu import warp as warpops
from fearless.backends.cpu.block import Lanes, launch_lanes
from fearless.backends.cpu.ops import SCALAR, constant
from fearless.backends.cpu.races import READ, WRITE, RaceDetector
from fearless.errors import InternalError
from fearless.ir.core import Function, Region
from fearless.ir.opdef import Op, only
from fearless.ir.ops.control import EXITS
from fearless.ir.types import Access, ThreadIndex

LANES_PER_BATCH = 1 << 18


class _Frame:
    """Lanes that left a loop (broken) or one of its iterations (continued), or an inlined
    function (returned). ``kind`` is "loop" or "inline"."""

    def __init__(self, kind: str, n: int):
        self.kind = kind
        self.left = np.zeros(n, bool)
        self.continued = np.zeros(n, bool)


class _Interpreter:
    def __init__(self, fn: Function, lanes: Lanes, args: list, on_error: Callable,
                 races: RaceDetector | None, dynamic_shared: int):
        n = lanes.n
        self.fn = fn
        self.n = n
        self.lanes = lanes
        self.coords = lanes.coords  # per index space: [x], [row, col] or [z, y, x]
        self.env: dict[int, object] = {id(p.value): a for p, a in zip(fn.params, args)}
        self.names = {id(p.value): p.name for p in fn.params}
        self.dead = np.zeros(n, bool)
        self.frames: list[_Frame] = []
        self.on_error = on_error
        self.races = races
        self.epoch = np.zeros(lanes.blocks, np.int64)  # barriers each block has passed
        self.async_copies = None  # cp.async groups in flight (backends/cpu/mma.py)
        blockops.allocate_shared(self, dynamic_shared)

    # regions and control flow ---------------------------------------------------------------

    def region(self, region: Region, mask: np.ndarray) -> None:
        live = mask & ~self.dead
        for op in region.ops:
            if not live.any():
                return
            rule = RULES.get(op.name)
            if rule is None:
                raise InternalError(f"the cpu backend has no rule for {op.name}")
            rule(self, op, live)
            if op.regions or op.name in EXITS:
                live = live & ~self.dead

    def value(self, v):
        return self.env[id(v)]

    def leave(self, mask: np.ndarray, kind: str, continued: bool = False) -> None:
        """Park ``mask``'s lanes until the innermost frame of ``kind`` ends (or forever, for a
        return from the kernel itself)."""
        for frame in reversed(self.frames):
            if frame.kind == kind:
                (frame.continued if continued else frame.left)[mask] = True
                break
        self.dead |= mask

    def loop(self, live, condition, body: Region, step=None):
        frame = _Frame("loop", self.n)
        self.frames.append(frame)
        try:
            while True:
                running = live & condition()
                if not running.any():
                    break
                self.region(body, running)
                self.dead &= ~frame.continued  # continued lanes go on with the next iteration
                frame.continued[:] = False
                live = running & ~self.dead
                if step is not None:
                    step()
        finally:
            self.frames.pop()
            self.dead &= ~frame.left

    # memory ---------------------------------------------------------------------------------

    def indices(self, op, mask):
        array = op.operands[0]
        arr = self.value(array)
        idx = [np.broadcast_to(np.asarray(self.value(v), np.int64), (self.n,))
               for v in op.operands[1:1 + array.type.ndim]]
        inside = mask.copy()
        first_bad = None
        shape = arr.shape[1:] if array.type.access is Access.SHARED else arr.shape
        for axis, (i, extent) in enumerate(zip(idx, shape)):
            ok = (i >= 0) & (i < extent)
            bad = inside & ~ok
            if first_bad is None and bad.any():
                lane = int(np.argmax(bad))
                first_bad = (int(i[lane]), extent, axis)
            inside &= ok
        return arr, idx, inside, first_bad

    def key(self, array, idx, inside):
        """The NumPy index of the lanes in ``inside``: shared arrays first select the block."""
        sel = tuple(i[inside] for i in idx)
        if array.type.access is Access.SHARED:
            return (self.lanes.block[inside],) + sel
        return sel

    def track(self, op, kind: str, arr, idx, inside) -> None:
        """Tell the race detector about an access to an array it watches."""
        array = op.operands[0]
        if self.races is None or array.type.access in (Access.READ, Access.DISJOINT):
            return
        key = self.key(array, idx, inside)
        shape = arr.shape[1:] if array.type.access is Access.SHARED else arr.shape
        flat = np.ravel_multi_index(key, arr.shape) if key[0].size else key[0]
        name = self.names.get(id(array)) or array.hint or "shared memory"
        self.races.access(id(array), arr.size, name, shape, op, kind, np.asarray(flat),
                          self.lanes.gid[inside], self.epoch[self.lanes.block[inside]])

    def thread_name(self, gid: int) -> str:
        return self.lanes.thread_name(gid)


def _constant(st, op, mask):
    st.env[id(op.result)] = constant(op)


def _scalar(ev):
    """The rule of a scalar op: its eval on the lanes' values."""
    def run(st, op, mask):
        st.env[id(op.result)] = ev(op.result.type.dtype, op.attrs,
                                   *[st.value(v) for v in op.operands])
    return run


def _thread_index(st, op, mask):
    space, axis = op.attrs["space"], op.attrs["axis"]
    if op.attrs.get("block"):
        st.env[id(op.result)] = st.lanes.slot if space == 1 else (st.lanes.ty, st.lanes.tx)[axis]
        return
    if len(st.coords) != space:
        raise InternalError(f"kernel uses a {space}-d index in a {len(st.coords)}-d launch")
    st.env[id(op.result)] = st.coords[axis]


def _index_value(st, op, mask):
    st.env[id(op.result)] = st.value(op.operands[0])


def _dim(st, op, mask):
    array = op.operands[0]
    shared = array.type.access is Access.SHARED
    st.env[id(op.result)] = np.int64(st.value(array).shape[op.attrs["axis"] + shared])


def _unsound(op, bad) -> None:
    """A proved access out of bounds is a bug of passes/inbounds.py, not of the kernel."""
    if bad is not None and op.attrs.get("proved"):
        raise InternalError(f"{op.name} was proved in bounds, but index {bad[0]} of axis "
                            f"{bad[2]} is outside extent {bad[1]}")


def _load(st, op, mask):
    arr, idx, inside, bad = st.indices(op, mask)
    _unsound(op, bad)
    if bad is not None and op.attrs.get("checked"):
        st.on_error(op.attrs["site"], *bad)
    out = np.zeros(st.n, arr.dtype)
    if inside.any():
        out[inside] = arr[st.key(op.operands[0], idx, inside)]
        st.track(op, READ, arr, idx, inside)
    st.env[id(op.result)] = out


def _store(st, op, mask):
    arr, idx, inside, bad = st.indices(op, mask)  # a store past the end is skipped (the tail)
    _unsound(op, bad)
    value = np.broadcast_to(np.asarray(st.value(op.operands[-1])), (st.n,))
    if inside.any():
        st.track(op, WRITE, arr, idx, inside)
        arr[st.key(op.operands[0], idx, inside)] = value[inside]


def _alloc(st, op, mask):
    elem = op.result.type.elem
    dtype = np.int64 if isinstance(elem, ThreadIndex) else elem.dtype.numpy
    st.env[id(op.result)] = np.zeros(st.n, dtype)


def _local_load(st, op, mask):
    st.env[id(op.result)] = st.value(op.operands[0]).copy()


def _local_store(st, op, mask):
    slot = st.value(op.operands[0])
    value = np.broadcast_to(np.asarray(st.value(op.operands[1])), slot.shape)
    slot[mask] = value[mask]


def _if(st, op, mask):
    cond = np.broadcast_to(np.asarray(st.value(op.operands[0]), bool), mask.shape)
    then, other = mask & cond, mask & ~cond
    if then.any():
        st.region(op.regions[0], then)
    if other.any():
        st.region(op.regions[1], other)


def _for(st, op, mask):
    lo, hi, step = (np.asarray(st.value(v), np.int64) for v in op.operands)
    body = op.regions[0]
    iv = np.broadcast_to(lo, (st.n,)).copy()
    st.env[id(body.args[0])] = iv
    sign = op.attrs["step_sign"]

    def condition():
        if sign > 0:
            return iv < hi
        if sign < 0:
            return iv > hi
        return np.where(step > 0, iv < hi, iv > hi)

    def advance():
        iv[...] = iv + step

    st.loop(mask & ~st.dead, condition, body, advance)


def _while(st, op, mask):
    cond_region, body = op.regions
    flag = cond_region.ops[-1].operands[0]

    def condition():
        live = mask & ~st.dead
        st.region(cond_region, live)
        return np.broadcast_to(np.asarray(st.env.get(id(flag), False), bool), (st.n,))

    st.loop(mask & ~st.dead, condition, body)


def _condition(st, op, mask):
    pass  # the while rule reads the condition's operand itself


def _inline(st, op, mask):
    frame = _Frame("inline", st.n)
    st.frames.append(frame)
    try:
        st.region(op.regions[0], mask)
    finally:
        st.frames.pop()
        st.dead &= ~frame.left


def _break(st, op, mask):
    st.leave(mask, "loop")


def _continue(st, op, mask):
    st.leave(mask, "loop", continued=True)


def _return(st, op, mask):
    st.leave(mask, "inline")


RULES = {
    Op.CONSTANT: _constant,
    **{name: _scalar(ev) for name, ev in SCALAR.items()},
    Op.SIMT_THREAD_INDEX: _thread_index,
    Op.SIMT_INDEX_VALUE: _index_value,
    **blockops.RULES,
    **warpops.RULES,
    **mmaops.RULES,
    Op.MEM_DIM: _dim,
    Op.MEM_LOAD: _load,
    Op.MEM_STORE: _store,
    Op.LOCAL_ALLOC: _alloc,
    Op.LOCAL_LOAD: _local_load,
    Op.LOCAL_STORE: _local_store,
    Op.SCF_IF: _if,
    Op.SCF_FOR: _for,
    Op.SCF_WHILE: _while,
    Op.SCF_CONDITION: _condition,
    Op.SCF_INLINE: _inline,
    Op.CF_BREAK: _break,
    Op.CF_CONTINUE: _continue,
    Op.CF_RETURN: _return,
}


def run(fn: Function, grid: tuple, block: tuple, args: list, on_bounds_error: Callable,
        dynamic_shared: int = 0, racecheck: bool = False):
    """Run ``fn`` over ``grid`` x ``block`` threads (1- to 3-d tuples, x first) with NumPy
    arguments (per parameter, a NumPy scalar or a NumPy array view, written in place).

    ``dynamic_shared``: bytes of dynamic shared memory per block. Returns the race detector
    (``racecheck``), whose ``race`` is the first conflict found, or None. Raises BarrierError.
    """
    space = fn.attrs.get("index_space") or 1  # the thread index the kernel reads
    per_block = int(np.prod(block))
    total = int(np.prod(grid))
    step = max(1, LANES_PER_BATCH // max(per_block, 1))
    reported = [False]
    races = RaceDetector(per_block) if racecheck else None

    def report(*event):
        if not reported[0]:
            reported[0] = True
            on_bounds_error(*event)

    with np.errstate(all="ignore"):
        for first in range(0, total, step):
            blocks = min(step, total - first)
            lanes = launch_lanes(space, grid, block, first, blocks)
            interp = _Interpreter(fn, lanes, args, report, races, dynamic_shared)
            interp.region(fn.body, np.ones(lanes.n, bool))
            if races is not None and races.race is not None:
                break
    return races


def interpret(fn: Function, grid: tuple, block: tuple, args: list, on_bounds_error: Callable,
              dynamic_shared: int = 0, racecheck: bool = False):
    """``run``, the race it found (if any) described for the launch's error: ``(text, span)``
    with threads named by their block and thread index, or None. What the runtime's cpu
    launch calls (the kernel layer hands it over: the runtime imports no backend)."""
    races = run(fn, grid, block, args, on_bounds_error, dynamic_shared, racecheck)
    if races is None or races.race is None:
        return None
    return races.describe(launch_lanes(1, grid, block, 0, 1).thread_name)


# tile ops belong to tile kernels, which run on the cpu tile interpreter and the Tile IR backend
UNSUPPORTED = {name: "tile kernels only" for name in only("tile")}
