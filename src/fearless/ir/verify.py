"""The IR verifier: structural and type checks that every pass must preserve.

Run after the frontend and after every pass in tests. A failure is a fearless bug, so it raises
``InternalError`` with the printed op, never a user-facing CompileError.
"""
from __future__ import annotations

from fearless.errors import InternalError
from fearless.ir.core import Function, Operation, Region
from fearless.ir.opdef import REGISTRY, Op

_LOOPS = (Op.SCF_FOR, Op.SCF_WHILE)


def verify(fn: Function) -> Function:
    """Check ``fn``; return it unchanged so calls chain. Raises InternalError."""
    scope = {id(p.value) for p in fn.params}
    _region(fn, fn.body, scope, loop_depth=0)
    return fn


def _fail(fn: Function, op: Operation, msg: str):
    where = f" at {op.span.location()}" if op.span else ""
    raise InternalError(f"invalid IR in kernel '{fn.name}': {op.name}{where}: {msg}")


def _region(fn: Function, region: Region, scope: set[int], loop_depth: int) -> None:
    scope = scope | {id(a) for a in region.args}
    for op in region.ops:
        opdef = REGISTRY.get(op.name)
        if opdef is None:
            _fail(fn, op, "unregistered op")
        if len(op.regions) != opdef.regions:
            _fail(fn, op, f"has {len(op.regions)} regions, expects {opdef.regions}")
        for v in op.operands:
            if id(v) not in scope:
                _fail(fn, op, f"operand {v!r} is not defined before use")
        for what, want, got in (("operands", opdef.operands, len(op.operands)),
                                 ("results", opdef.results, len(op.results))):
            if want is not None and got != want:
                _fail(fn, op, f"has {got} {what}, expects {want}")
        msg = opdef.verify(op) if opdef.verify is not None else None
        if msg:
            _fail(fn, op, msg)
        if opdef.result is not None:
            want = list(opdef.result([v.type for v in op.operands], op.attrs))
            if [r.type for r in op.results] != want:
                _fail(fn, op, f"result types {[str(r.type) for r in op.results]} are not the "
                              f"op's rule's {[str(t) for t in want]}")
        if op.name in (Op.CF_BREAK, Op.CF_CONTINUE) and loop_depth == 0:
            _fail(fn, op, "outside a loop")
        if op.name == Op.SCF_CONDITION and op is not region.ops[-1]:
            _fail(fn, op, "must end its region")
        inner_depth = 0 if op.name == Op.SCF_INLINE else loop_depth
        for i, sub in enumerate(op.regions):
            body_of_loop = op.name == Op.SCF_FOR or (op.name == Op.SCF_WHILE and i == 1)
            _region(fn, sub, scope, inner_depth + (1 if body_of_loop else 0))
        scope |= {id(r) for r in op.results}
