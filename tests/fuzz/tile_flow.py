"""Control flow in the tile tree: scalar conditions, ``round``, ``ft.full`` of a scalar,
``while``, ``break``/``continue``/``return`` and ``@fl.func`` helpers with early returns. Like
``tile_tree``'s nodes, each renders itself as kernel source and evaluates one tile block.

A scalar here is what a reduction with no axis gives (or a scalar parameter, a loop counter): a
0-d ``TV`` that follows the scalar rules (``rules``). A decision on a scalar that an error bound
could flip, or on an unchecked one, leaves all of the block's outputs unchecked
(``Block.decide``); a ``return`` leaves the outputs the block had not stored unwritten, so their
poison is checked.
"""
from __future__ import annotations

import numpy as np

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules, vector
from tests.fuzz.rules import Invalid
from tests.fuzz.stmts import BreakSignal, ContinueSignal, ReturnSignal, Stmt, _block
from tests.fuzz.tile_tree import TExpr, _spread
from tests.fuzz.tree import fl_name
from tests.fuzz.vector import TV


def _condition(e) -> None:
    if e.shape is not None or e.t is not dtypes.bool_:
        raise Invalid("a condition must be a bool scalar")


class TBoolOp(TExpr):
    """``a and b`` / ``a or b`` of scalar conditions (short-circuit)."""

    t = dtypes.bool_

    def __init__(self, op: str, values: list):
        for v in values:
            _condition(v)
        self.op, self.args = op, tuple(values)

    def size(self):
        return 1 + sum(a.size() for a in self.args)

    def render(self):
        return "(" + f" {self.op} ".join(v.render() for v in self.args) + ")"

    def ev(self, blk):
        bad, cur = False, False
        for e in self.args:
            v = e.ev(blk)
            bad, cur = bad or bool(np.any(v.bad)), bool(v.v)
            if cur if self.op == "or" else not cur:
                break
        return TV(np.asarray(cur), None, np.asarray(bad))


class TNot(TExpr):
    t = dtypes.bool_

    def __init__(self, a):
        _condition(a)
        self.args = (a,)

    def size(self):
        return 1 + self.args[0].size()

    def render(self):
        return f"(not {self.args[0].render()})"

    def ev(self, blk):
        v = self.args[0].ev(blk)
        return TV(np.logical_not(v.v), None, v.bad)


class TRound(TExpr):
    """``round(s)`` of a scalar: Python's round to the nearest integer (ties to even) as an i64,
    ``np.rint`` in the float's own dtype and then ``int()``'s saturating conversion."""

    t = dtypes.i64

    def __init__(self, a):
        if a.shape is not None or rules.is_weak(a.t):
            raise Invalid("round() of a tile or a literal")
        self.args = (a,)

    def size(self):
        return 1 + self.args[0].size()

    def conversions(self):
        return [(self.args[0], dtypes.i64)]

    def render(self):
        return f"round({self.args[0].render()})"

    def ev(self, blk):
        a = self.args[0]
        v = a.ev(blk)
        if a.t.is_float:
            v = vector.math_call("rint", a.t, [v], blk.profile)
        return vector.convert(v, a.t, dtypes.i64, blk.relaxed)


class TFullOf(TExpr):
    """``ft.full(shape, s, dtype)`` of a scalar ``s`` (converted as a cast converts)."""

    def __init__(self, shape: tuple, a, d: DType):
        if a.shape is not None or rules.is_weak(a.t):
            raise Invalid("ft.full of a tile or a literal")
        self.shape, self.args, self.t = shape, (a,), d

    def size(self):
        return 1 + self.args[0].size()

    def conversions(self):
        return [(self.args[0], self.t)]

    def render(self):
        return f"ft.full({self.shape}, {self.args[0].render()}, {fl_name(self.t)})"

    def ev(self, blk):
        a = self.args[0]
        return _spread(vector.convert(a.ev(blk), a.t, self.t, blk.relaxed), self.shape)


class TWhile(Stmt):
    """``while <scalar condition>:`` (bounded by a counter the generator adds)."""

    LIMIT = 64

    def __init__(self, cond, body: list):
        self.cond, self.body = cond, body

    def exprs(self):
        return [self.cond]

    def blocks(self):
        return [self.body]

    def render(self, pad):
        return [f"{pad}while {self.cond.render()}:"] + _block(self.body, pad)

    def ev(self, blk):
        for _ in range(self.LIMIT):
            if not blk.decide(self.cond.ev(blk)):
                return
            try:
                for s in self.body:
                    s.ev(blk)
            except ContinueSignal:
                continue
            except BreakSignal:
                return
        raise AssertionError("generator bug: a while loop ran too long")


class TJump(Stmt):
    """``break``, ``continue``, ``return`` (the kernel's) or ``return e`` (a helper's)."""

    def __init__(self, kind: str, e=None):
        self.kind, self.e = kind, e

    def exprs(self):
        return [self.e] if self.e is not None else []

    def render(self, pad):
        return [f"{pad}{self.kind}" + (f" {self.e.render()}" if self.e is not None else "")]

    def ev(self, blk):
        if self.kind == "break":
            raise BreakSignal
        if self.kind == "continue":
            raise ContinueSignal
        raise ReturnSignal(self.e.ev(blk) if self.e is not None else None)


class TFunc:
    """A generated ``@fl.func`` helper over tiles and scalars; every return gives the type and
    shape of the first parameter (``ret_t``, ``shape``), so no return converts."""

    def __init__(self, name: str, params: list):
        self.name, self.params = name, params  # (name, dtype, shape or None)
        self.ret_t, self.shape = params[0][1], params[0][2]
        self.body: list = []
        self.simple = True  # the frontend's "one trailing return"; returns never convert here

    def render(self) -> list[str]:
        return ["@fl.func", f"def {self.name}({', '.join(p for p, _, _ in self.params)}):"] + \
            _block(self.body, "")

    def call(self, blk, args: list) -> TV:
        outer = blk.vars
        blk.vars = {p: v for (p, _, _), v in zip(self.params, args)}
        try:
            for s in self.body:
                s.ev(blk)
        except ReturnSignal as ret:
            return ret.val
        finally:
            blk.vars = outer
        raise AssertionError("generator bug: a helper ended without a return")


class TCall(TExpr):
    def __init__(self, func: TFunc, args: list):
        for (_, d, shape), a in zip(func.params, args):
            if a.t is not d or a.shape != shape:
                raise Invalid("an argument of another type")
        self.func, self.args, self.t, self.shape = func, tuple(args), func.ret_t, func.shape

    def size(self):
        return 1 + sum(a.size() for a in self.args)

    def render(self):
        return f"{self.func.name}({', '.join(a.render() for a in self.args)})"

    def ev(self, blk):
        return self.func.call(blk, [a.ev(blk) for a in self.args])
