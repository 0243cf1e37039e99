"""SIMT ops: the calling thread's position in the launch.

    simt.thread_index -> tid<space, axis>   attrs space (1 or 2), axis
        1-d: blockIdx.x * blockDim.x + threadIdx.x
        2-d: axis 0 (row) uses y, axis 1 (column) uses x, so consecutive threads of a warp
             touch consecutive columns of a row-major array (coalesced)
    simt.index_value %tid -> i64            the plain integer value (no longer a proof)
"""
from __future__ import annotations

from fearless.ir.opdef import counts, define, all_of
from fearless.ir.types import INDEX, ThreadIndex


def _thread_index(op):
    space, axis = op.attrs.get("space"), op.attrs.get("axis")
    if space not in (1, 2) or not 0 <= axis < space:
        return f"bad index space {space} / axis {axis}"
    return None if op.result.type == ThreadIndex(space, axis) else "result type mismatch"


def _index_value(op):
    (v,) = op.operands
    if not isinstance(v.type, ThreadIndex) or op.result.type != INDEX:
        return "turns a ThreadIndex into i64"
    return None


define("simt.thread_index", "this thread's coordinate in the launch's index space",
       all_of(counts(0, 1), _thread_index))
define("simt.index_value", "the i64 value of a ThreadIndex", all_of(counts(1, 1), _index_value))
