"""The op registry: every IR op is defined once here, by an OpDef, and read by all backends.

An OpDef names the op, says how many regions it has, whether it ends control flow
(``terminator``), whether it has side effects, and carries a verifier that checks operand and
result types. Backends keep one rule per op name in their own ``RULES`` table; a test checks
that every backend covers every op in ``REGISTRY``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fearless.ir.core import Operation

Verifier = Callable[[Operation], "str | None"]


@dataclass(frozen=True)
class OpDef:
    name: str
    doc: str
    verify: Verifier
    regions: int = 0
    terminator: bool = False
    side_effects: bool = False


REGISTRY: dict[str, OpDef] = {}


def define(name: str, doc: str, verify: Verifier, **traits) -> OpDef:
    if name in REGISTRY:
        raise ValueError(f"op {name!r} defined twice")
    opdef = REGISTRY[name] = OpDef(name, doc, verify, **traits)
    return opdef


# Verifier building blocks -------------------------------------------------------------------

def counts(n_operands: int, n_results: int) -> Verifier:
    def check(op: Operation):
        if len(op.operands) != n_operands or len(op.results) != n_results:
            return (f"expects {n_operands} operands and {n_results} results, "
                    f"got {len(op.operands)} and {len(op.results)}")
        return None
    return check


def all_of(*checks: Verifier) -> Verifier:
    def check(op: Operation):
        for c in checks:
            msg = c(op)
            if msg:
                return msg
        return None
    return check


# The op modules register themselves on import; this list is the complete set.
from fearless.ir.ops import arith, control, math, memory, mma, simt, tile, warp  # noqa: E402,F401
