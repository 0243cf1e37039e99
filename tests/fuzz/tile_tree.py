"""The fuzzer's tile-kernel tree: nodes that render as ``@ft.kernel`` source and evaluate one
tile block with NumPy (``vector``), typed by the tile language's rules.

Tile rules on top of the scalar ones (``rules``): operands broadcast like NumPy; integer tiles
divide (``/``) and take math functions in f32, not f64; a comparison does not widen for a literal
(the literal must fit the tile's dtype); ``-``/``abs`` of a bool tile and ``~`` of a float are
refused; ``**`` is the math function pow; sums of bool and narrow integers are i32, sums of
f16/bf16 accumulate in f32 and round once; a tile variable keeps one tile type (no join).
An expression with no tile in it follows the scalar rules.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules, scalar, vector
from tests.fuzz.rules import Invalid
from tests.fuzz.stmts import BreakSignal, ContinueSignal, Stmt, _block
from tests.fuzz.tree import SYMBOL, Expr, Lit, _check_fits, _fold, fl_name
from tests.fuzz.vector import TV

TILE_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan", "floor",
             "ceil", "fabs")
NEWER_MATH = {"rint": "np.rint", "lgamma": "math.lgamma"}  # fn -> spelling (added later)


def broadcast(*shapes):
    shapes = [s for s in shapes if s is not None]
    if not shapes:
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise Invalid("shapes do not broadcast") from None


@dataclass
class TVar:
    """A variable the generator may read: a tile (``shape``) or a scalar (``shape`` None)."""

    name: str
    t: DType
    shape: tuple | None


class Block:
    """One tile block: its coordinates, the tensors (NumPy arrays) and the variables.
    ``unsure``: why a decision of the block (an ``if`` or ``while`` on a scalar the error bound
    could flip, or on an unchecked one) leaves none of its outputs checked."""

    def __init__(self, coords: tuple, tensors: dict, profile: scalar.Profile,
                 relaxed: frozenset = frozenset()):
        self.coords, self.tensors, self.profile, self.relaxed = coords, tensors, profile, relaxed
        self.vars: dict[str, TV] = {}
        self.unsure: str | None = None

    def decide(self, cond: TV) -> bool:
        """The truth of the scalar ``cond`` (a bool), noting a decision it cannot be sure of."""
        if np.any(cond.bad):
            self.unsure = self.unsure or "a block's decision within the error bound"
        return bool(cond.v)


class TExpr(Expr):
    shape = None  # None: a scalar

    def ev(self, blk: Block) -> TV:
        raise NotImplementedError


class TLit(Lit, TExpr):
    """A Python literal (``tree.Lit``), evaluated per tile block."""

    def ev(self, blk):
        return TV(np.asarray(self.value))


class TName(TExpr):
    leaf = True

    def __init__(self, name: str, t, shape=None):
        self.name, self.t, self.shape = name, t, shape

    def render(self):
        return self.name

    def ev(self, blk):
        return blk.vars[self.name]


class TIndex(TExpr):
    """``out.tile_index[axis]`` (i64) or ``x.shape[axis]``."""

    t = dtypes.i64

    def __init__(self, tensor: str, axis: int, what: str = "tile_index"):
        self.tensor, self.axis, self.what = tensor, axis, what

    def render(self):
        return f"{self.tensor}.{self.what}[{self.axis}]"

    def ev(self, blk):
        if self.what == "tile_index":
            return TV(np.asarray(blk.coords[self.axis], dtype=np.int64))
        return TV(np.asarray(blk.tensors[self.tensor].shape[self.axis], dtype=np.int64))


class TLoad(TExpr):
    """``ft.load(x, index, shape)`` or ``ft.load_like(x, out)`` (zero past the edge)."""

    def __init__(self, x: str, dtype: DType, shape: tuple, index: list | None, out: str = ""):
        self.x, self.t, self.shape, self.index, self.out = x, dtype, shape, index, out
        self.args = tuple(index or ())

    def render(self):
        if self.index is None:
            return f"ft.load_like({self.x}, {self.out})"
        idx = ", ".join(e.render() for e in self.index)
        return f"ft.load({self.x}, ({idx},), {self.shape})"

    def ev(self, blk):
        a = blk.tensors[self.x]
        coords = blk.coords[:len(self.shape)] if self.index is None else \
            [int(e.ev(blk).v) for e in self.index]
        out = np.zeros(self.shape, dtype=np.float64 if self.t.is_float else self.t.numpy)
        src, dst = [], []
        for c, n, extent in zip(coords, self.shape, a.shape):
            lo, hi = c * n, min(c * n + n, extent)
            lo = min(lo, hi)
            src.append(slice(lo, hi))
            dst.append(slice(0, hi - lo))
        out[tuple(dst)] = a[tuple(src)]
        return TV(out)


class TFull(TExpr):
    """``ft.full(shape, value, dtype)`` / ``ft.zeros(shape, dtype)``."""

    def __init__(self, shape: tuple, value, d: DType):
        if not rules.literal_fits(value, d):
            raise Invalid("the fill value does not fit")
        self.shape, self.value, self.t = shape, value, d

    def render(self):
        if self.value == 0 and not isinstance(self.value, bool):
            return f"ft.zeros({self.shape}, {fl_name(self.t)})"
        return f"ft.full({self.shape}, {self.value!r}, {fl_name(self.t)})"

    def ev(self, blk):
        v = vector.literal(self.value, self.t)
        return TV(np.broadcast_to(v.v, self.shape).copy())


class TOp(TExpr):
    """An operation on operands ``args`` converted to ``self.d``."""

    args: tuple = ()
    d: DType = None

    def size(self):
        return 1 + sum(a.size() for a in self.args)

    def conversions(self):
        return [(a, self.d) for a in self.args]

    def operands(self, blk):
        return [vector.convert(a.ev(blk), a.t, self.d, blk.relaxed) for a in self.args]


class TBin(TOp):
    def __init__(self, op: str, a, b):
        self.op, self.args = op, (a, b)
        self.shape = broadcast(a.shape, b.shape)
        if rules.is_weak(a.t) and rules.is_weak(b.t):
            self.value, self.const = _fold(op, a.value, b.value), True
            self.t = rules.weak_of(self.value)
            return
        d = rules.common(a.t, b.t, op)
        if op == "div" and not d.is_float:
            d = dtypes.f32 if self.shape is not None else dtypes.f64
        for e in (a, b):
            _check_fits(e, d)
        self.d = self.t = d

    def conversions(self):
        return [] if self.const else super().conversions()

    def known(self):
        return {"float-floordiv"} if self.op in ("floordiv", "mod") and not self.const \
            and self.t.is_float else set()

    def render(self):
        a, b = self.args
        return f"({a.render()} {SYMBOL[self.op]} {b.render()})"

    def ev(self, blk):
        if self.const:
            return TV(np.asarray(self.value))
        return vector.binary(self.op, self.d, *self.operands(blk), blk.relaxed,
                             blk.profile.contract)


class TCmp(TOp):
    t = dtypes.bool_

    def __init__(self, pred: str, a, b):
        self.pred, self.args = pred, (a, b)
        self.shape = broadcast(a.shape, b.shape)
        if rules.is_weak(a.t) and rules.is_weak(b.t):
            raise Invalid("a comparison of two literals folds")
        d = rules.common(a.t, b.t, "cmp")
        for e in (a, b):
            if rules.is_weak(e.t) and d.is_int and not rules.literal_fits(e.value, d):
                if self.shape is not None:
                    raise Invalid("a tile comparison with a literal that does not fit")
                d = rules.promote(d, dtypes.i64)
        self.d = d

    def render(self):
        a, b = self.args
        return f"({a.render()} {SYMBOL[self.pred]} {b.render()})"

    def ev(self, blk):
        return vector.compare(self.pred, self.d, *self.operands(blk))


class TWhere(TOp):
    def __init__(self, cond, a, b):
        if cond.t is not dtypes.bool_ or cond.shape is None:
            raise Invalid("ft.where takes a bool tile")
        self.args = (a, b)
        self.cond = cond
        self.more = (cond,)
        self.shape = broadcast(cond.shape, a.shape, b.shape)
        self.d = self.t = rules.common(a.t, b.t, "select")
        for e in (a, b):
            _check_fits(e, self.d)

    def size(self):
        return super().size() + self.cond.size()

    def render(self):
        a, b = self.args
        return f"ft.where({self.cond.render()}, {a.render()}, {b.render()})"

    def ev(self, blk):
        return vector.where(self.cond.ev(blk), *self.operands(blk))


class TMath(TOp):
    """``ft.exp(t)``, ``math.sin(t)``, ``ft.maximum(a, b)``, ``a ** b``; of a scalar (a
    reduction's result, ``scalar=True``), the scalar rules: an integer goes to f64."""

    def __init__(self, fn: str, args: list, spelling: str, scalar: bool = False):
        self.fn, self.args, self.spelling = fn, tuple(args), spelling
        self.shape = broadcast(*(a.shape for a in args))
        if self.shape is None and not (scalar and len(args) == 1 and fn not in ("min", "max")):
            raise Invalid("scalar math in a tile kernel")
        if self.shape is None:
            if rules.is_weak(args[0].t):
                raise Invalid("math of a literal")
            self.d = rules.math_type([args[0].t])
        elif fn in ("min", "max"):
            self.d = rules.common(args[0].t, args[1].t, fn)
        else:
            d = rules.common(args[0].t, args[1].t, fn) if len(args) == 2 else \
                rules.strong(args[0].t)
            self.d = d if d.is_float else dtypes.f32
        for e in args:
            _check_fits(e, self.d)
        self.t = self.d

    def render(self):
        if self.spelling == "**":
            a, b = self.args
            return f"({a.render()} ** {b.render()})"
        return f"{self.spelling}({', '.join(a.render() for a in self.args)})"

    def ev(self, blk):
        vals = self.operands(blk)
        if self.fn in ("min", "max"):
            return vector.binary(self.fn, self.d, *vals)
        return vector.math_call(self.fn, self.d, vals, blk.profile)


class TUnary(TOp):
    def __init__(self, op: str, a):
        if a.shape is None:
            raise Invalid("unary scalar in a tile kernel")
        if op in ("neg", "abs") and a.t is dtypes.bool_:
            raise Invalid("- or abs of a bool tile")
        if op == "invert" and a.t.is_float:
            raise Invalid("~ of a float tile")
        self.op, self.args, self.shape, self.d = op, (a,), a.shape, a.t
        self.t = self.d

    def render(self):
        a = self.args[0].render()
        return {"neg": f"(-{a})", "invert": f"(~{a})", "abs": f"abs({a})"}[self.op]

    def ev(self, blk):
        return vector.unary(self.op, self.d, *self.operands(blk))


class TAstype(TOp):
    def __init__(self, a, d: DType):
        if a.shape is None:
            raise Invalid(".astype of a scalar")
        self.args, self.shape, self.d, self.t = (a,), a.shape, d, d

    def render(self):
        return f"{self.args[0].render()}.astype({fl_name(self.d)})"

    def ev(self, blk):
        return self.operands(blk)[0]


class TReduce(TExpr):
    """``ft.sum(t, axis, keepdims=...)`` (or ``t.max(axis)``), ``ft.argmax(t)``. With no axis
    (``axis=None``), or along the axis of a 1-d tile, the result is a scalar (``shape`` None;
    with keepdims, a tile of extents 1): the elements in row-major order, which ``argmax``'s
    flat index counts in."""

    def __init__(self, kind: str, a, axis: int | None, keepdims: bool, method: bool = False):
        if a.shape is None:
            raise Invalid("a reduction of a scalar")
        self.kind, self.args, self.axis, self.keepdims, self.method = kind, (a,), axis, \
            keepdims, method
        if axis is None:
            self.shape = (1,) * len(a.shape) if keepdims else None
        else:
            shape = list(a.shape)
            if keepdims:
                shape[axis] = 1
            else:
                del shape[axis]
            self.shape = tuple(shape) or None
        d = a.t
        if kind == "sum" and (d.is_bool or (d.is_int and d.bits < 32)):
            d = dtypes.i32
        self.t = dtypes.i32 if kind == "argmax" else d

    def size(self):
        return 1 + self.args[0].size()

    def conversions(self):
        if self.kind == "argmax":
            return []
        return [(self.args[0], self.t)] if self.t is not self.args[0].t else []

    def render(self):
        a = self.args[0].render()
        kd = "keepdims=True" if self.keepdims else ""
        args = ", ".join(x for x in ("" if self.axis is None else str(self.axis), kd) if x)
        if self.method:
            return f"{a}.{self.kind}({args})"
        return f"ft.{self.kind}({a}{', ' if args else ''}{args})"

    def ev(self, blk):
        a = self.args[0]
        x = a.ev(blk) if self.kind == "argmax" else \
            vector.convert(a.ev(blk), a.t, self.t, blk.relaxed)
        axis = self.axis
        if axis is None:  # every element, in row-major order
            x = TV(*(np.broadcast_to(v, x.v.shape).reshape(-1) for v in (x.v, x.e, x.bad)))
            axis = 0
        if self.kind == "argmax":
            r = vector.argmax(x)
        else:
            acc = (dtypes.f32 if self.t.bits < 32 else self.t) if self.t.is_float else None
            r = vector.reduce(self.kind, self.t, x, axis, acc)
        if self.keepdims:
            shape = self.shape
            r = TV(r.v.reshape(shape), r.e.reshape(shape), r.bad.reshape(shape))
        return r


class TShape(TExpr):
    """``ft.broadcast(t, shape)`` or ``t.T``."""

    def __init__(self, kind: str, a, shape: tuple | None = None):
        self.kind, self.args, self.t = kind, (a,), a.t
        if kind == "T":
            if a.shape is None or len(a.shape) != 2:
                raise Invalid(".T of a non-2-d tile")
            self.shape = a.shape[::-1]
        else:
            if a.shape is None or broadcast(a.shape, shape) != shape:
                raise Invalid("does not broadcast")
            self.shape = shape

    def size(self):
        return 1 + self.args[0].size()

    def render(self):
        a = self.args[0].render()
        return f"{a}.T" if self.kind == "T" else f"ft.broadcast({a}, {self.shape})"

    def ev(self, blk):
        x = self.args[0].ev(blk)
        if self.kind == "T":
            return TV(x.v.T, x.e.T, x.bad.T, np.transpose(x.p))
        return _spread(x, self.shape)


class TMma(TExpr):
    def __init__(self, a, b, acc, in_dtype: DType):
        self.args, self.shape, self.t, self.in_dtype = (a, b, acc), acc.shape, acc.t, in_dtype

    def size(self):
        return 1 + sum(a.size() for a in self.args)

    def render(self):
        return f"ft.mma({', '.join(a.render() for a in self.args)})"

    def ev(self, blk):
        a, b, acc = (e.ev(blk) for e in self.args)
        return vector.mma(a, b, acc, self.in_dtype, blk.profile)


# statements --------------------------------------------------------------------------------------

class TAssign(Stmt):
    def __init__(self, name: str, e):
        self.name, self.e = name, e

    def exprs(self):
        return [self.e]

    def render(self, pad):
        return [f"{pad}{self.name} = {self.e.render()}"]

    def ev(self, blk):
        v = self.e.ev(blk)
        blk.vars[self.name] = v if self.e.shape is None else _spread(v, self.e.shape)


class TFor(Stmt):
    """``for k in range(n)`` (``n`` a literal, or ``ft.cdiv(x.shape[axis], b)``)."""

    def __init__(self, var: str, n: int | None, body: list, cdiv: tuple | None = None):
        self.var, self.n, self.body, self.cdiv = var, n, body, cdiv

    def blocks(self):
        return [self.body]

    def render(self, pad):
        if self.cdiv:
            x, axis, b = self.cdiv
            bound = f"ft.cdiv({x}.shape[{axis}], {b})"
        else:
            bound = str(self.n)
        return [f"{pad}for {self.var} in range({bound}):"] + _block(self.body, pad)

    def ev(self, blk):
        if self.cdiv:
            x, axis, b = self.cdiv
            n = -(-blk.tensors[x].shape[axis] // b)
        else:
            n = self.n
        for k in range(n):
            blk.vars[self.var] = TV(np.asarray(k, dtype=np.int64))
            try:
                for s in self.body:
                    s.ev(blk)
            except ContinueSignal:
                continue
            except BreakSignal:
                break


class TIf(Stmt):
    """``if <scalar condition>:`` (a condition the error bound could flip: ``Block.decide``)."""

    def __init__(self, cond, body: list, orelse: list):
        self.cond, self.body, self.orelse = cond, body, orelse

    def exprs(self):
        return [self.cond]

    def blocks(self):
        return [self.body, self.orelse]

    def render(self, pad):
        lines = [f"{pad}if {self.cond.render()}:"] + _block(self.body, pad)
        if self.orelse:
            lines += [f"{pad}else:"] + _block(self.orelse, pad)
        return lines

    def ev(self, blk):
        for s in (self.body if blk.decide(self.cond.ev(blk)) else self.orelse):
            s.ev(blk)


class TStore(Stmt):
    """``out.store(t)``: the block's own tile, converted implicitly, clipped at the edge."""

    def __init__(self, out: str, dtype: DType, shape: tuple, e):
        self.out, self.dtype, self.shape, self.e = out, dtype, shape, e

    def exprs(self):
        return [self.e]

    def conversions(self):
        return [(self.e, self.dtype)]

    def render(self, pad):
        return [f"{pad}{self.out}.store({self.e.render()})"]

    def ev(self, blk):
        v = vector.convert(self.e.ev(blk), self.e.t, self.dtype, blk.relaxed)
        v = TV(np.broadcast_to(v.v, self.shape), np.broadcast_to(v.e, self.shape),
               np.broadcast_to(v.bad, self.shape))
        blk.vars[f"<stored {self.out}>"] = v


def _spread(x: TV, shape: tuple) -> TV:
    """``x`` broadcast to ``shape`` (its bounds and flags too)."""
    return TV(*(np.broadcast_to(a, shape).copy() for a in (x.v, x.e, x.bad, x.p)))
