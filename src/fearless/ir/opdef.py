"""The op registry: every IR op is defined once here, by an OpDef, and read by all backends.

An OpDef names the op, says how many operands, results and regions it has, whether it ends
control flow (``terminator``), whether it has side effects, which kernels use it (``track``),
whether it is a read the bounds pass checks (``checked_read``), the functions users call for it
(``user_names``), the rule that gives its result types (``result``: ``Builder.create`` applies
it, the verifier checks it), a verifier that checks operand types and attributes, and, for the
scalar ops, the reference semantics ``eval`` (see ``Eval``): the CPU backend runs it on arrays,
the frontend folds literals and ``analysis/owners.py`` enumerates indices with it. Backends
keep one rule per op name in their own ``RULES`` table and derive the ops they refuse from
``track`` (``only``); a test checks that every backend covers every op in ``REGISTRY``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fearless.ir.core import Operation

Verifier = Callable[[Operation], "str | None"]
# the result types of an op from its operand types and attributes
ResultRule = Callable[[list, dict], list]
# What an op computes, ``eval(dtype, attrs, *operands)``: the definition docs/semantics.md states
# and every backend is held to. ``dtype`` is the result's DType and the operands are NumPy arrays
# or scalars of the operand types (the CPU backend's lanes and tiles, any shape, 0-d too): integers
# wrap around, ``//`` and ``%`` floor, a zero divisor gives 0. With ``dtype`` None the operands are
# Python numbers (bool, int of any size, float as f64): the frontend's weak literals and the proofs'
# exact indices; integers do not wrap, and where Python has no number (``1 // 0``, ``1 << -1``) it
# raises ZeroDivisionError or ValueError and the caller leaves the value to run time.
Eval = Callable[..., Any]


@dataclass(frozen=True)
class OpDef:
    name: str
    doc: str
    verify: Verifier | None     # the checks of operand types and attributes (None: no more)
    regions: int = 0
    operands: int | None = None  # how many operands and results (None: it varies, as for the
    results: int | None = None   # control ops and the printing and shuffling ones)
    terminator: bool = False
    side_effects: bool = False
    track: str = "both"         # "simt", "tile" or "both": the kernels whose IR may hold it
    checked_read: bool = False  # a read of user memory that passes/bounds.py may check
    # the functions users call for it, as "module.name" ("math.sin", "np.sin"): the frontend
    # maps those that exist to the op
    user_names: tuple[str, ...] = ()
    # the result types from the operand types and attributes; None where the creator chooses
    # them (a constant's or cast's type, a local slot, a shared array, a broadcast's shape)
    result: ResultRule | None = None
    eval: Eval | None = None    # the reference semantics (above); None for ops with effects,
    #                             regions or memory, which each backend's interpreter defines


REGISTRY: dict[str, OpDef] = {}
TRACKS = ("simt", "tile", "both")


def no_results(types, attrs) -> list:
    """The result rule of an op without results."""
    return []


def like_first(types, attrs) -> list:
    """The result rule of an op whose one result has its first operand's type."""
    return [types[0]]


def only(track: str) -> list[str]:
    """The names of the ops that only ``track``'s kernels use ("simt" or "tile")."""
    return [name for name, d in REGISTRY.items() if d.track == track]


def checked_reads() -> frozenset[str]:
    """The names of the reads of user memory that the bounds pass checks."""
    return frozenset(name for name, d in REGISTRY.items() if d.checked_read)


def define(name: str, doc: str, verify: Verifier | None, **traits) -> OpDef:
    if name in REGISTRY:
        raise ValueError(f"op {name!r} defined twice")
    if traits.get("track", "both") not in TRACKS:
        raise ValueError(f"op {name!r}: track must be one of {TRACKS}")
    opdef = REGISTRY[name] = OpDef(name, doc, verify, **traits)
    return opdef


# Verifier building blocks -------------------------------------------------------------------

def all_of(*checks: Verifier) -> Verifier:
    def check(op: Operation):
        for c in checks:
            msg = c(op)
            if msg:
                return msg
        return None
    return check


# The op modules register themselves on import; this list is the complete set.
from fearless.ir.ops import (arith, control, math, memory, mma, simt, tile,  # noqa: E402,F401
                             tile_memory, warp)
