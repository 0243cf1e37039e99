"""Interpret a tile kernel's IR with NumPy, one tile block at a time.

A tile block's control flow is uniform (no lanes, no masks): each IR value holds one NumPy array
(a tile) or a 0-d array (a scalar). Blocks run in order x fastest, then y, then z. Tensor
parameters are NumPy views over the tensors' memory (an Out partition writable, In read-only);
``tile.load`` reads zero (or its attr ``padding``) past a tensor's edge and ``tile.store`` writes
only the part of the own tile inside the tensor, as Tile IR's partition views do. Gathers,
scatters and atomics are ``tile_memory.py``'s rules.

f16/bf16 ``tile.mma`` multiplies in f32 and accumulates in f32, like the tensor cores; f32
inputs are first rounded to TF32 (10 significand bits, nearest even), as the GPU's tensor cores
take them, so only the order of the f32 accumulation differs (docs/semantics.md).
A ``tile.reduce`` sum adds in the dtype of its operand, rounding every partial sum to it (the
frontend widens f16/bf16 sums to f32 unless ``acc_dtype`` says otherwise); the order of the
additions is a balanced tree here and tileiras's choice on the GPU, so sums may differ between
the backends within the error bound of their dtype.
"""
from __future__ import annotations

import numpy as np

from fearless.backends.cpu import tile_memory
from fearless.backends.cpu.ops import SCALAR, constant
from fearless.errors import InternalError
from fearless.ir.core import Function, Region
from fearless.ir.opdef import Op, only
from fearless.ir.ops.tile import tile_of
from fearless.ir.types import Tile


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    pass


class _Block:
    """The state of one tile block: its coordinates, the values and the local slots."""

    def __init__(self, fn: Function, args: list, coords: tuple, grid: tuple,
                 races: list | None = None, partials: dict | None = None):
        self.coords, self.grid = coords, grid     # the own tile, and the partition's grid
        self.partials = partials  # a stream-K call's partial sums by slot
        self.launch = coords[0] + grid[0] * (coords[1] + grid[1] * coords[2])  # tile.select
        self.launched = grid[0] * grid[1] * grid[2]                            # changes coords
        self.races = races  # the launch's races found (the first is kept), None: not looked for
        self.env: dict[int, object] = {id(p.value): a for p, a in zip(fn.params, args)}
        self.cond = False

    def value(self, v):
        try:
            return self.env[id(v)]
        except KeyError:
            raise InternalError(f"value {v!r} used before it was computed") from None

    def set(self, op, value) -> None:
        self.env[id(op.results[0])] = value

    def region(self, region: Region) -> None:
        for op in region.ops:
            rule = RULES.get(op.name)
            if rule is None:
                raise InternalError(f"the cpu tile backend has no rule for {op.name}")
            rule(self, op)


def run(fn: Function, grid: tuple[int, int, int], args: list, racecheck: bool = False,
        partials: dict | None = None) -> None:
    """Run ``fn`` over ``grid`` (x, y, z) tile blocks.

    ``args``: per parameter, a NumPy array view for tensors (writable for Out partitions and
    Atomic tensors) or a NumPy scalar. Writes go straight into the views. NumPy's
    floating-point and overflow warnings are off: the ops' results (wrap-around, inf, NaN) are
    their definitions. With ``racecheck``, a scatter that writes one element twice is a data
    race, raised as RaceError once every block has run (blocks never race with each other:
    they write only their own tiles, and atomics are atomic). ``partials``: a stream-K call's
    workspace (slot -> partial sum), which its pieces launch fills and its fixup launch empties
    (``passes/stream_k.py``), shared by its launches; the caller checks it ends empty.
    """
    gx, gy, gz = grid
    races = [] if racecheck else None
    partials = {} if partials is None else partials
    with np.errstate(all="ignore"):
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    block = _Block(fn, args, (x, y, z), grid, races, partials)
                    try:
                        block.region(fn.body)
                    except _Return:
                        pass
    if races:
        raise races[0].with_kernel(fn.name)


# rules ----------------------------------------------------------------------------------------

def _elementwise(ev):
    """The rule of a scalar op: its eval on the tiles (or scalars)."""
    def apply(block, op):
        args = [block.value(v) for v in op.operands]
        block.set(op, ev(op.results[0].type.dtype, op.attrs, *args))
    return apply


def _constant(block, op):
    t = op.results[0].type
    if isinstance(t, Tile):
        block.set(op, np.full(t.shape, op.attrs["value"], dtype=t.dtype.numpy))
    else:
        block.set(op, constant(op))


