"""The fuzzer's program tree: each node renders itself as kernel source and evaluates itself.

Nodes are typed when built, by ``rules`` (the language's rules, written independently of the
compiler); a combination the language refuses raises ``rules.Invalid`` and the generator picks
another. Evaluation (``ev``) is the reference semantics of one SIMT thread, in plain Python
(``scalar``); it never looks at fearless's IR.

Compile-time constants follow the frontend's folding: two weak literals fold with Python's own
operators (``2 + 3`` is the weak literal 5), a cast of a literal is a typed constant, and a
weak literal takes the type of the operation it meets.
"""
from __future__ import annotations

import math
import operator

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules, scalar
from tests.fuzz.options import GUARDS
from tests.fuzz.rules import Invalid
from tests.fuzz.scalar import Thread, Val

FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
        "floordiv": operator.floordiv, "mod": operator.mod, "and": operator.and_,
        "or": operator.or_, "xor": operator.xor, "shl": operator.lshift, "shr": operator.rshift,
        "min": min, "max": max}
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
          "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "pow": "**",
          "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def fl_name(d: DType) -> str:
    return "fl.bool_" if d.is_bool else f"fl.{d.name}"


class Frame:
    """The variables of one function activation and the arrays it can see."""

    __slots__ = ("vars", "arrays")

    def __init__(self, arrays: dict):
        self.vars: dict[str, Val] = {}
        self.arrays = arrays


# expressions -----------------------------------------------------------------------------------

class Expr:
    t = None            # a DType or a weak marker
    const = False       # a compile-time constant (then ``value`` holds it)
    value = None
    leaf = False        # cheap and pure: may be written twice in the source
    lazy_reads = False  # holds a guarded neighbour read (must not be hoisted out of its guard)

    def size(self) -> int:
        return 1

    def conversions(self) -> list:
        """``(operand, dtype)`` for each operand this node converts (promotion, casts)."""
        return []

    def known(self) -> set:
        """The known bug classes (``options.KNOWN``) this node's construct belongs to."""
        return set()

    def render(self) -> str:
        raise NotImplementedError

    def ev(self, th: Thread, fr: Frame) -> Val:
        raise NotImplementedError


class Lit(Expr):
    const = leaf = True

    def __init__(self, value):
        self.value, self.t = value, rules.weak_of(value)

    def render(self):
        text = repr(self.value)
        return f"({text})" if text.startswith("-") else text

    def ev(self, th, fr):
        return Val(self.value)


class Name(Expr):
    """A variable, a scalar parameter or a loop variable. A name assigned once from a constant
    is that constant (the frontend binds it, weak literals stay weak): ``const`` and ``value``."""

    leaf = True

    def __init__(self, name: str, t, const: bool = False, value=None):
        self.name, self.t, self.const, self.value = name, t, const, value

    def render(self):
        return self.name

    def ev(self, th, fr):
        return Val(self.value) if self.const else fr.vars[self.name]


class Read(Expr):
    """``x[idx]`` of an input (or the thread's own output element)."""

    def __init__(self, array: str, dtype: DType, index: list, guarded: bool = False):
        self.array, self.t, self.index = array, dtype, index
        self.leaf = all(isinstance(e, Name) for e in index)
        self.lazy_reads = guarded or any(e.lazy_reads for e in index)

    def size(self):
        return 1 + sum(e.size() for e in self.index)

    def render(self):
        return f"{self.array}[{', '.join(e.render() for e in self.index)}]"

    def ev(self, th, fr):
        data = fr.arrays[self.array]
        for e in self.index:
            k = _index(th, e, fr)
            if not 0 <= k < len(data):
                raise AssertionError(f"generator bug: {self.render()} reads index {k}")
            data = data[k]
        return Val(data)


def _index(th, e: Expr, fr) -> int:
    return scalar.convert(th, e.ev(th, fr), e.t, dtypes.i64).v


class Compound(Expr):
    args: tuple = ()

    def size(self):
        return 1 + sum(a.size() for a in self.args)

    @property
    def lazy_reads(self):
        return any(a.lazy_reads for a in self.args)


