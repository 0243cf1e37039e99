"""Tile ops: what one tile block of a ``@fearless.tile.kernel`` does.

    tile.block_index             -> i64        attr axis: this tile block's coordinate (x, y, z)
    tile.num_blocks              -> i64        attr axis: tile blocks of the launch along an axis
    tile.dim %t                  -> i64        attr axis: an extent of a tensor parameter
    tile.launch_block            -> i64        this tile block's linear index in the launch
    tile.launch_blocks           -> i64        tile blocks in the launch
    tile.num_tiles %out          -> i64        tiles of an Out partition (all axes)
    tile.select %out, %v                       attrs order, group: from here on the block's
                                               own tile (tile.block_index, load_own, store) is
                                               tile %v of the partition in that order
                                               (``passes/persistent.py``; a bijection, so
                                               every tile keeps exactly one owner)
    tile.partial_store %acc, %s                a stream-K block's partial sum of a shared
                                               tile, into slot %s of the launch's workspace
                                               (``passes/stream_k.py``: slots 2b and 2b + 1
                                               are block b's, one per piece)
    tile.partial_load %s         -> tile       read slot %s (in the fixup launch, after the
                                               pieces launch that wrote it)
    tile.load %t, %i0, ...       -> tile       attr shape: the tile at tile coordinates (i0, ...)
                                               of the grid of ``shape`` tiles over %t; elements
                                               past the tensor's edge read as zero
    tile.load_own %out           -> tile       the block's own tile of an Out partition
    tile.store %out, %v                        write the block's own tile (clipped at the edge)
    tile.splat %s                -> tile       a scalar repeated over the result shape
    tile.broadcast %v            -> tile       extents of 1 repeated up to the result shape
    tile.reshape %v              -> tile       same elements (row-major), another shape; %v may
                                               be a scalar (a 0-d tile)
    tile.permute %v              -> tile       attr perm: result axis k is operand axis perm[k]
    tile.reduce %v               -> tile       attrs kind (sum/max/min), axis; the axis is removed
                                               (a 1-d operand gives a scalar: a 0-d tile)
    tile.argmax %v               -> tile<i32>  attr axis: first index of the maximum (i32 scalar
                                               for a 1-d operand)
    tile.iota                    -> tile<i32>  0, 1, ... along a 1-d result
    tile.mma %a, %b, %acc        -> acc type   acc + a @ b (f16/bf16/f32/f64 in, f32/f64 acc)

There is no op that stores at a computed position of an Out partition: a store to another
tile block's tile cannot be expressed, which is what makes tile kernels race-free.
"""
from __future__ import annotations

from math import prod

from fearless.dtypes import i32
from fearless.ir.opdef import Op, all_of, define, no_results
from fearless.ir.types import INDEX, Role, Scalar, TensorView, Tile

REDUCTIONS = ("sum", "max", "min")


def _axis(op):
    if op.attrs.get("axis") not in (0, 1, 2):
        return "axis must be 0, 1 or 2"
    return None


def _view(v, role=None):
    if not isinstance(v.type, TensorView):
        return f"operand of type {v.type} is not a tensor parameter"
    if role is not None and v.type.role is not role:
        return f"needs an {role.value} tensor, got {v.type}"
    return None


def _dim(op):
    return _view(op.operands[0]) or (None if 0 <= op.attrs.get("axis", -1)
                                     < op.operands[0].type.ndim else "axis out of range")


def _load(op):
    view, *indices = op.operands
    msg = _view(view)
    if msg:
        return msg
    shape = op.attrs.get("shape")
    if len(indices) != view.type.ndim or any(i.type != INDEX for i in indices):
        return f"needs {view.type.ndim} i64 tile coordinates"
    if not isinstance(shape, (tuple, list)) or len(shape) != view.type.ndim:
        return "attr shape needs one extent per axis of the tensor"
    return None


def _load_own(op):
    (view,) = op.operands
    return _view(view, Role.OUT)


def _store(op):
    view, value = op.operands
    msg = _view(view, Role.OUT)
    if msg:
        return msg
    if value.type != Tile(view.type.dtype, view.type.tile_shape):
        return f"stores {value.type} into a partition of {view.type}"
    return None


def _tile_result(op):
    return None if isinstance(op.result.type, Tile) else "result must be a tile"


def _splat(op):
    (s,) = op.operands
    if not isinstance(s.type, Scalar) or s.type.dtype is not op.result.type.dtype:
        return "splats a scalar of the result's dtype"
    return None


def _same_dtype_tile(op):
    (v,) = op.operands
    if not isinstance(v.type, Tile) or v.type.dtype is not op.result.type.dtype:
        return "operand must be a tile of the result's dtype"
    return None


