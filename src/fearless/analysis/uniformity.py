"""Uniformity: the values of a kernel that may differ between the threads of one block, or
between the lanes of one warp (a fixpoint over local variables).

Varying: thread indices, lanes, values read from writable memory, atomics' results, and
variables assigned under a condition that varies. Uniform: constants, scalar parameters, array
extents, ``block_index``, ``block_dim``, ``grid_dim``, reads of read-only arrays at uniform
indices, and arithmetic on uniform values. At the "warp" level, ``fl.warp.index()``, the
in-block slot ``index_in_block()`` divided by (or shifted right past) a multiple of 32, and the
results of votes and reductions (equal in every lane of the mask) are uniform too.

``analyse`` gives each sync point of the level (barriers; warp ops) with the condition that may
keep some of the threads that should meet there away; ``varying`` the ids themselves.
"""
from __future__ import annotations

from fearless.frontend.spans import Span
from fearless.ir.core import Function, Operation, Region
from fearless.ir.opdef import Op, warp_collectives
from fearless.ir.types import Access

_COLLECTIVE = warp_collectives()

_VARYING_SPECIAL = {"block": {"thread_in_block", "lane", "warp_index"},
                    "warp": {"thread_in_block", "lane"}}


class _Uniformity:
    def __init__(self, producers: dict, level: str = "block"):
        self.div: set[int] = set()       # ids of values and slots that may differ by thread
        self.changed = False
        self.producers = producers
        self.level = level               # "block": differ within a block; "warp": within a warp
        self.barriers: list[tuple[Operation, Span | None]] = []  # the sync points of the level

    def mark(self, v) -> None:
        if id(v) not in self.div:
            self.div.add(id(v))
            self.changed = True

    def why(self, value, fallback: Operation) -> Span | None:
        op = self.producers.get(id(value))
        return (op.span if op is not None and op.span is not None else fallback.span)

    def region(self, region: Region, ctrl) -> dict:
        """Walk ``region`` under control ``ctrl`` (None: uniform, else the Span of the reason);
        return the divergent exits leaving it: {"loop" | "inline": reason}."""
        escapes: dict = {}
        for op in region.ops:
            for kind, reason in self.op(op, ctrl).items():
                escapes.setdefault(kind, reason)
                ctrl = ctrl or reason  # threads that left: the rest runs for some threads only
        return escapes

    def op(self, op: Operation, ctrl) -> dict:
        name = op.name
        if name == Op.SCF_IF:
            cond = op.operands[0]
            inner = ctrl or (self.why(cond, op) if id(cond) in self.div else None)
            escapes = {}
            for r in op.regions:
                for k, v in self.region(r, inner).items():
                    escapes.setdefault(k, v)
            return escapes
        if name == Op.SCF_FOR:
            varying = any(id(v) in self.div for v in op.operands)
            inner = ctrl or (self.why(next(v for v in op.operands if id(v) in self.div), op)
                             if varying else None)
            if inner:
                self.mark(op.regions[0].args[0])
            escapes = self.region(op.regions[0], inner)
            if "loop" in escapes and not inner:  # some threads stop early: iterations differ
                self.mark(op.regions[0].args[0])
                escapes = self.region(op.regions[0], escapes["loop"])
            return {"inline": escapes["inline"]} if "inline" in escapes else {}
        if name == Op.SCF_WHILE:
            cond_region, body = op.regions
            flag = cond_region.ops[-1].operands[0]
            esc = self.region(cond_region, ctrl)
            inner = ctrl or (self.why(flag, op) if id(flag) in self.div else None)
            esc2 = self.region(body, inner)
            if "loop" in esc2 and not inner:
                inner = esc2["loop"]
            if inner and inner is not ctrl:
                esc = self.region(cond_region, inner)
                esc2 = self.region(body, inner)
            out = {**esc, **esc2}
            return {"inline": out["inline"]} if "inline" in out else {}
        if name == Op.SCF_INLINE:
            self.region(op.regions[0], ctrl)
            return {}
        if name in (Op.CF_BREAK, Op.CF_CONTINUE):
            return {"loop": ctrl} if ctrl else {}
        if name == Op.CF_RETURN:
            return {"inline": ctrl} if ctrl else {}
        sync = name == Op.SIMT_BARRIER if self.level == "block" else name in _COLLECTIVE
        if sync:
            self.barriers.append((op, ctrl))
        if name == Op.SIMT_BARRIER:
            return {}
        if name == Op.LOCAL_STORE:
            if ctrl or id(op.operands[1]) in self.div:
                self.mark(op.operands[0])
            return {}
        varying = any(id(v) in self.div for v in op.operands)
        if name in (Op.SIMT_THREAD_INDEX, Op.MEM_ATOMIC) or name in _COLLECTIVE:
            varying = not (self.level == "warp" and name in (Op.WARP_VOTE, Op.WARP_REDUCE))
        elif name == Op.SIMT_SPECIAL:
            varying = op.attrs["reg"] in _VARYING_SPECIAL[self.level]
        elif name == Op.MEM_LOAD:
            varying = varying or op.operands[0].type.access is not Access.READ
        elif self.level == "warp" and name in (Op.FLOORDIV, Op.SHR):
            varying = varying and not self.whole_warps(op)
        for r in op.results:
            if varying:
                self.mark(r)
        return {}


    def whole_warps(self, op: Operation) -> bool:
        """``slot // 32k`` or ``slot >> (5 + k)`` of the in-block slot: equal within a warp."""
        src = self.producers.get(id(op.operands[0]))
        if src is not None and src.name == Op.SIMT_INDEX_VALUE:
            src = self.producers.get(id(src.operands[0]))
        k = self.producers.get(id(op.operands[1]))
        if src is None or k is None or k.name != Op.CONSTANT:
            return False
        slot = src.name == Op.SIMT_THREAD_INDEX and src.attrs.get("block") and \
            src.attrs["space"] == 1
        c = k.attrs["value"]
        return bool(slot) and (c > 0 and c % 32 == 0 if op.name == Op.FLOORDIV
                               else 5 <= c < 64)


def _settle(fn: Function, level: str) -> _Uniformity:
    producers = {id(r): op for op in fn.walk() for r in op.results}
    u = _Uniformity(producers, level)
    while True:
        u.changed, u.barriers = False, []
        u.region(fn.body, None)
        if not u.changed:
            return u


def analyse(fn: Function, level: str) -> list[tuple[Operation, Span | None]]:
    """The sync points of ``level`` (barriers for "block", warp ops for "warp"), each with the
    span of a condition that may differ between the threads that should meet there, or None."""
    return _settle(fn, level).barriers


def varying(fn: Function, level: str = "block") -> frozenset[int]:
    """Ids of the values and local slots of ``fn`` that may differ between the threads of one
    block (``level`` "block") or warp ("warp"); a local slot not named is assigned the same
    values, under the same conditions, in every thread."""
    return frozenset(_settle(fn, level).div)