def _check_fits(e: Expr, d: DType):
    if rules.is_weak(e.t) and not rules.literal_fits(e.value, d):
        raise Invalid(f"{e.value!r} does not fit {d}")


class Bin(Compound):
    """``a <op> b`` for arithmetic, bitwise and shift operators (``**`` is ``Pow``/``Math``)."""

    def __init__(self, op: str, a: Expr, b: Expr, symbol: str | None = None):
        self.op, self.args, self.symbol = op, (a, b), symbol
        if rules.is_weak(a.t) and rules.is_weak(b.t):
            self.value = _fold(op, a.value, b.value)
            self.t, self.const = rules.weak_of(self.value), True
            return
        d = rules.common(a.t, b.t, op)
        if op == "div" and not d.is_float:
            d = dtypes.f64
        _check_fits(a, d)
        _check_fits(b, d)
        self.t = d

    def conversions(self):
        return [] if self.const else [(a, self.t) for a in self.args]

    def known(self):
        if self.op in ("min", "max") and self.const:
            return {"literal-minmax"}
        if self.op in ("floordiv", "mod") and not self.const and self.t.is_float:
            return {"float-floordiv"}
        return set()

    def render(self):
        a, b = self.args
        if self.symbol:  # min(a, b) / max(a, b)
            return f"{self.symbol}({a.render()}, {b.render()})"
        return f"({a.render()} {SYMBOL[self.op]} {b.render()})"

    def ev(self, th, fr):
        if self.const:
            return Val(self.value)
        a, b = self.args
        d = self.t
        return scalar.binary(th, self.op, d, scalar.convert(th, a.ev(th, fr), a.t, d),
                             scalar.convert(th, b.ev(th, fr), b.t, d))


def _fold(op, x, y):
    """Python's own result of ``x <op> y`` on two literals, when the frontend folds it; ``min``
    and ``max`` give the unfolded op's kind (a float if either is, else an int: bools count
    as i64), and of floats IEEE minimumNumber/maximumNumber: a NaN is ignored, -0.0 < +0.0
    (docs/semantics.md: literal folding), not Python's order-dependent min/max."""
    if op in ("min", "max"):
        if not (isinstance(x, float) or isinstance(y, float)):
            return int(FOLD[op](x, y))
        try:
            x, y = float(x), float(y)
        except OverflowError:
            raise Invalid("literal too large for a float") from None
        if x != x or y != y:
            return y if x != x else x
        return FOLD[op](x, y, key=lambda v: (v, math.copysign(1.0, v)))
    if op == "shl" and isinstance(y, int) and y > 70:  # past the 2^70 literal bound below (and
        # never built: 1 << 2**40 took the worker hours)
        raise Invalid("literal shift too large")
    try:
        r = FOLD[op](x, y)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError):
        raise Invalid("literal operation does not fold") from None
    if isinstance(r, complex) or (isinstance(r, float) and not math.isfinite(r)):
        raise Invalid("literal operation does not fold to a finite number")
    if isinstance(r, int) and abs(r) > 1 << 70:
        raise Invalid("literal too large")
    return r


class Pow(Compound):
    """``a ** n`` with a literal exponent 0..16: repeated products (exact for integers)."""

    def __init__(self, a: Expr, n: int):
        self.args, self.n = (a,), n
        if rules.is_weak(a.t):
            self.value = _fold_pow(a.value, n)
            self.t, self.const = rules.weak_of(self.value), True
            return
        self.t = rules.common(a.t, rules.WINT, "mul")

    def conversions(self):
        return [] if self.const else [(self.args[0], self.t)]

    def render(self):
        return f"({self.args[0].render()} ** {self.n})"

    def ev(self, th, fr):
        if self.const:
            return Val(self.value)
        a = self.args[0]
        d = self.t
        base = scalar.convert(th, a.ev(th, fr), a.t, d)
        r = Val(scalar.literal(1, d))
        for _ in range(self.n):
            r = scalar.binary(th, "mul", d, r, base)
        return r