def _shape_of(t) -> tuple:
    """A tile's shape; () for a scalar, which the tile track treats as a 0-d tile."""
    return t.shape if isinstance(t, Tile) else ()


def _reduced(dtype, shape: tuple):
    """The type of a reduction's result: a tile, or a scalar when no axis is left."""
    return Tile(dtype, shape) if shape else Scalar(dtype)


def _reduced_result(op):
    (v,) = op.operands
    if op.result.type != _reduced(op.result.type.dtype, _without(v.type.shape, op.attrs)):
        return f"a reduction of {v.type} along axis {op.attrs['axis']} gives " \
               f"{_reduced(op.result.type.dtype, _without(v.type.shape, op.attrs))}"
    return None


def _broadcast(op):
    src, dst = op.operands[0].type.shape, op.result.type.shape
    if len(src) != len(dst) or any(s not in (1, d) for s, d in zip(src, dst)):
        return f"cannot broadcast {src} to {dst}"
    return None


def _reshape(op):
    (v,) = op.operands
    if not isinstance(v.type, (Tile, Scalar)) or v.type.dtype is not op.result.type.dtype:
        return "operand must be a tile or scalar of the result's dtype"
    src, dst = _shape_of(v.type), op.result.type.shape
    return None if prod(src) == prod(dst) else f"cannot reshape {src} to {dst}"


def _permute(op):
    perm = tuple(op.attrs.get("perm", ()))
    src, dst = op.operands[0].type.shape, op.result.type.shape
    if sorted(perm) != list(range(len(src))) or tuple(src[p] for p in perm) != dst:
        return f"perm {perm} does not map {src} to {dst}"
    return None


def _without(shape: tuple, attrs) -> tuple:
    """``shape`` less the axis a reduction removes (attr axis)."""
    return shape[:attrs["axis"]] + shape[attrs["axis"] + 1:]


def _axis_of(op):
    axis, src = op.attrs.get("axis"), op.operands[0].type.shape
    if not isinstance(axis, int) or not 0 <= axis < len(src):
        return f"axis {axis} out of range for {src}"
    return None


def _reduce(op):
    (v,) = op.operands
    if not isinstance(v.type, Tile) or v.type.dtype is not op.result.type.dtype:
        return "operand must be a tile of the result's dtype"
    if op.attrs.get("kind") not in REDUCTIONS:
        return f"unknown reduction {op.attrs.get('kind')!r}"
    return _axis_of(op)


def _argmax(op):
    if not isinstance(op.operands[0].type, Tile):
        return "argmax takes a tile"
    return _axis_of(op)


def _iota(op):
    t = op.result.type
    return None if len(t.shape) == 1 and t.dtype.name == "i32" else "iota gives a 1-d i32 tile"


_MMA_IN = {"f16", "bf16", "f32", "f64"}


def _mma(op):
    a, b, acc = (v.type for v in op.operands)
    if not all(isinstance(t, Tile) and len(t.shape) == 2 for t in (a, b, acc)):
        return "mma takes 2-d tiles"
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or acc.shape != (m, n):
        return f"shapes {a.shape} @ {b.shape} + {acc.shape} do not agree"
    if a.dtype is not b.dtype or a.dtype.name not in _MMA_IN:
        return f"mma inputs must share one of {sorted(_MMA_IN)}, got {a.dtype} and {b.dtype}"
    want = "f64" if a.dtype.name == "f64" else "f32"
    if acc.dtype.name != want:
        return f"the accumulator of {a.dtype} inputs is {want}, got {acc.dtype}"
    return None


define(Op.TILE_BLOCK_INDEX, "this tile block's coordinate along attr axis", _axis,
       track="tile", result=lambda ts, attrs: [INDEX])
define(Op.TILE_NUM_BLOCKS, "number of tile blocks along attr axis", _axis, track="tile",
       result=lambda ts, attrs: [INDEX])
def _out(op):
    t = op.operands[0].type
    return None if isinstance(t, TensorView) and t.role is Role.OUT else "needs an Out partition"