def _tile_window(view: np.ndarray, coords, shape):
    """The slices of ``view`` that tile ``coords`` of a grid of ``shape`` tiles covers, and the
    matching slices of the tile (empty where the tile lies past the edge)."""
    src, dst = [], []
    for c, n, extent in zip(coords, shape, view.shape):
        lo = int(c) * n
        hi = min(lo + n, extent)
        if int(c) < 0 or lo >= extent:
            lo = hi = 0
        src.append(slice(lo, hi))
        dst.append(slice(0, max(hi - lo, 0)))
    return tuple(src), tuple(dst)


def _load(block, op):
    view, *coords = [block.value(v) for v in op.operands]
    t = op.results[0].type
    out = np.full(t.shape, op.attrs.get("padding", 0), t.dtype.numpy)
    src, dst = _tile_window(view, coords, t.shape)
    out[dst] = view[src]
    block.set(op, out)


def _own(block, view_type):
    return block.coords[:view_type.ndim]


def _load_own(block, op):
    view = block.value(op.operands[0])
    t = op.results[0].type
    out = np.zeros(t.shape, t.dtype.numpy)
    src, dst = _tile_window(view, _own(block, op.operands[0].type), t.shape)
    out[dst] = view[src]
    block.set(op, out)


def _store(block, op):
    view, value = block.value(op.operands[0]), block.value(op.operands[1])
    src, dst = _tile_window(view, _own(block, op.operands[0].type), value.shape)
    view[src] = value[dst]


def _reduce(block, op):
    x = block.value(op.operands[0])
    axis, kind = op.attrs["axis"], op.attrs["kind"]
    d = op.results[0].type.dtype
    if kind == "sum":
        if d.is_float and d.bits == 16:
            total = _tree_sum(x, axis)
        elif d.is_float:  # from -0.0, so that only addends all -0.0 sum to -0.0 (IEEE 754)
            total = np.sum(x, axis=axis, initial=-0.0)
        else:
            total = np.sum(x, axis=axis)
        block.set(op, np.asarray(total).astype(d.numpy))
    else:
        fn = np.fmax if kind == "max" else np.fmin
        block.set(op, fn.reduce(x, axis=axis).astype(d.numpy))


def argmax(x: np.ndarray, axis: int, is_float: bool) -> np.ndarray:
    """The first index of the largest value along ``axis`` (i32). NaN ranks below every number,
    so the index holds ``ft.max``'s value (which ignores NaN); an all-NaN line gives 0.
    ``np.argmax`` would take the first NaN for the largest."""
    if is_float:
        with np.errstate(invalid="ignore"):
            top = np.fmax.reduce(x, axis=axis, keepdims=True)
            x = (x == top) | (np.isnan(top) & np.isnan(x))
    return np.argmax(x, axis=axis).astype(np.int32)