def _fold_pow(x, n):
    try:
        r = x ** n
    except OverflowError:
        raise Invalid("literal power overflows") from None
    if isinstance(r, float) and not math.isfinite(r) or isinstance(r, int) and abs(r) > 1 << 70:
        raise Invalid("literal power too large")
    return r


class Cmp(Compound):
    """A comparison chain ``a < b <= c`` (each pair compared, the results and-ed)."""

    t = dtypes.bool_

    def __init__(self, preds: list[str], operands: list[Expr]):
        self.preds, self.args = preds, tuple(operands)
        self.types = []
        for a, b in zip(operands, operands[1:]):
            if rules.is_weak(a.t) and rules.is_weak(b.t):
                raise Invalid("a comparison of two literals folds")
            d = rules.common(a.t, b.t, "cmp")
            for c in (a, b):  # x_u8 < 300 compares exactly, in a wider type
                if rules.is_weak(c.t) and d.is_int and isinstance(c.value, int) \
                        and not rules.literal_fits(c.value, d):
                    d = rules.promote(d, dtypes.i64)
            for c in (a, b):
                _check_fits(c, d)
            self.types.append(d)

    def conversions(self):
        return [(e, d) for k, d in enumerate(self.types) for e in self.args[k:k + 2]]

    def render(self):
        out = self.args[0].render()
        for pred, e in zip(self.preds, self.args[1:]):
            out += f" {SYMBOL[pred]} {e.render()}"
        return f"({out})"

    def ev(self, th, fr):
        vals = [e.ev(th, fr) for e in self.args]
        result = True
        for k, (pred, d) in enumerate(zip(self.preds, self.types)):
            a, b = self.args[k], self.args[k + 1]
            ok = scalar.compare(th, pred, d, scalar.convert(th, vals[k], a.t, d),
                                scalar.convert(th, vals[k + 1], b.t, d))
            result = result and ok
        return Val(result)


class BoolOp(Compound):
    """``a and b`` / ``a or b``: short-circuit, always a bool (the operands' truth)."""

    t = dtypes.bool_

    def __init__(self, op: str, values: list[Expr]):
        if values[0].const:
            raise Invalid("a constant first operand decides at compile time")
        self.op, self.args = op, tuple(values)

    def render(self):
        return "(" + f" {self.op} ".join(v.render() for v in self.args) + ")"

    def ev(self, th, fr):
        cur = False
        for k, e in enumerate(self.args):
            if k and (cur if self.op == "or" else not cur):
                break
            cur = scalar.truth(th, e.ev(th, fr), e.t)
        return Val(cur)


class Not(Compound):
    def __init__(self, a: Expr):
        self.args = (a,)
        self.t = dtypes.bool_
        if a.const:
            self.t, self.const, self.value = rules.WBOOL, True, not bool(a.value)

    def render(self):
        return f"(not {self.args[0].render()})"

    def ev(self, th, fr):
        if self.const:
            return Val(self.value)
        a = self.args[0]
        return Val(not scalar.truth(th, a.ev(th, fr), a.t))


class Unary(Compound):
    """``-a``, ``~a``, ``abs(a)``, ``+a``."""

    def __init__(self, op: str, a: Expr):
        self.op, self.args = op, (a,)
        if op == "pos":
            self.t, self.const, self.value = a.t, a.const, a.value
            return
        if rules.is_weak(a.t):
            v = a.value
            if op == "invert" and isinstance(v, float):
                raise Invalid("~ of a float literal")
            self.value = {"neg": lambda: -v, "abs": lambda: abs(v),
                          "invert": lambda: (not v) if isinstance(v, bool) else ~v}[op]()
            self.t, self.const = rules.weak_of(self.value), True
            return
        d = a.t
        if op in ("neg", "abs") and d.is_bool:
            d = dtypes.i64
        if op == "invert" and d.is_float:
            raise Invalid("~ of a float")
        self.t = d

    def conversions(self):
        return [] if self.const or self.op == "pos" else [(self.args[0], self.t)]

    def render(self):
        a = self.args[0].render()
        return {"neg": f"(-{a})", "pos": f"(+{a})", "invert": f"(~{a})", "abs": f"abs({a})"}[
            self.op]

    def ev(self, th, fr):
        if self.const and self.op != "pos":
            return Val(self.value)
        a = self.args[0]
        v = a.ev(th, fr)
        if self.op == "pos":
            return v
        return scalar.unary(th, self.op, self.t, scalar.convert(th, v, a.t, self.t))


