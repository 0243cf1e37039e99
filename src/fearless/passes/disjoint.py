"""DisjointSlice index provenance: each access uses the thread's own ThreadIndex, in order.

The frontend keeps a ThreadIndex operand on accesses to Disjoint arrays only when the index
expression *is* the value returned by ``fl.thread.index_1d()`` (or the ``(row, col)`` of
``index_2d()``); any arithmetic produced a plain i64. So the proof is a type check here: a
rank-n Disjoint array needs ``tid<nd, axis k>`` at position k. This is what makes writes
race-free: no two threads of a launch share a ThreadIndex.
"""
from __future__ import annotations

from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.types import Access, ThreadIndex
from fearless.passes.common import params_by_value

_AXIS = {0: "row", 1: "column"}


def run(fn: Function, options) -> Function:
    params = params_by_value(fn)
    for op in fn.walk():
        if op.name not in ("mem.load", "mem.store"):
            continue
        array = op.operands[0]
        if array.type.access is not Access.DISJOINT:
            continue
        ndim = array.type.ndim
        indices = op.operands[1:1 + ndim]
        for k, index in enumerate(indices):
            want = ThreadIndex(ndim, k)
            if index.type == want:
                continue
            spans = op.attrs.get("index_spans")
            span = spans[k] if spans else op.span
            name = params[id(array)].name
            raise SafetyError(_reason(op.name, index.type, want, k, ndim),
                              kernel=fn.name, param=name, span=span,
                              help=(f"several threads may update this element: declare "
                                    f"'{name}' fl.AtomicSlice[T] and write {name}.add(i, v)")
                              if op.attrs.get("rmw") else _help(ndim))
    return fn


def _reason(opname: str, got, want: ThreadIndex, k: int, ndim: int) -> str:
    verb = "written" if opname == "mem.store" else "read"
    kind = "DisjointSlice" if ndim == 1 else "DisjointArray"
    if not isinstance(got, ThreadIndex):
        return (f"a {kind} may be {verb} only at this thread's own index, and this index is a "
                f"computed integer")
    if got.space != want.space:
        return (f"a {ndim}-d {kind} needs the {ndim}-d thread index, not the "
                f"{got.space}-d one")
    return (f"index {k} of this {kind} must be the thread's {_AXIS[want.axis]}, but it is the "
            f"thread's {_AXIS[got.axis]}")


def _help(ndim: int) -> str:
    if ndim == 1:
        return ("index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a "
                "plain integer, which could be another thread's element")
    return "index as out[r, c] with r, c = fl.thread.index_2d(), in that order"