def _tree_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum along ``axis`` in x's own 16-bit float dtype, every partial sum rounded to it
    (NumPy's own f16 sum keeps f32 partial sums): the first half plus the second half, halving
    until one element is left, as a shuffle reduction does. f16 and bf16 additions here are
    correctly rounded: they add in f32 and round, and f32 has more than 2p + 2 bits."""
    x = np.moveaxis(x, axis, -1)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.full(x.shape[:-1] + (1,), -0.0, x.dtype)], axis=-1)
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def _mma(block, op):
    a, b, acc = (block.value(v) for v in op.operands)
    if a.dtype == np.float32:
        a, b = _tf32(a), _tf32(b)
    work = np.float64 if acc.dtype == np.float64 else np.float32
    block.set(op, (a.astype(work) @ b.astype(work) + acc).astype(acc.dtype))


def _tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to TF32's 10 significand bits (nearest, ties to even), kept as f32."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> 13) & np.uint32(1))) & np.uint32(0xFFFFE000)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)  # inf and NaN stay
    return np.where(special, bits, rounded).view(np.float32)


def _for(block, op):
    lo, hi, step = (int(block.value(v)) for v in op.operands)
    (body,) = op.regions
    for iv in range(lo, hi, step):
        block.env[id(body.args[0])] = np.int64(iv)
        try:
            block.region(body)
        except _Continue:
            continue
        except _Break:
            break


def _while(block, op):
    cond, body = op.regions
    while True:
        block.region(cond)
        if not block.cond:
            return
        try:
            block.region(body)
        except _Continue:
            continue
        except _Break:
            return


def _if(block, op):
    then, other = op.regions
    block.region(then if bool(block.value(op.operands[0])) else other)


def _inline(block, op):
    try:
        block.region(op.regions[0])
    except _Return:
        pass


def _raise(exc):
    def rule(block, op):
        raise exc()
    return rule


def _condition(block, op):
    block.cond = bool(block.value(op.operands[0]))


def _local_alloc(block, op):
    t = op.results[0].type.elem
    zero = np.zeros(t.shape, t.dtype.numpy) if isinstance(t, Tile) else \
        np.zeros((), t.dtype.numpy)
    block.set(op, [zero])


def _local_load(block, op):
    block.set(op, block.value(op.operands[0])[0])


def _grid(block, op) -> tuple[int, int, int]:
    """The tile grid of the Out partition ``op.operands[0]`` (x, y, z)."""
    out = op.operands[0]
    shape = block.value(out).shape
    grid = tuple(-(-n // t) for n, t in zip(shape, out.type.tile_shape))
    return grid + (1,) * (3 - len(grid))


def _select(block, op):
    grid = _grid(block, op)
    block.grid = grid
    block.coords = tile_of(int(block.value(op.operands[1])), grid, op.attrs["order"],
                           op.attrs["group"])


def _partial_store(block, op):
    slot = int(block.value(op.operands[1]))
    if slot in block.partials:
        raise InternalError(f"stream-K: slot {slot} written twice in one launch")
    block.partials[slot] = np.array(block.value(op.operands[0]))


def _partial_load(block, op):
    slot = int(block.value(op.operands[0]))
    if slot not in block.partials:
        raise InternalError(f"stream-K: block {block.launch} reads slot {slot}, which no block "
                            f"of the pieces launch wrote")
    block.set(op, block.partials.pop(slot))


def _local_store(block, op):
    block.value(op.operands[0])[0] = block.value(op.operands[1])


# ops of the SIMT language (threads, element access, shared memory, math functions Tile IR
# lacks), which tile kernels lack
UNSUPPORTED = {name: "SIMT only" for name in only("simt")}

RULES = {
    **{name: _elementwise(ev) for name, ev in SCALAR.items() if name not in UNSUPPORTED},
    Op.CONSTANT: _constant,
    Op.TILE_BLOCK_INDEX: lambda block, op: block.set(op, np.int64(block.coords[op.attrs["axis"]])),
    Op.TILE_NUM_BLOCKS: lambda block, op: block.set(op, np.int64(block.grid[op.attrs["axis"]])),
    Op.TILE_LAUNCH_BLOCK: lambda block, op: block.set(op, np.int64(block.launch)),
    Op.TILE_LAUNCH_BLOCKS: lambda block, op: block.set(op, np.int64(block.launched)),
    Op.TILE_NUM_TILES: lambda block, op: block.set(op, np.int64(np.prod(_grid(block, op)))),
    Op.TILE_SELECT: _select,
    Op.TILE_PARTIAL_STORE: _partial_store,
    Op.TILE_PARTIAL_LOAD: _partial_load,
    Op.TILE_DIM: lambda block, op: block.set(
        op, np.int64(block.value(op.operands[0]).shape[op.attrs["axis"]])),
    Op.TILE_LOAD: _load,
    Op.TILE_LOAD_OWN: _load_own,
    Op.TILE_STORE: _store,
    Op.TILE_SPLAT: lambda block, op: block.set(op, np.full(
        op.results[0].type.shape, block.value(op.operands[0]), op.results[0].type.dtype.numpy)),
    Op.TILE_BROADCAST: lambda block, op: block.set(op, np.broadcast_to(
        block.value(op.operands[0]), op.results[0].type.shape)),
    Op.TILE_RESHAPE: lambda block, op: block.set(op, np.reshape(
        block.value(op.operands[0]), op.results[0].type.shape)),
    Op.TILE_PERMUTE: lambda block, op: block.set(op, np.transpose(
        block.value(op.operands[0]), op.attrs["perm"])),
    Op.TILE_REDUCE: _reduce,
    Op.TILE_ARGMAX: lambda block, op: block.set(op, argmax(block.value(op.operands[0]),
                                                          op.attrs["axis"],
                                                          op.operands[0].type.dtype.is_float)),
    Op.TILE_IOTA: lambda block, op: block.set(op, np.arange(
        op.results[0].type.shape[0], dtype=np.int32)),
    Op.TILE_MMA: _mma,
    **tile_memory.RULES,
    Op.SCF_FOR: _for,
    Op.SCF_WHILE: _while,
    Op.SCF_IF: _if,
    Op.SCF_INLINE: _inline,
    Op.SCF_CONDITION: _condition,
    Op.CF_BREAK: _raise(_Break),
    Op.CF_CONTINUE: _raise(_Continue),
    Op.CF_RETURN: _raise(_Return),
    Op.LOCAL_ALLOC: _local_alloc,
    Op.LOCAL_LOAD: _local_load,
    Op.LOCAL_STORE: _local_store,
}