class IfExp(Compound):
    """``a if c else b``: one branch evaluated, converted to the join of both types."""

    def __init__(self, cond: Expr, a: Expr, b: Expr):
        if cond.const:
            raise Invalid("a constant condition decides at compile time")
        self.args = (cond, a, b)
        self.t = rules.join([a.t, b.t])
        for e in (a, b):
            _check_fits(e, self.t)

    def conversions(self):
        return [(e, self.t) for e in self.args[1:]]

    def render(self):
        c, a, b = (e.render() for e in self.args)
        return f"({a} if {c} else {b})"

    def ev(self, th, fr):
        c, a, b = self.args
        e = a if scalar.truth(th, c.ev(th, fr), c.t) else b
        return scalar.convert(th, e.ev(th, fr), e.t, self.t)


class Cast(Compound):
    """``fl.i8(a)`` (explicit conversion; of a constant, a typed constant)."""

    def __init__(self, d: DType, a: Expr):
        self.d, self.args, self.t = d, (a,), d
        if a.const:
            self.const = True
            try:
                self.value = scalar.convert(Thread(scalar.CPU, frozenset(GUARDS)),
                                            Val(a.value), a.t, d).v
            except scalar.Undefined:
                raise Invalid("a constant float -> int cast out of range") from None

    @property
    def leaf(self):
        return self.args[0].leaf

    def conversions(self):  # a constant converts at compile time, with NumPy's scalar types
        return [] if self.const else [(self.args[0], self.d)]

    def known(self):
        """A cast of an integer literal NumPy's scalar types refuse: out of an integer
        dtype's range, or beyond 64 bits (``ml_dtypes.bfloat16(2**70)`` is a TypeError)."""
        a = self.args[0]
        if not self.const or isinstance(a.value, (bool, float)) or self.d.is_bool:
            return set()
        lo, hi = rules.int_range(self.d) if self.d.is_int else (-(1 << 63), (1 << 64) - 1)
        return set() if lo <= a.value <= hi else {"literal-cast-range"}

    def render(self):
        return f"{fl_name(self.d)}({self.args[0].render()})"

    def ev(self, th, fr):
        if self.const:
            return Val(self.value)
        a = self.args[0]
        return scalar.convert(th, a.ev(th, fr), a.t, self.d)


class PyCast(Compound):
    """``int(a)`` / ``float(a)`` / ``bool(a)`` / ``round(a)``: of a constant, Python's own (weak)
    result. ``round`` is Python's (the nearest integer, ties to even) as an i64: a float is
    rounded by ``np.rint`` in its own dtype, then converted as ``int()`` converts (saturating)."""

    def __init__(self, kind: str, a: Expr):
        self.kind, self.args = kind, (a,)
        self.d = {"int": dtypes.i64, "float": dtypes.f64, "bool": dtypes.bool_,
                  "round": dtypes.i64}[kind]
        self.t = self.d
        if a.const:
            self.const = True
            try:
                self.value = {"int": int, "float": float, "bool": bool, "round": round}[kind](
                    a.value)
            except (OverflowError, ValueError):
                raise Invalid(f"{kind}() of {a.value!r}") from None
            if kind == "int" and not -(1 << 63) <= self.value < (1 << 63):
                raise Invalid("int() of a constant beyond i64")
            self.t = rules.weak_of(self.value)

    def conversions(self):
        return [] if self.const or self.kind == "bool" else [(self.args[0], self.d)]

    def known(self):
        return {"literal-pycast"} if self.const else set()

    def render(self):
        return f"{self.kind}({self.args[0].render()})"

    def ev(self, th, fr):
        if self.const:
            return Val(self.value)
        a = self.args[0]
        v = a.ev(th, fr)
        if self.kind == "bool":
            return Val(scalar.truth(th, v, a.t))
        if self.kind == "round" and a.t.is_float:
            v = scalar.math_call(th, "rint", a.t, [v])
        return scalar.convert(th, v, a.t, self.d)


