"""Control flow added to a generated tile kernel (``tile_program``) after its own draws: ``if``,
``while`` and ``for`` on scalars, ``break``/``continue``, early ``return`` (in the kernel, and in
``@fl.func`` helpers), stores under conditions, reductions with no axis used in arithmetic and
as conditions, and the newer math (``np.rint``, ``math.lgamma``, ``round`` of a scalar).

``add`` inserts statements between those of a finished kernel body; they read the variables
defined before them and write only those (keeping their type and shape: a tile variable has one
type) or new ones, so the kernel's own statements stay valid. Its draws follow all of the
kernel's own, so a seed's kernel is the earlier fuzzer's kernel with statements added (and some
math functions swapped: ``newer_math``). While loops count with a literal limit (as the SIMT
generator's), so every loop is bounded.
"""
from __future__ import annotations

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import classify, rules
from tests.fuzz.gen_simt import ARITH, BITS, PREDS
from tests.fuzz.rules import Invalid
from tests.fuzz.stmts import walk
from tests.fuzz.tile_flow import TBoolOp, TCall, TFullOf, TFunc, TJump, TNot, TRound, TWhile
from tests.fuzz.tile_tree import (NEWER_MATH, TILE_MATH, TAssign, TBin, TCmp, TFor, TIf, TLit,
                                  TLoad, TMath, TName, TReduce, TShape, TStore, TVar, broadcast)

INSERTS = (0, 1, 2, 2, 3, 4)  # statements added to a kernel
NEWER_MATH_SHARE = 0.15       # of the kernel's own one-argument math calls become rint/lgamma
SCALAR_MATH = ("exp", "sqrt", "log", "tanh", "sin", "floor", "fabs", "rint", "lgamma")
REDUCTIONS = ("sum", "sum", "max", "min", "argmax")
MAX_HELPERS = 2


def newer_math(g, body: list) -> None:
    """Swap some one-argument math calls of ``body`` for ``np.rint`` or ``math.lgamma`` (a
    float tile in, the same type out; an integer tile computes in f32 either way)."""
    for node in walk(body):
        if isinstance(node, TMath) and node.fn in TILE_MATH and len(node.args) == 1:
            if g.rng.random() < NEWER_MATH_SHARE:
                node.fn = g.rng.choice(sorted(NEWER_MATH))
                node.spelling = NEWER_MATH[node.fn]


def add(g, body: list, outputs: list) -> list:
    """``body`` with 0-4 control statements inserted after its loads (``g.control`` on)."""
    g.control = True
    n = g.rng.choice(INSERTS)
    first = next(k for k, s in enumerate(body)
                 if not (isinstance(s, TAssign) and isinstance(s.e, TLoad)))
    where = sorted(g.rng.randint(first, len(body)) for _ in range(n))
    flow = Flow(g, outputs)
    visible = [TVar(name, d, None) for name, d in g.scalars]
    out: list = []
    for p in range(len(body) + 1):
        for _ in range(where.count(p)):
            g.vars = visible
            out += flow.statement(0)
        if p < len(body):
            s = body[p]
            out.append(s)
            if isinstance(s, TAssign) and all(v.name != s.name for v in visible):
                visible.append(TVar(s.name, s.e.t, s.e.shape))
    return out


def scalar_in_tile(g, pre: list, depth: int, kind: str):
    """A scalar reduction inside a tile expression (``t - ft.max(t)``), or ``ft.full`` of a
    scalar (``TileGen._expr`` with ``control`` on)."""
    flow = Flow(g, [])
    if kind == "full":
        d = g.dtype()
        return TFullOf(g.rng.choice(g.shapes()), flow.scalar(pre, depth), d)
    a = g.tile_expr(pre, depth)
    keep = g.chance(0.15)  # extents of 1: a (1, 1) tile
    return TReduce(g.rng.choice(REDUCTIONS[:4]), a, None, keep, method=g.chance(0.3))


