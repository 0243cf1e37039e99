"""Random valid SIMT kernels (``@fl.kernel``), as program trees (``tree``), from a seed.

A kernel reads 1-4 input arrays (1-d ``Slice`` or 2-d ``Array``) and 0-2 scalars and writes
1-3 outputs at the thread's own index (a 1-d kernel may loop over its elements with a grid-stride
loop: ``simt_program``). Its body mixes every dtype through arithmetic with weak literals and
promotion, casts, the math module (``np.rint`` and ``math.lgamma`` too, and ``round(x)``:
``newer_math``), ``min``/``max``/``abs``, ``np.where``,
conditional expressions, ``and``/``or``/``not``, ``if``/``elif``/``else``, ``for`` over
``range`` and ``while`` loops with ``break``/``continue``, an early ``return``, guarded
neighbour reads (``x[i + 1] if i + 1 < len(x) else 0``), accumulators whose type is the join of
what they are assigned (``acc = 0`` ... ``acc += x``), annotated variables that narrow
(``v: fl.u8 = ...``) and ``@fl.func`` helpers with several returns. Every construct is typed by
``rules`` while it is built; a combination the language refuses is not generated.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import classify, rules, scalar
from tests.fuzz.options import Options
from tests.fuzz.rules import Invalid
from tests.fuzz.stmts import Assign, For, Func, If, Jump, Store, While, walk
from tests.fuzz.tree import (Bin, BoolOp, Call, Cast, Cmp, IfExp, Len, Lit, Math, MinMax, Name,
                             Not, Pow, PyCast, Read, Unary, Where)

ARITH = ("add", "sub", "mul", "div", "floordiv", "mod")
BITS = ("and", "or", "xor", "shl", "shr")
PREDS = ("eq", "ne", "lt", "le", "gt", "ge")
MATH1 = ("sqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
         "erfc", "floor", "ceil", "trunc", "fabs", "cbrt", "isnan", "isinf", "isfinite")
MATH2 = ("pow", "atan2", "hypot", "copysign", "fmod")
NUMPY = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "floor": "floor",
         "atan2": "arctan2", "hypot": "hypot", "fabs": "fabs", "tanh": "tanh",
         "copysign": "copysign"}
INT_LITERALS = (0, 1, 2, 3, 5, 7, 10, 100, 127, 255, 1000, -1, -3, -128, 65535, 2 ** 31 - 1,
                2 ** 40, 12345)
FLOAT_LITERALS = (0.0, 0.5, 1.0, 1.5, 2.0, -1.0, -2.5, 0.1, 3.14159, 1e-3, 100.0, 1e5, 1e-8,
                  6.0e4, 0.25, -0.0, 1e20)


@dataclass
class ArrayParam:
    name: str
    dtype: DType
    role: str   # "in" or "out"
    ndim: int


@dataclass
class Var:
    name: str
    t: DType
    observed: list
    declared: bool = False
    fixed: bool = False  # loop variables, counters, constants: never reassigned
    const: bool = False  # assigned once from a constant: the name is that constant
    value: object = None

    def name_node(self) -> Name:
        return Name(self.name, self.t, self.const, self.value)


@dataclass
class Ctx:
    """Where an expression is generated: the visible variables, where a hoisted temporary
    goes (None inside a branch that may not run), and what the function can reach."""

    vars: list
    pre: list | None
    kernel: bool
    loops: int = 0
    eager: bool = False          # inside np.where: no guarded reads
    helpers: list = field(default_factory=list)

    def lazy(self) -> "Ctx":
        return Ctx(self.vars, None, self.kernel, self.loops, self.eager, self.helpers)

    def block(self, loops: int | None = None) -> "Ctx":
        return Ctx(list(self.vars), None, self.kernel,
                   self.loops if loops is None else loops, self.eager, self.helpers)


class Draws:
    """The random draws both generators make (``SimtGen``, ``tile_program.TileGen``); needs
    ``rng`` (random.Random) and ``counter``."""

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def dtype(self) -> DType:
        return self.rng.choice(rules.ALL)


class SimtGen(Draws):
    """Builds one kernel. ``idx`` are the thread-index names (``i``, or ``r`` and ``c``)."""

    def __init__(self, rng: random.Random, opts: Options):
        self.rng, self.opts = rng, opts
        self.counter = 0
        self.inputs: list[ArrayParam] = []
        self.outputs: list[ArrayParam] = []
        self.scalars: list[tuple[str, DType]] = []
        self.idx: list[str] = []
        self.helpers: list[Func] = []

    # leaves -----------------------------------------------------------------------------------

    def literal(self, kind: str | None = None) -> Lit:
        kind = kind or self.rng.choice(("int", "int", "float", "float", "bool"))
        if kind == "bool":
            return Lit(self.chance(0.5))
        return Lit(self.rng.choice(INT_LITERALS if kind == "int" else FLOAT_LITERALS))

    def literal_for(self, d: DType) -> Lit:
        """A weak literal that may be stored into ``d`` implicitly."""
        if d.is_bool:
            return self.literal("bool")
        if d.is_float:
            return self.literal(self.rng.choice(("int", "float")))
        lo, hi = rules.int_range(d)
        return Lit(self.rng.choice([v for v in INT_LITERALS if lo <= v <= hi]))

    def own_index(self) -> list:
        return [Name(n, dtypes.i64) for n in self.idx]

    def leaf(self, c: Ctx):
        r = self.rng.random()
        if c.vars and r < 0.35:
            return self.rng.choice(c.vars).name_node()
        if c.kernel and r < 0.65:
            a = self.rng.choice(self.inputs)
            return Read(a.name, a.dtype, self.own_index())
        if c.kernel and self.scalars and r < 0.72:
            name, d = self.rng.choice(self.scalars)
            return Name(name, d)
        if c.kernel and r < 0.75:
            return Name(self.rng.choice(self.idx), dtypes.i64)
        if c.kernel and r < 0.77:
            a = self.rng.choice(self.inputs + self.outputs)
            return Len(a.name, 0 if a.ndim == 2 else None)
        if r < 0.8:  # a typed constant; rarely of a literal out of its range
            d = self.dtype()
            try:
                return Cast(d, self.literal_for(d) if self.chance(0.9) else self.literal())
            except Invalid:
                pass
        return self.literal()

    def neighbour(self, c: Ctx):
        """``x[i + k] if i + k < len(x) else 0`` (or ``x[i - k] if i >= k``)."""
        a = self.rng.choice(self.inputs)
        axis = self.rng.randrange(a.ndim)
        k = self.rng.choice((1, 1, 2))
        index = self.own_index()
        me = index[axis]
        if self.chance(0.6):
            moved = Bin("add", me, Lit(k))
            guard = Cmp(["lt"], [moved, Len(a.name, axis if a.ndim == 2 else None)])
        else:
            moved = Bin("sub", me, Lit(k))
            guard = Cmp(["ge"], [me, Lit(k)])
        index[axis] = moved
        read = Read(a.name, a.dtype, index, guarded=True)
        return guard, read, a.dtype

    # expressions ------------------------------------------------------------------------------

    def expr(self, c: Ctx, depth: int):
        for _ in range(10):
            try:
                return self.avoiding(self._expr(c, depth))
            except Invalid:
                continue
        return self.leaf(c)

    def avoiding(self, node):
        """``node``, unless --skip-known and it holds a known class's construct."""
        if self.opts.skip_known and classify.known_under([node]):
            raise Invalid("a known class's construct")
        return node

    def _expr(self, c: Ctx, depth: int):
        if depth <= 0 or self.chance(0.2):
            return self.leaf(c)
        kinds = ["bin"] * 6 + ["cmp", "cast", "cast", "math", "math", "unary", "ifexp",
                                "minmax", "pow", "boolop", "pycast", "not", "where"]
        if c.helpers:
            kinds += ["call", "call"]
        if c.kernel and not c.eager:
            kinds += ["neighbour"]
        kind = self.rng.choice(kinds)
        sub = depth - 1
        if kind == "bin":
            op = self.rng.choice(ARITH + ARITH + BITS)
            return self.binop(c, op, self.expr(c, sub), self.expr(c, sub))
        if kind == "cmp":
            return self.compare(c, sub)
        if kind == "cast":
            return self.cast(c, self.dtype(), self.expr(c, sub))
        if kind == "math":
            return self.math(c, sub)
        if kind == "unary":
            op = self.rng.choice(("neg", "neg", "invert", "abs", "pos"))
            return Unary(op, self.expr(c, sub))
        if kind == "ifexp":
            lazy = c.lazy()
            return IfExp(self.cond(c, sub), self.expr(lazy, sub), self.expr(lazy, sub))
        if kind == "minmax":
            n = 2 if self.chance(0.8) else 3
            op = self.rng.choice(("min", "max"))
            spelling = f"np.{op}imum" if n == 2 and self.chance(0.15) else None
            return MinMax(op, [self.expr(c, sub) for _ in range(n)], spelling)
        if kind == "pow":
            return self.power(c, sub)
        if kind == "boolop":
            first = self.cond(c, sub)
            rest = [self.cond(c.lazy(), sub) for _ in range(self.rng.choice((1, 1, 2)))]
            return BoolOp(self.rng.choice(("and", "or")), [first, *rest])
        if kind == "pycast":
            k = self.rng.choice(("int", "float", "bool"))
            e = self.expr(c, sub)
            if k == "int" and not rules.is_weak(e.t) and e.t.is_float and not e.const:
                return self.float_to_int(c, e, dtypes.i64, spelling="int")
            return PyCast(k, e)
        if kind == "not":
            return Not(self.cond(c, sub))
        if kind == "where":
            eager = Ctx(c.vars, c.pre, c.kernel, c.loops, True, c.helpers)
            cond = Lit(self.chance(0.5)) if self.chance(0.05) else self.cond(eager, sub)
            return Where(cond, self.expr(eager, sub), self.expr(eager, sub))
        if kind == "call":  # arguments never constant: a helper's branches stay run-time
            f = self.rng.choice(c.helpers)
            args = [self.coerce(c, self.expr(c, sub), d, exact=True) for _, d in f.params]
            if any(a.const for a in args):
                raise Invalid("a constant argument")
            return Call(f, args)
        guard, read, d = self.neighbour(c)
        default = Lit(False) if d.is_bool and self.chance(0.5) else Lit(0)
        return IfExp(guard, read, default)

    def binop(self, c: Ctx, op: str, a, b):
        """``a <op> b`` with the guards of undefined integer division and shifts."""
        d = rules.common(a.t, b.t, op)  # raises Invalid for bitwise floats, u64 with signed
        if op in ("floordiv", "mod") and not d.is_float and self.opts.guard("int-div"):
            a, b = self.non_negative(a), Bin("or", self.non_negative(b), Lit(1))
        if op in ("shl", "shr") and self.opts.guard("shift"):
            b = Bin("and", b, Lit(d.bits - 1))
        return Bin(op, a, b)

    @staticmethod
    def non_negative(e):
        if rules.is_weak(e.t):
            return e if e.value >= 0 else Bin("and", e, Lit(127))
        if not e.t.is_signed:
            return e
        return Bin("and", e, Lit((1 << (e.t.bits - 1)) - 1))

    def compare(self, c: Ctx, depth: int):
        n = 3 if self.chance(0.1) else 2
        operands = [self.expr(c, depth) for _ in range(n)]
        return Cmp([self.rng.choice(PREDS) for _ in range(n - 1)], operands)

    def cond(self, c: Ctx, depth: int):
        """An expression used for its truth; never a compile-time constant."""
        for _ in range(10):
            try:
                r = self.rng.random()
                if r < 0.55:
                    e = self.compare(c, depth)
                elif r < 0.65 and depth > 0:
                    e = BoolOp(self.rng.choice(("and", "or")),
                               [self.cond(c, depth - 1), self.cond(c.lazy(), depth - 1)])
                elif r < 0.72:
                    e = Math(self.rng.choice(("isnan", "isinf", "isfinite")),
                             [self.expr(c, depth)])
                else:
                    e = self.expr(c, depth)
                if not e.const:
                    return e
            except Invalid:
                continue
        a = self.rng.choice(self.inputs) if c.kernel else None
        if a is None:
            v = self.rng.choice([v for v in c.vars if not v.const])
            return Cmp(["gt"], [v.name_node(), self.literal_for(v.t)])
        return Cmp(["gt"], [Read(a.name, a.dtype, self.own_index()), self.literal_for(a.dtype)])

    def math(self, c: Ctx, depth: int):
        if self.chance(0.3):
            fn = self.rng.choice(MATH2)
            args = [self.expr(c, depth), self.expr(c, depth)]
        else:
            fn = self.rng.choice(MATH1)
            args = [self.expr(c, depth)]
        if all(a.const for a in args):
            raise Invalid("math of constants")
        spelling = f"np.{NUMPY[fn]}" if fn in NUMPY and self.chance(0.2) else None
        return Math(fn, args, spelling)

    def power(self, c: Ctx, depth: int):
        a = self.expr(c, depth)
        if self.chance(0.7):
            return Pow(a, self.rng.choice((0, 1, 2, 2, 3, 3, 4, 7, 16)))
        b = self.expr(c, depth)
        if b.const and isinstance(b.value, int) and 0 <= b.value <= 16:
            raise Invalid("a small integer constant exponent unrolls")
        if rules.is_weak(a.t) and rules.is_weak(b.t):
            raise Invalid("literal power")
        if not rules.common(a.t, b.t, "pow").is_float:
            raise Invalid("an integer power needs a constant exponent")
        return Math("pow", [a, b], "**")

    # conversions ------------------------------------------------------------------------------

    def cast(self, c: Ctx, d: DType, e):
        if not rules.is_weak(e.t) and e.t.is_float and d.is_int and not e.const:
            return self.float_to_int(c, e, d)
        return Cast(d, e)

    def float_to_int(self, c: Ctx, e, d: DType, spelling: str | None = None):
        """``fl.i8(x) if lo <= x < hi else 0``: the cast only of values inside i8's range."""
        make = (lambda x: PyCast("int", x)) if spelling == "int" else (lambda x: Cast(d, x))
        if not self.opts.guard("float-int-cast"):
            return make(e)
        x = e
        if not e.leaf:
            if c.pre is not None:
                x = self.hoist(c, e)
            elif e.size() > 4:
                return Cast(d, Cmp(["gt"], [e, Lit(0.0)]))
        lo, lo_op, hi, hi_op = _int_window(x.t, d)
        guard = Cmp([lo_op, hi_op], [Lit(lo), x, Lit(hi)])
        return IfExp(guard, make(x), Lit(0))

    def hoist(self, c: Ctx, e):
        name = self.fresh("t")
        c.pre.append(Assign(name, e, rules.strong(e.t)))
        c.vars.append(Var(name, rules.strong(e.t), [e.t]))
        return Name(name, rules.strong(e.t))

    def coerce(self, c: Ctx, e, d: DType, exact: bool = False):
        """``e`` made storable into a ``d`` slot (``exact``: of type exactly ``d``)."""
        if exact and e.t is d:
            return e
        if not exact:
            if rules.is_weak(e.t):
                return e if rules.literal_fits(e.value, d) else self.literal_for(d)
            if rules.implicit_ok(e.t, d):
                return e
        if d.is_bool and not exact:
            if rules.is_weak(e.t) or self.chance(0.5):
                return PyCast("bool", e) if not e.const else self.literal("bool")
            zero = Lit(0.0) if e.t.is_float else Lit(0)
            return Cmp(["ne"], [e, zero])
        if d.is_int and not rules.is_weak(e.t) and e.t.is_float and not e.const:
            return self.float_to_int(c, e, d)
        return Cast(d, e)

    # statements -------------------------------------------------------------------------------

    def block(self, c: Ctx, depth: int, count: int) -> list:
        out = []
        for _ in range(count):
            pre: list = []
            sc = Ctx(c.vars, pre, c.kernel, c.loops, False, c.helpers)
            mark = len(c.vars)
            try:
                stmts = [self.avoiding(s) for s in self.stmt(sc, depth)]
            except Invalid:  # the statement is dropped, and the variables it made
                del c.vars[mark:]
                continue
            out += pre + stmts
        return out

    def stmt(self, c: Ctx, depth: int) -> list:
        kinds = ["new"] * 4 + ["set"] * 2 + ["aug", "acc"]
        if depth < 2:
            kinds += ["if", "if", "for", "while"]
        if c.kernel:
            kinds += ["neighbour"]
            if self.chance(0.05):
                kinds += ["return"]
        if c.loops:
            kinds += ["jump"]
        kind = self.rng.choice(kinds)
        if kind == "new":
            return [self.new_var(c, self.expr(c, 3))]
        if kind in ("set", "aug"):
            return self.reassign(c, kind == "aug")
        if kind == "acc":
            return self.accumulate(c, depth)
        if kind == "if":
            return [self.if_stmt(c, depth)]
        if kind == "for":
            return self.for_stmt(c, depth)
        if kind == "while":
            return self.while_stmt(c, depth)
        if kind == "neighbour":
            return self.neighbour_stmt(c)
        if kind == "return":
            return [If(self.cond(c, 1), [Jump("return")], [])]
        return [If(self.cond(c, 1), [Jump(self.rng.choice(("break", "continue")))], [])]

    def new_var(self, c: Ctx, e, name: str | None = None) -> Assign:
        name = name or self.fresh("v")
        if self.chance(0.2 if not e.const else 0.3):  # an annotation fixes the type (a slot,
            d = self.dtype()                           # even for a constant); e converts
            ok = rules.literal_fits(e.value, d) if rules.is_weak(e.t) else \
                rules.implicit_ok(e.t, d)
            if ok:
                c.vars.append(Var(name, d, [e.t], declared=True))
                return Assign(name, e, d, annotate=True)
        if e.const:  # bound once to a constant: the name is the constant
            c.vars.append(Var(name, e.t, [e.t], fixed=True, const=True, value=e.value))
            return Assign(name, e, rules.strong(e.t))
        d = rules.join([e.t])
        c.vars.append(Var(name, d, [e.t]))
        return Assign(name, e, d)

    def settable(self, c: Ctx):
        return [v for v in c.vars if not v.fixed]

    def reassign(self, c: Ctx, aug: bool) -> list:
        targets = self.settable(c)
        if not targets:
            return [self.new_var(c, self.expr(c, 2))]
        v = self.rng.choice(targets)
        e = self.expr(c, 2)
        op = None
        if aug:
            op = self.rng.choice(ARITH + BITS)
            e = self.binop(c, op, Name(v.name, v.t), e)
        if not self.fits_var(v, e):
            if aug:
                raise Invalid("the augmented value does not fit the variable")
            e = self.coerce(c, e, v.t, exact=True)
            if not self.fits_var(v, e):
                raise Invalid("the value does not fit the variable")
        v.observed.append(e.t)
        return [Assign(v.name, e, v.t, aug=op if aug and isinstance(e, Bin) and
                       isinstance(e.args[0], Name) and e.args[0].name == v.name else None)]

    @staticmethod
    def fits_var(v: Var, e) -> bool:
        if v.declared:
            return rules.literal_fits(e.value, v.t) if rules.is_weak(e.t) else \
                rules.implicit_ok(e.t, v.t)
        try:
            return rules.join(v.observed + [e.t]) is v.t and (
                not rules.is_weak(e.t) or rules.literal_fits(e.value, v.t))
        except Invalid:
            return False

    def accumulate(self, c: Ctx, depth: int) -> list:
        """``acc = 0`` then ``acc op= x`` in a loop. acc's type is the frontend's fixpoint:
        the literal's default first (i64, f64), then the join of what is assigned with that
        type (``0`` and ``acc + x_f32``: f32; ``0`` and ``acc + x_i8``: i64)."""
        d = self.rng.choice(rules.INTS + rules.FLOATS)
        start = Lit(self.rng.choice((0, 1)) if d.is_int or self.chance(0.5) else
                    self.rng.choice((0.0, 1.0)))
        inner = c.block(loops=c.loops + 1)
        loop_var = self.fresh("j")
        inner.vars.append(Var(loop_var, dtypes.i64, [dtypes.i64], fixed=True))
        x = self.coerce(inner, self.expr(inner, 2), d, exact=True)
        op = self.rng.choice(("add", "add", "sub", "mul", "max", "min") +
                             (("xor", "or") if d.is_int else ()))
        name = self.fresh("acc")
        t = rules.strong(start.t)
        for _ in range(4):  # the frontend's passes: raises Invalid where it would fail
            if op in ("max", "min"):
                step = Assign(name, MinMax(op, [Name(name, t), x]), t)
            else:
                step = Assign(name, Bin(op, Name(name, t), x), t, aug=op)
            settled = rules.join([start.t, step.e.t])
            if settled is t:
                break
            t = settled
        else:
            raise Invalid("the accumulator's type does not settle")
        c.vars.append(Var(name, t, [start.t, t]))
        n = self.rng.choice((1, 2, 3, 4))
        body = [step] + (self.block(inner, depth + 1, 1) if self.chance(0.3) else [])
        return [Assign(name, start, t), For(loop_var, [Lit(n)], body)]

    def if_stmt(self, c: Ctx, depth: int) -> If:
        cond = self.cond(c, 2)
        body = self.block(c.block(), depth + 1, self.rng.randint(1, 3))
        orelse: list = []
        r = self.rng.random()
        if r < 0.3:
            orelse = [self.if_stmt(c.block(), depth + 1)]
        elif r < 0.7:
            orelse = self.block(c.block(), depth + 1, self.rng.randint(1, 2))
        return If(cond, body, orelse)

    def int_leaf(self, c: Ctx):
        for _ in range(10):
            e = self.leaf(c)
            if not rules.is_weak(e.t) and not e.t.is_float and not e.const:
                return e
        return None

    def for_stmt(self, c: Ctx, depth: int) -> list:
        var = self.fresh("j")
        r = self.rng.random()
        bound = self.int_leaf(c) if r < 0.3 else None
        if bound is not None:
            bounds = [Bin("and", bound, Lit(3))]
        elif r < 0.6:
            bounds = [Lit(self.rng.randint(0, 4))]
        elif r < 0.8:
            lo = self.rng.randint(0, 3)
            bounds = [Lit(lo), Lit(lo + self.rng.randint(0, 3))]
        else:
            bounds = [Lit(self.rng.randint(1, 4)), Lit(0), Lit(-1)]
        inner = c.block(loops=c.loops + 1)
        inner.vars.append(Var(var, dtypes.i64, [dtypes.i64], fixed=True))
        body = []
        if c.kernel and self.chance(0.5):  # another thread's element: (i + j) % len(x)
            a = self.rng.choice([a for a in self.inputs])
            index = self.own_index()
            axis = self.rng.randrange(a.ndim)
            index[axis] = Bin("mod", Bin("add", index[axis], Name(var, dtypes.i64)),
                              Len(a.name, axis if a.ndim == 2 else None))
            body.append(self.new_var(inner, Read(a.name, a.dtype, index)))
        body += self.block(inner, depth + 1, self.rng.randint(1, 3))
        return [For(var, bounds, body)]

    def while_stmt(self, c: Ctx, depth: int) -> list:
        w = self.fresh("w")
        counter = Var(w, dtypes.i64, [rules.WINT, dtypes.i64], fixed=True)
        c.vars.append(counter)
        bound = self.int_leaf(c) if self.chance(0.3) else None
        limit = Bin("and", bound, Lit(3)) if bound is not None else Lit(self.rng.randint(0, 4))
        inner = c.block(loops=c.loops + 1)
        step = Assign(w, Bin("add", Name(w, dtypes.i64), Lit(1)), dtypes.i64, aug="add")
        body = [step] + self.block(inner, depth + 1, self.rng.randint(1, 3))
        return [Assign(w, Lit(0), dtypes.i64),
                While(Cmp(["lt"], [Name(w, dtypes.i64), limit]), body)]

    def neighbour_stmt(self, c: Ctx) -> list:
        guard, read, d = self.neighbour(c)
        name = self.fresh("nb")
        start = Lit(False if d.is_bool else 0.0 if d.is_float and self.chance(0.5) else 0)
        # fixed: nb = nb & x computed with nb's first guess (the literal's i64) would keep
        # nb i64 (the frontend's fixpoint starts from the literal's default type)
        c.vars.append(Var(name, d, [start.t, d], fixed=True))
        return [Assign(name, start, d), If(guard, [Assign(name, read, d)], [])]

    # helpers ----------------------------------------------------------------------------------

    def helper(self) -> Func:
        f = Func(self.fresh("h"), [(self.fresh("a"), self.dtype())
                                   for _ in range(self.rng.randint(1, 3))])
        params = [Var(p, d, [d], fixed=True) for p, d in f.params]
        c = Ctx(list(params), None, False, helpers=list(self.helpers))
        body = self.block(c, 1, self.rng.randint(0, 2))
        returns = []
        if self.chance(0.4):
            early = Jump("return", self.expr(c.lazy(), 2))
            body.append(If(self.cond(c.lazy(), 1), [early], []))
            returns.append(early)
        pre: list = []
        tail = Jump("return", self.expr(Ctx(c.vars, pre, False, helpers=c.helpers), 2))
        if not returns and tail.e.const:  # a constant would flow through as a constant
            tail.e = params[0].name_node()
        body += pre + [tail]
        returns.append(tail)
        try:
            joined = rules.join([r.e.t for r in returns])
        except Invalid:
            joined = rules.strong(returns[0].e.t)
            for r in returns:
                r.e = self.coerce(c.lazy(), r.e, joined, exact=True)
        for r in returns:  # a literal return must fit the joined return slot
            if rules.is_weak(r.e.t) and not rules.literal_fits(r.e.value, joined):
                r.e = self.literal_for(joined)
        f.finish(body, [r.e.t for r in returns], simple=len(returns) == 1)
        return f