class Math(Compound):
    """``math.<fn>(...)`` (or ``np.<ufunc>``, or ``a ** b`` for a float power)."""

    BOOL = ("isnan", "isinf", "isfinite")

    def __init__(self, fn: str, args: list[Expr], spelling: str | None = None):
        self.fn, self.args, self.spelling = fn, tuple(args), spelling or f"math.{fn}"
        self.d = rules.math_type([a.t for a in args])
        for a in args:
            _check_fits(a, self.d)
        self.t = dtypes.bool_ if fn in self.BOOL else self.d

    def conversions(self):
        return [(a, self.d) for a in self.args]

    def render(self):
        if self.spelling == "**":
            a, b = self.args
            return f"({a.render()} ** {b.render()})"
        return f"{self.spelling}({', '.join(a.render() for a in self.args)})"

    def ev(self, th, fr):
        vals = [scalar.convert(th, a.ev(th, fr), a.t, self.d) for a in self.args]
        return scalar.math_call(th, self.fn, self.d, vals)


class MinMax(Compound):
    """``min(a, b, ...)`` / ``max(...)`` (or ``np.minimum``): a left fold of the binary op."""

    def __init__(self, op: str, args: list[Expr], spelling: str | None = None):
        self.op, self.args, self.spelling = op, tuple(args), spelling or op
        chain = args[0]
        for a in args[1:]:
            chain = Bin(op, chain, a)
        self.chain = chain
        self.t, self.const, self.value = chain.t, chain.const, chain.value

    def _links(self):
        e = self.chain
        while isinstance(e, Bin) and e is not self.args[0]:
            yield e
            e = e.args[0]

    def conversions(self):
        return [c for link in self._links() for c in link.conversions()]

    def known(self):
        return set().union(*(link.known() for link in self._links()))

    def render(self):
        return f"{self.spelling}({', '.join(a.render() for a in self.args)})"

    def ev(self, th, fr):
        return self.chain.ev(th, fr)


class Where(Compound):
    """``np.where(c, a, b)``: all three evaluated, the choice in the common type."""

    def __init__(self, cond: Expr, a: Expr, b: Expr):
        self.args = (cond, a, b)
        self.t = rules.common(a.t, b.t, "select")
        for e in (a, b):
            _check_fits(e, self.t)
        if any(e.lazy_reads for e in self.args):
            raise Invalid("np.where evaluates both choices")

    def conversions(self):
        return [(e, self.t) for e in self.args[1:]]

    def known(self):
        return {"const-where"} if self.args[0].const else set()

    def render(self):
        return f"np.where({', '.join(e.render() for e in self.args)})"

    def ev(self, th, fr):
        c, a, b = self.args
        cv, av, bv = (e.ev(th, fr) for e in self.args)
        e, v = (a, av) if scalar.truth(th, cv, c.t) else (b, bv)
        return scalar.convert(th, v, e.t, self.t)


class Len(Expr):
    t = dtypes.i64

    def __init__(self, array: str, axis: int | None = None):
        self.array, self.axis = array, axis

    def render(self):
        return f"len({self.array})" if self.axis is None else f"{self.array}.shape[{self.axis}]"

    def ev(self, th, fr):
        data = fr.arrays[self.array]
        return Val(len(data) if not self.axis else len(data[0]))


class Call(Compound):
    """A call of a generated ``@fl.func`` helper, with arguments of its parameters' types."""

    def __init__(self, func, args: list[Expr]):
        self.func, self.args, self.t = func, tuple(args), func.ret_t

    def render(self):
        return f"{self.func.name}({', '.join(a.render() for a in self.args)})"

    def ev(self, th, fr):
        return self.func.call(th, [a.ev(th, fr) for a in self.args], fr.arrays)
