"""Access-kind checking: what each kind of array parameter allows.

Read-only parameters (Slice, Array) are never written; an AtomicSlice is touched only through its
atomic methods; an UnsafeSlice only inside ``with fl.unsafe():``.
"""
from __future__ import annotations

from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.types import Access
from fearless.analysis.common import array_name, params_by_value


def run(fn: Function, options) -> Function:
    params = params_by_value(fn)
    for op in fn.walk():
        if op.name not in (Op.MEM_LOAD, Op.MEM_STORE, Op.MEM_ATOMIC):
            continue
        array = op.operands[0]
        access, name = array.type.access, array_name(params, array)
        if op.name == Op.MEM_STORE and access is Access.READ:
            kind = "Slice" if array.type.ndim == 1 else "Array"
            rmw = op.attrs.get("rmw")
            raise SafetyError(f"'{name}' is a read-only {kind}; a kernel may not write it",
                              kernel=fn.name, param=name, span=op.span,
                              help=f"declare it fl.AtomicSlice[T] and write {name}.add(i, v) "
                                   f"to update it from several threads" if rmw else
                              "declare it fl.DisjointSlice[T] (or fl.DisjointArray[T, n]) "
                              "so that each thread writes its own element")
        if op.name == Op.MEM_LOAD and access is Access.ATOMIC:
            raise SafetyError(f"'{name}' is an AtomicSlice; it is read only through its atomic "
                              f"methods", kernel=fn.name, param=name, span=op.span,
                              help=f"the atomic methods return the old value, for example "
                                   f"old = {name}.add(i, 0)")
        if access is Access.UNSAFE and not op.attrs.get("unsafe"):
            verb = "written" if op.name == Op.MEM_STORE else "read"
            raise SafetyError(f"'{name}' is an UnsafeSlice; it may be {verb} only inside "
                              f"`with fl.unsafe():`", kernel=fn.name, param=name, span=op.span,
                              help="wrap the access in `with fl.unsafe():`, or declare the "
                                   "parameter a DisjointSlice")
    return fn