# math added to the language after this generator was written, drawn after a kernel's own draws
# (``newer_math``): one-argument math functions (other than isnan & co.) become one of these
NEWER_MATH = (("rint", "np.rint"), ("lgamma", "math.lgamma"))
NEWER_MATH_SHARE, ROUND_SHARE = 0.15, 0.4


def newer_math(g: SimtGen, body: list, rng: random.Random) -> None:
    """Turn some one-argument math calls of ``body`` and of the helpers into ``np.rint`` or
    ``math.lgamma`` (same types: a float in, that float out), and some ``int(x)`` into
    ``round(x)`` (an i64 either way). The draws come after those that built the kernel, so a
    seed where none is picked gives the kernel it gave before these were added."""
    for node in walk([*body, *(s for h in g.helpers for s in h.body)]):
        if isinstance(node, Math) and len(node.args) == 1 and node.fn not in Math.BOOL:
            if rng.random() < NEWER_MATH_SHARE:
                node.fn, node.spelling = rng.choice(NEWER_MATH)
        elif isinstance(node, PyCast) and node.kind == "int" and not node.const:
            if rng.random() < ROUND_SHARE:
                node.kind = "round"


def _int_window(src: DType, d: DType):
    """Literal bounds (and comparison ops) inside which a ``src`` value casts to ``d`` exactly."""
    top = scalar.MAX_FINITE[src.name]
    if d.is_signed:
        lo, lo_op, hi, hi_op = -float(2 ** (d.bits - 1)), "le", float(2 ** (d.bits - 1)), "lt"
    else:
        lo, lo_op, hi, hi_op = -1.0, "lt", float(2 ** d.bits), "lt"
    if hi > top:
        hi, hi_op = top, "ge"
    if -lo > top:
        lo, lo_op = -top, "le"
    return lo, lo_op, hi, "le" if hi_op == "ge" else hi_op


