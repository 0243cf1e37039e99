"""Warp ops: data exchange and votes among the 32 lanes of a warp (PTX ``*.sync`` semantics).

    warp.shuffle %value, %b: u32, %mask: u32 -> T    attrs mode (idx, down, up, bfly), width
                                                    (a power of two <= 32), full (mask is the
                                                    constant 0xFFFFFFFF), unsafe
    warp.vote %pred: bool, %mask: u32 -> u32 | bool attrs mode (ballot -> u32, any/all -> bool)
    warp.reduce %value, %mask: u32 -> T             attrs op (sum, max, min)

``full`` is what the safety pass (``passes/warps.py``) and the backends key on: a full-mask op
must be reached by every lane of its warp; the lowering of a reduction depends on it too.
"""
from __future__ import annotations

from fearless.dtypes import u32
from fearless.ir.opdef import Op, all_of, define, like_first
from fearless.ir.types import BOOL, Scalar

MASK = Scalar(u32)
SHUFFLE_MODES = ("idx", "down", "up", "bfly")
VOTE_MODES = ("ballot", "any", "all")
REDUCE_OPS = ("sum", "max", "min")


def _mask(op):
    return None if op.operands[-1].type == MASK else "the mask must be u32"


def _shuffle(op):
    value, b, _ = op.operands
    width = op.attrs.get("width")
    if op.attrs.get("mode") not in SHUFFLE_MODES:
        return f"bad shuffle mode {op.attrs.get('mode')!r}"
    if width not in (1, 2, 4, 8, 16, 32):
        return f"bad width {width!r}"
    if not isinstance(value.type, Scalar):
        return "shuffles a scalar"
    return None if b.type == MASK else "the lane operand must be u32"


def _vote(op):
    mode = op.attrs.get("mode")
    if mode not in VOTE_MODES:
        return f"bad vote mode {mode!r}"
    if op.operands[0].type != BOOL:
        return "the predicate must be bool"
    return None


def _reduce(op):
    value = op.operands[0]
    if op.attrs.get("op") not in REDUCE_OPS:
        return f"bad reduction {op.attrs.get('op')!r}"
    if not isinstance(value.type, Scalar) or value.type.dtype.is_bool:
        return "reduces a number"
    return None


define(Op.WARP_SHUFFLE, "read a value from another lane of the warp (shfl.sync)",
       all_of(_mask, _shuffle), side_effects=True, track="simt", warp_collective=True,
       result=like_first, operands=3, results=1)
define(Op.WARP_VOTE, "ballot / any / all over the lanes of a mask (vote.sync)",
       all_of(_vote, _mask), side_effects=True, track="simt", warp_collective=True,
       result=lambda ts, attrs: [MASK if attrs["mode"] == "ballot" else BOOL],
       operands=2, results=1)
define(Op.WARP_REDUCE, "sum / max / min over the lanes of a mask (redux.sync or shuffles)",
       all_of(_reduce, _mask), side_effects=True, track="simt", warp_collective=True,
       result=like_first, operands=2, results=1)
