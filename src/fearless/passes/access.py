"""Access-kind checking: read-only parameters (Slice, Array) are never written."""
from __future__ import annotations

from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.types import Access
from fearless.passes.common import params_by_value


def run(fn: Function, options) -> Function:
    params = params_by_value(fn)
    for op in fn.walk():
        if op.name == "mem.store" and op.operands[0].type.access is Access.READ:
            p = params[id(op.operands[0])]
            kind = "Slice" if p.type.ndim == 1 else "Array"
            raise SafetyError(f"'{p.name}' is a read-only {kind}; a kernel may not write it",
                              kernel=fn.name, param=p.name, span=op.span,
                              help="declare it fl.DisjointSlice[T] (or fl.DisjointArray[T, n]) "
                                   "so that each thread writes its own element")
    return fn
