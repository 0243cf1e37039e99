"""Integer ranges of tile-kernel values, relative to the tile block's own coordinates.

The own-tile pass (``passes/own_tile.py``) must prove that every element a scatter (or a gather
of an Out) reaches lies inside the block's own tile: along axis k, coordinates in
``[b_k * t_k, b_k * t_k + t_k)`` where ``b_k`` is the block's coordinate (``tile.block_index``)
and ``t_k`` the tile extent. So a value's ``Form`` is a sum of block coordinates times
constants (``terms``) plus an integer in ``[lo, hi]``, the same bound for every element of a
tile: ``out.tile_index[0] * 64 + ft.arange(64)`` is ``b_0 * 64 + [0, 63]``.

The forms come from the ops: constants, ``ft.arange`` (``tile.iota``), block coordinates,
``+``, ``-``, multiplication by a constant, ``//`` and ``%`` by a positive constant (``x % 64``
is in ``[0, 63]`` whatever ``x`` is), ``&`` with a non-negative constant, ``min``/``max``
(clamps), ``where`` of two forms with the same terms, casts, shape ops (broadcast, reshape,
permute, splat), max/min reductions, loop counters of ``range`` loops, and variables: a slot
reads the join of every value stored to it anywhere (a variable that feeds its own updates,
``i = i + 1`` in a loop, is unknown), and of its initial 0 unless the read is definitely after
a store (one earlier in its own region or an enclosing one, or in both branches of an earlier
``if``). Anything else is unknown (``TOP``).

Soundness: forms are exact integers; an op whose result may not fit its dtype (so that the
machine value may have wrapped) gives the dtype's whole range, without terms, which is also the
form of any integer the rules do not know (a load's, for instance). Block coordinates are below
2**31 (the tile grid).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fearless import dtypes
from fearless.dtypes import int_range
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.types import Scalar, Tile

BLOCK_MAX = (1 << 31) - 1  # a tile block coordinate is below the grid's 2**31


@dataclass(frozen=True)
class Form:
    """``sum(coef * block_index(axis) for axis, coef in terms) + r`` with ``lo <= r <= hi``
    (``lo``/``hi`` may be -inf/inf)."""

    terms: tuple[tuple[int, int], ...] = ()
    lo: float = -math.inf
    hi: float = math.inf

    def describe(self, names=None) -> str:
        """The form as source-like text; ``names`` maps an axis to its coordinate's text."""
        parts = [f"{(names or {}).get(a, f'tile_index[{a}]')} * {c}" if c != 1 else
                 (names or {}).get(a, f"tile_index[{a}]") for a, c in self.terms]
        whole = next((f"any {d.name} value" for d in _WHOLE
                      if (self.lo, self.hi) == int_range(d)), None)
        if whole is None:
            lo = "-inf" if self.lo == -math.inf else int(self.lo)
            hi = "inf" if self.hi == math.inf else int(self.hi)
            whole = f"a value in [{lo}, {hi}]"
        return " + ".join(parts + [whole])


TOP = Form()
_WHOLE = (dtypes.i8, dtypes.u8, dtypes.i16, dtypes.u16, dtypes.i32, dtypes.u32, dtypes.i64,
          dtypes.u64)  # the ranges a description names by their dtype


def _const(n: int) -> Form:
    return Form((), n, n)


def _add(a: Form, b: Form, sign: int = 1) -> Form:
    terms = dict(a.terms)
    for axis, c in b.terms:
        terms[axis] = terms.get(axis, 0) + sign * c
    lo, hi = (a.lo + b.lo, a.hi + b.hi) if sign > 0 else (a.lo - b.hi, a.hi - b.lo)
    return Form(tuple(sorted((k, c) for k, c in terms.items() if c)), lo, hi)


def _scale(a: Form, k: int) -> Form:
    if k == 0:
        return _const(0)
    lo, hi = a.lo * k, a.hi * k
    return Form(tuple((ax, c * k) for ax, c in a.terms), min(lo, hi), max(lo, hi))


