"""The tile subset: what of a tile kernel's IR the GPU can run (Tile IR expresses it).

The CPU backend interprets any IR, but a kernel must mean the same on every backend, so what the
Tile IR lowering (``backends/tileir/lower.py``) has no rule for is refused here, before any
backend, with the error the GPU compile path gives: an op of the SIMT language, a math function
without a Tile IR operation, a ``for`` loop whose step is not a positive constant (Tile IR's
``for`` counts up). ``UNSUPPORTED``, the lowering's table of the ops it lacks, is derived from
the ops' ``track``: the SIMT-only ops, math functions among them (a test checks that every op
has a lowering rule or a reason here); the lowering treats anything else it cannot lower as a
fearless bug.
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.ir.core import Function
from fearless.ir.opdef import REGISTRY, Op, only

UNSUPPORTED = {name: f"{name} has no Tile IR operation" if REGISTRY[name].eval else "SIMT only"
               for name in only("simt")}

HELP = ("tile kernels support if, for over range(...), while, break, continue, return, tile "
        "operations and math functions with a Tile IR operation")


def run(fn: Function, options) -> Function:
    for op in fn.walk():  # in program order: the first refusal is the one the lowering met first
        why = UNSUPPORTED.get(op.name)
        if why is not None:
            raise CompileError(why, kernel=fn.name, span=op.span, help=HELP)
        if op.name == Op.SCF_FOR and op.attrs.get("step_sign") != 1:
            raise CompileError("tile-kernel loops need a positive constant step",
                               kernel=fn.name, span=op.span,
                               help="write range(start, stop) or range(start, stop, k) with k > 0")
    return fn
