"""SIMT ops: the calling thread's position in the launch and its block, barriers, shared memory.

    simt.thread_index -> tid<space, axis>   attrs space (1, 2 or 3), axis, block (bool)
        1-d: blockIdx.x * blockDim.x + threadIdx.x
        2-d: axis 0 (row) uses y, axis 1 (column) uses x, so consecutive threads of a warp
             touch consecutive columns of a row-major array (coalesced)
        3-d: axis 0 uses z, 1 y, 2 x: the launch axis is "xyz"[space - 1 - axis]
        block=True: the position within the block: 1-d threadIdx.y * blockDim.x + threadIdx.x,
             2-d (threadIdx.y, threadIdx.x); the proof of a thread's own shared-memory slot
    simt.index_value %tid -> i64            the plain integer value (no longer a proof)
    simt.special -> i64                     attrs reg, axis (0 = x, 1 = y): block_index
                                            (blockIdx), block_dim (blockDim), grid_dim
                                            (gridDim), thread_in_block (threadIdx), lane,
                                            warp_index (the linear slot in the block // 32)
    simt.barrier                            __syncthreads(): every thread of the block waits
                                            here; attr unsafe: written inside fl.unsafe()
    simt.print %v...                        attr parts: literal strings and operand positions, in
                                            order (``print()``; vprintf on the GPU)
    simt.shared_alloc -> array<T, nd, shared>   attrs shape (tuple of ints, or None for the
                                            launch's dynamic shared memory, 1-d), name
"""
from __future__ import annotations

from fearless.ir.opdef import Op, define, no_results
from fearless.ir.types import INDEX, Access, Array, Scalar, ThreadIndex

SPECIAL = ("block_index", "block_dim", "grid_dim", "thread_in_block", "lane", "warp_index")


def _thread_index(op):
    space, axis = op.attrs.get("space"), op.attrs.get("axis")
    if space not in (1, 2, 3) or not 0 <= axis < space or (op.attrs.get("block") and space == 3):
        return f"bad index space {space} / axis {axis}"
    return None


def _index_value(op):
    (v,) = op.operands
    if not isinstance(v.type, ThreadIndex):
        return "turns a ThreadIndex into i64"
    return None


def _special(op):
    if op.attrs.get("reg") not in SPECIAL or op.attrs.get("axis") not in (0, 1):
        return f"bad special register {op.attrs.get('reg')!r} / axis {op.attrs.get('axis')!r}"
    return None


def _shared_alloc(op):
    t = op.result.type
    if not (isinstance(t, Array) and t.access is Access.SHARED and t.contiguous):
        return "result must be a contiguous shared array"
    shape = op.attrs.get("shape")
    if shape is None:
        return None if t.ndim == 1 else "dynamic shared memory is 1-d"
    if not (isinstance(shape, tuple) and len(shape) == t.ndim
            and all(isinstance(e, int) and e > 0 for e in shape)):
        return f"shape {shape!r} must be {t.ndim} positive ints"
    return None


def _print(op):
    parts = op.attrs.get("parts")
    if not isinstance(parts, tuple) or sorted(p for p in parts if isinstance(p, int)) != \
            list(range(len(op.operands))):
        return "parts must name every operand once"
    if not all(isinstance(v.type, Scalar) for v in op.operands):
        return "prints scalars"
    return None


define(Op.SIMT_PRINT, "print numbers and text from each thread (vprintf)", _print,
       side_effects=True, track="simt", result=no_results)
define(Op.SIMT_THREAD_INDEX, "this thread's coordinate in the launch's index space (or block)",
       _thread_index, track="simt",
       result=lambda ts, attrs: [ThreadIndex(attrs["space"], attrs["axis"],
                                             bool(attrs.get("block", False)))],
       operands=0, results=1)
define(Op.SIMT_INDEX_VALUE, "the i64 value of a ThreadIndex", _index_value,
       track="simt", result=lambda ts, attrs: [INDEX], operands=1, results=1)
define(Op.SIMT_SPECIAL, "a block/grid/lane coordinate as i64", _special,
       track="simt", result=lambda ts, attrs: [INDEX], operands=0, results=1)
define(Op.SIMT_BARRIER, "block-wide barrier (__syncthreads)", None, side_effects=True,
       track="simt", result=no_results, operands=0, results=0)
define(Op.SIMT_SHARED_ALLOC, "a block-shared array (static shape or the launch's dynamic bytes)",
       _shared_alloc, side_effects=True, track="simt", operands=0, results=1)
