"""Structured control flow.

    scf.if %cond { then } { else }
    scf.for %lo, %hi, %step { ^(%iv: i64) body }     attr step_sign: +1, -1 or 0 (unknown)
    scf.while { cond ...; scf.condition %c } { body }
    scf.inline { body }                              an inlined @fl.func; cf.return leaves it
    cf.break / cf.continue                           leave / restart the innermost loop
    cf.return                                        leave the innermost scf.inline or the kernel

Exits may appear anywhere in a region; the frontend emits nothing after them in that region.
"""
from __future__ import annotations

from fearless.ir.opdef import Op, define, no_results
from fearless.ir.types import BOOL, INDEX


def _if(op):
    if len(op.operands) != 1 or op.operands[0].type != BOOL:
        return "needs one bool condition"
    return None


def _for(op):
    if len(op.operands) != 3 or any(v.type != INDEX for v in op.operands):
        return "needs i64 start, stop and step"
    (body,) = op.regions
    if len(body.args) != 1 or body.args[0].type != INDEX:
        return "body needs one i64 induction variable"
    if op.attrs.get("step_sign") not in (-1, 0, 1):
        return "step_sign must be -1, 0 or 1"
    return None


def _while(op):
    cond = op.regions[0]
    if not cond.ops or cond.ops[-1].name != Op.SCF_CONDITION:
        return "condition region must end with scf.condition"
    return None


def _condition(op):
    if len(op.operands) != 1 or op.operands[0].type != BOOL:
        return "needs one bool"
    return None


define(Op.SCF_IF, "run the then or the else region", _if, regions=2, result=no_results)
define(Op.SCF_FOR, "counted loop over range(start, stop, step)", _for, regions=1,
       result=no_results)
define(Op.SCF_WHILE, "loop while the condition region yields true", _while, regions=2,
       result=no_results)
define(Op.SCF_CONDITION, "ends a while condition region with its bool", _condition,
       terminator=True, result=no_results)
define(Op.SCF_INLINE, "the body of an inlined device function; cf.return leaves it",
       None, regions=1, result=no_results, operands=0, results=0)
define(Op.CF_BREAK, "leave the innermost loop", None, terminator=True, result=no_results,
       operands=0, results=0)
define(Op.CF_CONTINUE, "start the next iteration of the innermost loop", None,
       terminator=True, result=no_results, operands=0, results=0)
define(Op.CF_RETURN, "leave the innermost scf.inline, or the kernel", None, terminator=True,
       result=no_results, operands=0, results=0)

# the exits: the ops that leave a region early (a loop's iteration, a loop, a function)
EXITS = frozenset({Op.CF_BREAK, Op.CF_CONTINUE, Op.CF_RETURN})