class Flow:
    """Draws control statements with ``g`` (a ``tile_program.TileGen``): its random stream, its
    expressions and its visible variables (``g.vars``, a scope that blocks extend and trim)."""

    def __init__(self, g, outputs: list):
        self.g, self.rng, self.outputs = g, g.rng, outputs
        self.loops = 0
        self.counters: list = []  # the enclosing loops' counters (i64 scalars)

    # statements -------------------------------------------------------------------------------

    def statement(self, depth: int) -> list:
        g = self.g
        kinds = ["scalar", "scalar", "update", "update", "if", "if"]
        if not g.in_helper:
            kinds += ["return", "store"]
            if depth == 0 and len(g.helpers) < MAX_HELPERS:
                kinds += ["call"]
        if depth < 2:
            kinds += ["while", "while", "for", "for"]
        if self.loops:
            kinds += ["break", "continue"]
        for _ in range(10):
            mark = len(g.vars)
            pre: list = []
            try:
                stmts = getattr(self, "_" + self.rng.choice(kinds))(pre, depth)
                if g.opts.skip_known and classify.known_under(pre + stmts):
                    raise Invalid("a known class's construct")
                return pre + stmts
            except Invalid:
                del g.vars[mark:]
        return []

    def block(self, depth: int, count: int) -> list:
        """Statements of a nested block: its new variables are not visible after it."""
        mark = len(self.g.vars)
        out = [s for _ in range(count) for s in self.statement(depth)]
        del self.g.vars[mark:]
        return out

    def _scalar(self, pre, depth):
        e = self.scalar(pre, 2)
        name = self.g.fresh("s")
        self.g.vars.append(TVar(name, e.t, None))
        return [TAssign(name, e)]

    def _update(self, pre, depth):
        g = self.g
        v = self.rng.choice(self.tiles())
        e = self.exact(pre, g.expr(pre, 2), v.t, v.shape)
        return [TAssign(v.name, e)]

    def _if(self, pre, depth):
        cond = self.cond(pre)
        body = self.block(depth + 1, self.rng.randint(1, 2))
        orelse = self.block(depth + 1, 1) if self.g.chance(0.4) else []
        if not body and not orelse:
            raise Invalid("an empty if")
        return [TIf(cond, body, orelse)]

    def _while(self, pre, depth):
        """``w = 0; while w < L [and c]:`` or ``while c:`` with ``if w >= L: break`` first."""
        g = self.g
        w = g.fresh("w")
        count = TName(w, dtypes.i64)
        limit = TLit(self.rng.randint(0, 4))
        r = self.rng.random()
        step = [TAssign(w, TBin("add", count, TLit(1)))]
        if r < 0.4:
            cond = TCmp("lt", count, limit)
        elif r < 0.75:
            cond = TBoolOp("and", [TCmp("lt", count, limit), self.cond(pre)])
        else:
            cond = TLit(True) if g.chance(0.2) else self.cond(pre)
            step.append(TIf(TCmp("ge", count, limit), [TJump("break")], []))
        g.vars.append(TVar(w, dtypes.i64, None))  # after the condition's hoisted temporaries
        body = step + self.loop_body(depth, count)
        return [TAssign(w, TLit(0)), TWhile(cond, body)]

    def _for(self, pre, depth):
        g = self.g
        j = g.fresh("j")
        g.vars.append(TVar(j, dtypes.i64, None))  # removed below: unset after 0 iterations
        body = self.loop_body(depth, TName(j, dtypes.i64))  # (its block trims its own)
        g.vars.pop()
        return [TFor(j, self.rng.randint(1, 4), body)]

    def loop_body(self, depth: int, counter) -> list:
        self.loops += 1
        self.counters.append(counter)
        try:
            body = self.block(depth + 1, self.rng.randint(1, 3))
        finally:
            self.loops -= 1
            self.counters.pop()
        return body

    def _break(self, pre, depth):
        return [TIf(self.cond(pre), [TJump("break")], [])]

    def _continue(self, pre, depth):
        return [TIf(self.cond(pre), [TJump("continue")], [])]

    def _return(self, pre, depth):
        cond = self.cond(pre)
        stores = self.stored() if self.g.chance(0.5) else []
        return [TIf(cond, stores + [TJump("return")], [])]

    def _store(self, pre, depth):
        if self.g.chance(0.6):
            cond = self.cond(pre)
            return [TIf(cond, self.stored(), [])]
        return self.stored(pre)

    def stored(self, pre: list | None = None) -> list:
        """``o.store(e)`` of a random output, after ``e``'s hoisted temporaries (which only
        ``pre``, the enclosing block's, makes visible after it)."""
        g = self.g
        o = self.rng.choice(self.outputs)
        mark, inner = len(g.vars), []
        e = g.coerce(inner, g.tile_expr(inner, 2), o.dtype, implicit=True)
        if pre is None:
            del g.vars[mark:]
        else:
            pre += inner
            inner = []
        return inner + [TStore(o.name, o.dtype, g.tile, e)]

    def _call(self, pre, depth):
        """``v = h(v, x)`` (or into a new variable) of a new helper with early returns."""
        g = self.g
        first = self.rng.choice(self.tiles())
        args = [first]
        if g.chance(0.6):
            args.append(self.rng.choice([v for v in g.vars if not rules.is_weak(v.t)]))
        f = self.helper([(g.fresh("p"), v.t, v.shape) for v in args])
        call = TCall(f, [TName(v.name, v.t, v.shape) for v in args])
        g.helpers.append(f)
        if g.chance(0.5):
            return [TAssign(first.name, call)]
        name = g.fresh("v")
        g.vars.append(TVar(name, f.ret_t, f.shape))
        return [TAssign(name, call)]

    def helper(self, params: list) -> TFunc:
        """``@fl.func def h(p, ...)``: a local copy ``q = p``, a return under a condition and/or
        a loop that returns early or updates ``q``, and a final return (all of p's type)."""
        g = self.g
        f = TFunc(g.fresh("h"), params)
        outer, outer_flow = g.vars, (self.loops, self.counters)
        g.vars, g.in_helper = [TVar(p, d, shape) for p, d, shape in params], True
        self.loops, self.counters = 0, []
        try:
            q = g.fresh("q")
            body = [TAssign(q, TName(params[0][0], f.ret_t, f.shape))]
            g.vars.append(TVar(q, f.ret_t, f.shape))
            shape = self.rng.choice(("if", "loop", "both"))
            if shape in ("if", "both"):
                body += self.early_return(f)
            if shape in ("loop", "both"):
                j, mark = g.fresh("j"), len(g.vars)
                g.vars.append(TVar(j, dtypes.i64, None))
                self.loops, self.counters = 1, [TName(j, dtypes.i64)]
                inner = self.early_return(f)
                pre: list = []
                step = self.exact(pre, g.expr(pre, 2), f.ret_t, f.shape)
                inner += pre + [TAssign(q, step)]
                if g.chance(0.3):
                    before: list = []
                    stop = self._break(before, 1)
                    inner += before + stop
                del g.vars[mark:]  # j and the loop's temporaries
                self.loops, self.counters = 0, []
                body.append(TFor(j, self.rng.randint(1, 3), inner))
            pre = []
            tail = self.exact(pre, g.expr(pre, 2), f.ret_t, f.shape)
            f.body = body + pre + [TJump("return", tail)]
        finally:
            g.vars, g.in_helper = outer, False
            self.loops, self.counters = outer_flow
        return f

    def early_return(self, f: TFunc) -> list:
        pre: list = []
        cond = self.cond(pre)
        mark, inner = len(self.g.vars), []
        e = self.exact(inner, self.g.expr(inner, 2), f.ret_t, f.shape)
        del self.g.vars[mark:]  # the branch's temporaries
        return pre + [TIf(cond, inner + [TJump("return", e)], [])]

    # expressions ------------------------------------------------------------------------------

    def tiles(self) -> list:
        tiles = [v for v in self.g.vars if v.shape is not None and not rules.is_weak(v.t)]
        if not tiles:
            raise Invalid("no tile variable")
        return tiles

    def exact(self, pre: list, e, d: DType, shape: tuple):
        """``e`` as a value of exactly dtype ``d`` and shape ``shape`` (a variable's)."""
        if e.shape is None:
            if rules.is_weak(e.t):
                raise Invalid("a literal where a tile is needed")
            e = TFullOf(shape, e, d)
        if e.t is not d:
            e = self.g.astype(pre, e, d)
        if e.shape != shape:
            if broadcast(e.shape, shape) != shape:
                raise Invalid("does not broadcast to the variable's shape")
            e = TShape("broadcast", e, shape)
        return e

    def reduction(self, pre: list, depth: int):
        g = self.g
        a = g.tile_expr(pre, depth)
        kind = self.rng.choice(REDUCTIONS)
        axis = 0 if len(a.shape) == 1 and g.chance(0.3) else None
        if kind == "argmax" and axis is not None:
            axis = None
        return TReduce(kind, a, axis, False, method=g.chance(0.3))

    def scalar(self, pre: list, depth: int):
        """A scalar that is not a compile-time constant: a reduction, a scalar variable, or
        arithmetic, ``round`` or math of those."""
        g = self.g
        for _ in range(10):
            try:
                r = self.rng.random()
                named = [v for v in g.vars if v.shape is None and not rules.is_weak(v.t)]
                if depth <= 0 or r < 0.4:
                    e = self.reduction(pre, max(depth, 1))
                elif r < 0.55 and named:
                    v = self.rng.choice(named)
                    e = TName(v.name, v.t)
                elif r < 0.75:
                    a = self.scalar(pre, depth - 1)
                    b = self.scalar(pre, depth - 1) if g.chance(0.5) else g.literal()
                    op = self.rng.choice(ARITH + (BITS if not a.t.is_float else ()))
                    e = g.binop(op, *((a, b) if g.chance(0.7) else (b, a)))
                elif r < 0.85:
                    e = TRound(self.scalar(pre, depth - 1))
                else:
                    fn = self.rng.choice(SCALAR_MATH)
                    e = TMath(fn, [self.scalar(pre, depth - 1)],
                              NEWER_MATH.get(fn, f"math.{fn}"), scalar=True)
                if e.shape is None and not rules.is_weak(e.t):
                    return e
            except Invalid:
                continue
        return self.reduction(pre, 1)

    def cond(self, pre: list):
        """A bool scalar: a comparison of scalars, "any"/"all" of a tile comparison
        (``ft.max(t > 0)``), a test of a loop counter, and ``and``/``or``/``not`` of those."""
        g = self.g
        for _ in range(10):
            try:
                r = self.rng.random()
                if r < 0.45:
                    a = self.scalar(pre, 1)
                    b = self.scalar(pre, 1) if g.chance(0.3) else g.literal(
                        a.t if g.chance(0.5) else None)
                    e = TCmp(self.rng.choice(PREDS), a, b)
                elif r < 0.65:
                    mask = TCmp(self.rng.choice(PREDS), g.tile_expr(pre, 1), g.expr(pre, 1))
                    e = TReduce(self.rng.choice(("max", "min")), mask, None, False,
                                method=g.chance(0.3))
                elif r < 0.8 and self.counters:
                    k = self.rng.choice(self.counters)
                    e = TCmp(self.rng.choice(PREDS), k, TLit(self.rng.randint(0, 3))) \
                        if g.chance(0.6) else TCmp("eq", TBin("mod", k, TLit(2)), TLit(0))
                elif r < 0.92:
                    e = TBoolOp(self.rng.choice(("and", "or")), [self.cond(pre), self.cond(pre)])
                else:
                    e = TNot(self.cond(pre))
                if e.shape is None and e.t is dtypes.bool_ and not e.const:
                    return e
            except Invalid:
                continue
        return TCmp("gt", self.reduction(pre, 1), TLit(0))
