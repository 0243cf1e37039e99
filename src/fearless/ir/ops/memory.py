"""Array element access and local variable slots.

    mem.load %arr, %i0, ...          -> element      attrs: checked (bool), site (int, bounds pass)
    mem.store %arr, %i0, ..., %v                     (a DisjointSlice store at the own index, past
                                                      the end, is skipped: the last block's tail)
    mem.dim %arr                     -> i64          attr axis: the extent of one axis
    mem.atomic %arr, %i, %v [, %new] -> old element attrs op (add, sub, min, max, and, or, xor,
                                                      exchange, cas), scope (block, device,
                                                      system), order (relaxed, acquire,
                                                      release, acq_rel, seq_cst); cas takes
                                                      the expected and the new value
    local.alloc                      -> ref<T>       a zero-initialised slot (hoisted to entry)
    local.load %ref -> T  /  local.store %ref, %v

Index operands are i64 values or ThreadIndex proofs; which of them an access needs is decided by
the safety passes, not here.
"""
from __future__ import annotations

from fearless.ir.opdef import Op, define, no_results
from fearless.ir.types import INDEX, Array, LocalRef, Scalar, ThreadIndex


def _indices_ok(arr, indices):
    if not isinstance(arr.type, Array):
        return f"first operand must be an array, got {arr.type}"
    if len(indices) != arr.type.ndim:
        return f"{arr.type.ndim}-d array indexed with {len(indices)} indices"
    for v in indices:
        if v.type != INDEX and not isinstance(v.type, ThreadIndex):
            return f"index of type {v.type} is neither i64 nor a ThreadIndex"
    return None


def _load(op):
    return _indices_ok(op.operands[0], op.operands[1:])


def _store(op):
    msg = _indices_ok(op.operands[0], op.operands[1:-1])
    if msg:
        return msg
    if op.operands[-1].type != Scalar(op.operands[0].type.dtype):
        return f"stored value {op.operands[-1].type} is not the element type"
    return None


def _dim(op):
    if len(op.operands) != 1 or not isinstance(op.operands[0].type, Array):
        return "needs one array"
    if not 0 <= op.attrs.get("axis", -1) < op.operands[0].type.ndim:
        return "axis out of range"
    return None


def _alloc(op):
    return None if isinstance(op.result.type, LocalRef) else "result must be a ref"


def _local_load(op):
    (ref,) = op.operands
    if not isinstance(ref.type, LocalRef):
        return "loads from a ref"
    return None


def _local_store(op):
    ref, value = op.operands
    if not isinstance(ref.type, LocalRef) or value.type != ref.type.elem:
        return f"stores {value.type} into {ref.type}"
    return None


ATOMIC_OPS = ("add", "sub", "min", "max", "and", "or", "xor", "exchange", "cas")
SCOPES = ("block", "device", "system")
ORDERS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")


def _atomic(op):
    arr = op.operands[0]
    if not isinstance(arr.type, Array) or arr.type.ndim != 1:
        return "atomics take a 1-d array"
    kind = op.attrs.get("op")
    if kind not in ATOMIC_OPS or op.attrs.get("scope") not in SCOPES \
            or op.attrs.get("order") not in ORDERS:
        return f"bad atomic attributes {op.attrs!r}"
    want = 4 if kind == "cas" else 3
    if len(op.operands) != want:
        return f"{kind} takes {want} operands"
    msg = _indices_ok(arr, op.operands[1:2])
    if msg:
        return msg
    elem = Scalar(arr.type.dtype)
    if any(v.type != elem for v in op.operands[2:]):
        return "values must be the element type"
    return None


define(Op.MEM_LOAD, "read one array element", _load, track="simt", checked_read=True,
       result=lambda ts, attrs: [Scalar(ts[0].dtype)])
define(Op.MEM_STORE, "write one array element", _store, side_effects=True, track="simt",
       result=no_results)
define(Op.MEM_ATOMIC, "atomic read-modify-write of one element; returns the old value", _atomic,
       side_effects=True, track="simt", checked_read=True,
       result=lambda ts, attrs: [Scalar(ts[0].dtype)])
define(Op.MEM_DIM, "extent of one array axis", _dim, track="simt", result=lambda ts, attrs: [INDEX])
define(Op.LOCAL_ALLOC, "a zero-initialised local variable slot", _alloc,
       side_effects=True, operands=0, results=1)
define(Op.LOCAL_LOAD, "read a local slot", _local_load, result=lambda ts, attrs: [ts[0].elem])
define(Op.LOCAL_STORE, "write a local slot", _local_store, side_effects=True,
       result=no_results)