def tile_of(v: int, grid: tuple[int, int, int], order: str, group: int) -> tuple[int, int, int]:
    """Tile ``v`` (``0 <= v < gx * gy * gz``) of a partition of ``grid`` tiles in ``order``:
    what ``tile.select`` means (the cpu backend computes it with this; the Tile IR lowering
    with the same arithmetic). ``row``: axis 0 fastest. ``grouped``: per axis-2 slice, bands
    of ``group`` tiles along axis 0 (the last band keeps what is left), walked down axis 0
    then across axis 1 inside each band. Both are bijections onto the tiles."""
    gx, gy, _ = grid
    z, r = divmod(v, gx * gy)
    if order == "row":
        return r % gx, r // gx, z
    width = group * gy
    first = (r // width) * group
    size = min(gx - first, group)
    local = r % width
    return first + local % size, local // size, z


def _select(op):
    if op.attrs.get("order") not in ("row", "grouped") or not isinstance(
            op.attrs.get("group"), int) or op.attrs["group"] < 1:
        return "order must be row or grouped, group an int >= 1"
    return _out(op) or (None if op.operands[1].type == INDEX else "the tile number is an i64")


define(Op.TILE_LAUNCH_BLOCK, "this tile block's linear index in the launch", None, track="tile",
       result=lambda ts, attrs: [INDEX], operands=0, results=1)
define(Op.TILE_LAUNCH_BLOCKS, "tile blocks in the launch", None, track="tile",
       result=lambda ts, attrs: [INDEX], operands=0, results=1)
define(Op.TILE_NUM_TILES, "tiles of an Out partition", _out, track="tile",
       result=lambda ts, attrs: [INDEX], operands=1, results=1)
define(Op.TILE_SELECT, "make tile %v (in attr order) the block's own tile", _select,
       side_effects=True, track="tile", result=no_results, operands=2, results=0)
def _partial_store(op):
    acc, slot = op.operands
    if not isinstance(acc.type, Tile) or not acc.type.dtype.is_float:
        return "a partial sum is a float tile"
    return None if slot.type == INDEX else "the slot is an i64"


def _partial_load(op):
    (slot,) = op.operands
    t = op.result.type
    if not isinstance(t, Tile) or not t.dtype.is_float:
        return "a partial sum is a float tile"
    return None if slot.type == INDEX else "the slot is an i64"


define(Op.TILE_PARTIAL_STORE, "store a stream-K block's partial sum in a workspace slot",
       _partial_store, side_effects=True, track="tile", result=no_results, operands=2,
       results=0)
define(Op.TILE_PARTIAL_LOAD, "read a workspace slot's partial sum", _partial_load,
       side_effects=True, track="tile", operands=1, results=1)
define(Op.TILE_DIM, "extent of one axis of a tensor parameter",
       _dim,
       track="tile", result=lambda ts, attrs: [INDEX], operands=1, results=1)
define(Op.TILE_LOAD, "load the tile at tile coordinates; zero past the edge", _load, track="tile",
       result=lambda ts, attrs: [Tile(ts[0].dtype, tuple(attrs["shape"]))])
define(Op.TILE_LOAD_OWN, "load the block's own tile of an Out partition",
       _load_own, track="tile",
       result=lambda ts, attrs: [Tile(ts[0].dtype, ts[0].tile_shape)], operands=1, results=1)
define(Op.TILE_STORE, "store the block's own tile of an Out partition",
       _store, side_effects=True, track="tile", result=no_results, operands=2, results=0)
define(Op.TILE_SPLAT, "a scalar repeated over the result shape",
       all_of(_tile_result, _splat), track="tile", operands=1, results=1)
define(Op.TILE_BROADCAST, "repeat extents of 1",
       all_of(_tile_result, _same_dtype_tile, _broadcast), track="tile", operands=1, results=1)
define(Op.TILE_RESHAPE, "same elements, another shape",
       all_of(_tile_result, _reshape), track="tile", operands=1, results=1)
define(Op.TILE_PERMUTE, "reorder axes", all_of(_tile_result, _same_dtype_tile, _permute),
       track="tile", operands=1, results=1,
       result=lambda ts, attrs: [Tile(ts[0].dtype, tuple(ts[0].shape[p] for p in attrs["perm"]))])
define(Op.TILE_REDUCE, "sum/max/min along an axis",
       all_of(_reduce, _reduced_result), track="tile", operands=1, results=1,
       result=lambda ts, attrs: [_reduced(ts[0].dtype, _without(ts[0].shape, attrs))])
define(Op.TILE_ARGMAX, "index of the first maximum along an axis",
       all_of(_argmax, _reduced_result), track="tile",
       result=lambda ts, attrs: [_reduced(i32, _without(ts[0].shape, attrs))], operands=1,
       results=1)
define(Op.TILE_IOTA, "0, 1, 2, ... as a 1-d i32 tile", all_of(_tile_result, _iota),
       track="tile", operands=0, results=1)
define(Op.TILE_MMA, "matrix multiply-accumulate acc + a @ b", _mma,
       track="tile", result=lambda ts, attrs: [ts[2]], operands=3, results=1)
