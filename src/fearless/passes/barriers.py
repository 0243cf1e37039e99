"""Barrier uniformity: every ``sync_threads()`` must be reached by all threads of the block.

A barrier under a condition that can differ between the threads of one block (it depends on a
thread index, a lane, a value read from writable memory, an atomic's result, or a variable
assigned under such a condition), or after such a condition let some threads leave the loop or
the kernel, deadlocks or corrupts shared memory on the GPU. This pass finds the values that may
differ between threads (``analysis/uniformity.py``) and refuses such barriers with a
SafetyError pointing at the barrier and the condition; inside ``with fl.unsafe():`` the barrier
is accepted and the cpu backend checks at run time that the whole block reaches it.
"""
from __future__ import annotations

from fearless.analysis.uniformity import analyse
from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.opdef import Op


def run(fn: Function, options) -> Function:
    if not any(op.name == Op.SIMT_BARRIER for op in fn.walk()):
        return fn
    for op, reason in analyse(fn, "block"):
        if reason is None or op.attrs.get("unsafe"):
            continue
        raise SafetyError(
            f"not every thread of the block may reach this barrier: the condition on line "
            f"{reason.line} "
            f"can differ between threads (it depends on a thread index or on data)",
            kernel=fn.name, span=op.span,
            help="move fl.sync_threads() out of the branch so that every thread reaches "
                 "it (guard the work, not the barrier); if every thread does, wrap it in "
                 "`with fl.unsafe():`")
    return fn