def generate(rng: random.Random, opts: Options, dims: int):
    """The parameters, helpers and body of one kernel (see ``program.SimtProgram``)."""
    g = SimtGen(rng, opts)
    g.idx = ["i"] if dims == 1 else ["r", "c"]
    for k in range(rng.randint(1, 4)):
        g.inputs.append(ArrayParam(f"x{k}", g.dtype(), "in", dims))
    for k in range(rng.choice((0, 0, 1, 2))):
        g.scalars.append((f"s{k}", g.dtype()))
    for k in range(rng.choice((1, 1, 2, 3))):
        g.outputs.append(ArrayParam(f"o{k}", g.dtype(), "out", dims))
    for _ in range(rng.choice((0, 0, 1, 2))):
        try:
            g.helpers.append(g.helper())
        except Invalid:
            pass
    c = Ctx([], None, True, helpers=list(g.helpers))
    body = g.block(c, 0, rng.randint(1, 6))
    for o in g.outputs:
        pre: list = []
        sc = Ctx(c.vars, pre, True, helpers=c.helpers)
        mark = len(c.vars)
        for _ in range(10):
            try:
                e = g.coerce(sc, g.expr(sc, 3), o.dtype)
                g.avoiding(Store(o.name, o.dtype, g.own_index(), e))
                break
            except Invalid:
                pre.clear()
                del c.vars[mark:]
        else:
            e = g.literal_for(o.dtype)
        body += pre + [Store(o.name, o.dtype, g.own_index(), e)]
    return g, body