def _mul(a: Form, b: Form) -> Form:
    for x, y in ((a, b), (b, a)):
        if not x.terms and x.lo == x.hi:
            return _scale(y, int(x.lo))
    if a.terms or b.terms:
        return TOP
    corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi) if not (
        math.isinf(x) and y == 0 or math.isinf(y) and x == 0)]
    return Form((), min(corners, default=0), max(corners, default=0))


def _divisor(b: Form) -> int | None:
    return int(b.lo) if not b.terms and b.lo == b.hi and b.lo > 0 else None


def _floordiv(a: Form, b: Form) -> Form:
    k = _divisor(b)
    if k is None or any(c % k for _, c in a.terms):
        return TOP
    return Form(tuple((ax, c // k) for ax, c in a.terms), a.lo // k if a.lo > -math.inf
                else a.lo, a.hi // k if a.hi < math.inf else a.hi)


def _mod(a: Form, b: Form) -> Form:
    k = _divisor(b)
    if k is None:
        return TOP
    if not any(c % k for _, c in a.terms) and 0 <= a.lo and a.hi < k:
        return Form((), a.lo, a.hi)  # the terms are multiples of k: only r is left
    return Form((), 0, k - 1)  # floor modulo by k > 0 (the op's semantics)


def _and(a: Form, b: Form) -> Form:
    for x, y in ((a, b), (b, a)):
        if not x.terms and x.lo == x.hi and x.lo >= 0:
            top = int(x.lo) if y.terms or y.lo < 0 else min(int(x.lo), y.hi)
            return Form((), 0, top)
    return TOP


def _extreme(a: Form, b: Form, take_max: bool) -> Form:
    """``max(a, b)`` (``take_max``) or ``min(a, b)``."""
    pick = max if take_max else min
    if a.terms == b.terms:
        return Form(a.terms, pick(a.lo, b.lo), pick(a.hi, b.hi))
    # max(a, b) >= each operand (min: <=): keep one operand's terms and that side's bound,
    # preferring the operand that has a bound there
    bounded = [x for x in (b, a) if (x.lo if take_max else x.hi) not in (-math.inf, math.inf)]
    x = next((y for y in bounded if y.terms), bounded[0] if bounded else None)
    if x is None:
        return TOP
    return Form(x.terms, x.lo, math.inf) if take_max else Form(x.terms, -math.inf, x.hi)


def join(forms) -> Form:
    forms = list(forms)
    if not forms or any(f.terms != forms[0].terms for f in forms):
        return TOP
    return Form(forms[0].terms, min(f.lo for f in forms), max(f.hi for f in forms))


def _fit(form: Form, t) -> Form:
    """``form`` if its every value fits the integer dtype of type ``t``, else that dtype's whole
    range (the machine value may have wrapped)."""
    d = t.dtype
    if not d.is_int:
        return TOP
    lo, hi = int_range(d)
    span_lo = form.lo + sum(min(0, c * BLOCK_MAX) for _, c in form.terms)
    span_hi = form.hi + sum(max(0, c * BLOCK_MAX) for _, c in form.terms)
    if lo <= span_lo and span_hi <= hi:
        return form
    return Form((), lo, hi)


_BINARY = {Op.ADD: _add, Op.SUB: lambda a, b: _add(a, b, -1), Op.MUL: _mul,
           Op.FLOORDIV: _floordiv, Op.MOD: _mod, Op.AND: _and,
           Op.MAX: lambda a, b: _extreme(a, b, True),
           Op.MIN: lambda a, b: _extreme(a, b, False)}
_SAME = (Op.TILE_SPLAT, Op.TILE_BROADCAST, Op.TILE_RESHAPE, Op.TILE_PERMUTE)


class Ranges:
    """The forms of the integer values of ``fn``, computed on demand (``form(value)``)."""

    def __init__(self, fn: Function):
        self.defs: dict[int, object] = {}      # id(value) -> defining op
        self.loops: dict[int, object] = {}     # id(loop counter) -> its scf.for
        self.stores: dict[int, list] = {}      # id(slot) -> values stored to it
        self.where: dict[int, tuple] = {}      # id(op) -> (its region, index there, parent op)
        self._place(fn.body, None)
        for op in fn.walk():
            for r in op.results:
                self.defs[id(r)] = op
            if op.name == Op.SCF_FOR:
                self.loops[id(op.regions[0].args[0])] = op
            elif op.name == Op.LOCAL_STORE:
                self.stores.setdefault(id(op.operands[0]), []).append(op.operands[1])
        self.cache: dict[int, Form] = {}
        self.busy: set[int] = set()

    def _place(self, region, parent) -> None:
        for k, op in enumerate(region.ops):
            self.where[id(op)] = (region, k, parent)
            for sub in op.regions:
                self._place(sub, op)

    def assigned(self, op, slot) -> bool:
        """Whether every path to ``op`` stores to ``slot`` first."""
        while op is not None:
            region, k, parent = self.where[id(op)]
            if any(_stores(earlier, slot) for earlier in region.ops[:k]):
                return True
            op = parent
        return False

    def form(self, value) -> Form:
        key = id(value)
        if key in self.cache:
            return self.cache[key]
        if key in self.busy:  # a value that depends on itself (a loop-carried variable)
            return TOP
        self.busy.add(key)
        try:
            f = self._form(value)
        finally:
            self.busy.discard(key)
        if isinstance(value.type, (Scalar, Tile)):
            f = _fit(f, value.type)  # an unknown integer is still one of its dtype
        self.cache[key] = f
        return f

    def _form(self, value) -> Form:
        loop = self.loops.get(id(value))
        if loop is not None:
            lo, hi, _ = (self.form(v) for v in loop.operands)
            if lo.terms != hi.terms:
                return TOP
            return Form(lo.terms, lo.lo, hi.hi - 1)
        op = self.defs.get(id(value))
        if op is None or not isinstance(value.type, (Scalar, Tile)) or not value.type.dtype.is_int:
            return TOP
        name = op.name
        if name == Op.CONSTANT:
            v = op.attrs.get("value")
            return _const(int(v)) if isinstance(v, (int, bool)) else TOP
        if name == Op.TILE_IOTA:
            return Form((), 0, value.type.shape[0] - 1)
        if name == Op.TILE_BLOCK_INDEX:
            return Form(((op.attrs["axis"], 1),), 0, 0)
        if name in _SAME or name == Op.CAST:
            src = op.operands[0].type
            if name == Op.CAST and not (src.dtype.is_int or src.dtype.is_bool):
                return TOP
            return Form((), 0, 1) if src.dtype.is_bool else self.form(op.operands[0])
        if name in _BINARY:
            return _BINARY[name](*(self.form(v) for v in op.operands))
        if name == Op.NEG:
            return _scale(self.form(op.operands[0]), -1)
        if name == Op.SELECT:
            return join(self.form(v) for v in op.operands[1:])
        if name == Op.TILE_REDUCE and op.attrs.get("kind") in ("max", "min"):
            return self.form(op.operands[0])
        if name == Op.LOCAL_LOAD:
            slot = op.operands[0]
            forms = [self.form(v) for v in self.stores.get(id(slot), ())]
            return join(forms if self.assigned(op, slot) else forms + [_const(0)])
        return TOP


def _stores(op, slot) -> bool:
    """Whether ``op`` stores to ``slot`` on every path through it: a store, or an ``if`` that
    does in both branches."""
    if op.name == Op.LOCAL_STORE:
        return op.operands[0] is slot
    if op.name == Op.SCF_IF:
        return all(any(_stores(o, slot) for o in region.ops) for region in op.regions)
    return False
