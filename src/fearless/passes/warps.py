"""Warp convergence: every lane named by a warp op's mask must reach it together.

A full-mask warp op (``fl.warp.shuffle(v, k)`` and friends without ``mask=``) under a condition
that can differ between the lanes of a warp, or after such a condition let some lanes leave a
loop or the kernel, is undefined on the GPU (``shfl.sync`` waits for lanes that never come, or
reads a value nobody wrote). The lane-level uniformity analysis (``analysis/uniformity.py``) finds
those; they are refused with a SafetyError pointing at the call and the condition, unless the
call gives an explicit ``mask=`` inside ``with fl.unsafe():`` (the cpu backend then checks at run
time that exactly the lanes of the mask arrive).

Sets ``fn.attrs["warp_full"]`` when the kernel has a full-mask warp op: its launches need whole
warps (a block size that is a multiple of 32), checked by the runtime.
"""
from __future__ import annotations

from fearless.analysis.uniformity import analyse
from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.opdef import Op, warp_collectives

_CALLS = {Op.WARP_SHUFFLE: "a warp shuffle", Op.WARP_VOTE: "a warp vote",
          Op.WARP_REDUCE: "a warp reduction", Op.WARP_MMA: "a tensor-core mma",
          Op.WARP_LDMATRIX: "an ldmatrix"}
_COLLECTIVE = warp_collectives()


def run(fn: Function, options) -> Function:
    ops = [op for op in fn.walk() if op.name in _COLLECTIVE]
    fn.attrs["warp_full"] = any(op.attrs.get("full") for op in ops)
    if not ops:
        return fn
    for op, reason in analyse(fn, "warp"):
        if reason is None or (op.attrs.get("explicit") and op.attrs.get("unsafe")):
            continue
        raise SafetyError(
            f"not every lane of the warp may reach {_CALLS[op.name]}: the condition on line "
            f"{reason.line} can differ between the lanes of a warp",
            kernel=fn.name, span=op.span,
            help="call it where all 32 lanes arrive (compute a neutral value in the lanes that "
                 "should not take part), branch on fl.warp.index() instead" + (
                     "" if op.name in (Op.WARP_MMA, Op.WARP_LDMATRIX) else
                     ", or give mask= inside `with fl.unsafe():`"))
    return fn
