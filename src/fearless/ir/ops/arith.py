"""Elementwise arithmetic: constants, binary and unary arithmetic, comparisons, casts, select.

Operands are scalars or, in tile kernels, tiles of one static shape (the op applies to every
element; a tile constant is a splat). Binary ops need operands of one type (the frontend inserts
``arith.cast`` by the promotion rules first). Integer division and modulo follow Python (floor)
semantics; ``arith.div`` is true division and only takes floats; ``arith.shr`` is arithmetic for
signed and logical for unsigned.

Each op's ``eval`` is its reference semantics (``opdef.Eval``; docs/semantics.md states them):
integer ops wrap; ``//`` and ``%`` floor like Python (a zero divisor gives 0 for integers, NumPy's
result for floats; f16/bf16 work in f32); shifts by the width or more (or a negative amount) give
0, or the sign for signed right shifts; conversions are ``dtypes.convert``; min/max of floats are
IEEE 754-2019 minimumNumber/maximumNumber. An eval is written once for both of its domains: the
operators and NumPy functions it calls wrap on NumPy integers and are exact on Python ints.
"""
from __future__ import annotations

import operator

import numpy as np

from fearless import dtypes
from fearless.dtypes import bool_, cast, int_range
from fearless.ir.opdef import Op, all_of, define, like_first
from fearless.ir.types import BOOL, Scalar, Tile

BINARY = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX,
          Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR)
UNARY = (Op.NEG, Op.NOT, Op.ABS)
PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
INT_ONLY = frozenset({Op.SHL, Op.SHR})
INT_OR_BOOL = frozenset({Op.AND, Op.OR, Op.XOR})
# the ops that take numbers, not bools (Python: True + True == 2)
NUMERIC = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX})


def _scalar_operands(op):
    for v in op.operands:
        if not isinstance(v.type, (Scalar, Tile)):
            return f"operand of type {v.type} is neither a scalar nor a tile"
    return None


def bool_like(t) -> Scalar | Tile:
    """The bool type of ``t``'s shape: BOOL for a scalar, a bool tile for a tile."""
    return Tile(bool_, t.shape) if isinstance(t, Tile) else BOOL


def _same_shape(a, b) -> bool:
    return getattr(a, "shape", None) == getattr(b, "shape", None)


def _binary_types(name):
    def check(op):
        a, b = op.operands
        if a.type != b.type:  # the result's type is the rule's (_same)
            return f"operand types differ: {a.type}, {b.type}"
        d = a.type.dtype
        if name in INT_ONLY and not d.is_int:
            return f"needs integers, got {d}"
        if name in INT_OR_BOOL and d.is_float:
            return f"needs integers or bools, got {d}"
        if name is Op.DIV and not d.is_float:
            return f"true division needs floats, got {d}"
        if name in NUMERIC and d.is_bool:
            return f"needs numbers, got {d}"
        return None
    return check


# reference semantics ------------------------------------------------------------------------

def minimum_number(a, b):
    """IEEE 754-2019 minimumNumber of float arrays: a NaN operand is ignored (NaN only when both
    are), and -0.0 is below +0.0. NumPy's fmin returns either zero, by operand order and SIMD
    path."""
    with np.errstate(invalid="ignore"):  # ml_dtypes' bf16 fmin warns on NaN
        out = np.fmin(a, b)
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), a, b), out).astype(out.dtype)


def maximum_number(a, b):
    """IEEE 754-2019 maximumNumber (see ``minimum_number``): +0.0 is above -0.0."""
    with np.errstate(invalid="ignore"):
        out = np.fmax(a, b)
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), b, a), out).astype(out.dtype)


def _operator(fn):
    """An op that is Python's operator ``fn``: NumPy's on arrays (which wraps integers at their
    width, IEEE 754 for floats), Python's own on Python numbers."""
    return lambda d, attrs, *args: fn(*args)


def _floor(fn):
    """``//`` or ``%`` by NumPy's rules, which are Python's (floor; the remainder takes the
    divisor's sign; CPython's float_divmod for floats). Integers: a zero divisor gives 0,
    INT_MIN // -1 wraps to INT_MIN (Python: ZeroDivisionError, no bound). Floats: a zero divisor
    gives a / b (``//``) or NaN (``%``); f16/bf16 are computed in f32 and rounded once."""
    def ev(d, attrs, a, b):
        if d is not None and d.is_float and d.bits < 32:
            return dtypes.convert(fn(np.asarray(a, np.float32), np.asarray(b, np.float32)), d)
        return fn(a, b)
    return ev


def _minmax(number, ints, python):
    """min/max: minimumNumber/maximumNumber (``number``) for floats, by value for integers
    (``ints`` on arrays, ``python`` on Python ints); on Python numbers with a float among them,
    the f64 result."""
    def ev(d, attrs, a, b):
        if d is None:
            if isinstance(a, float) or isinstance(b, float):
                return float(number(np.float64(a), np.float64(b)))
            return python(a, b)
        return number(a, b) if d.is_float else ints(a, b)
    return ev


def _shift(left: bool):
    """``<<``/``>>``: the amount taken as unsigned; by the width or more, 0 (or the sign, for a
    signed ``>>``). Python ints have no width: the exact shift (ValueError for a negative
    amount)."""
    def ev(d, attrs, a, b):
        if d is None:
            return a << b if left else a >> b
        amount = np.asarray(b).astype(np.uint64)
        big = amount >= d.bits
        safe = np.where(big, 0, amount).astype(a.dtype)
        if left:
            return np.where(big, np.zeros((), a.dtype), np.left_shift(a, safe)).astype(a.dtype)
        out = np.right_shift(a, safe)
        fill = np.where(a < 0, -1, 0).astype(a.dtype) if d.is_signed else np.zeros((), a.dtype)
        return np.where(big, fill, out).astype(a.dtype)
    return ev


def _not(d, attrs, a):
    """Bitwise not; on a bool, logical not (NumPy's; Python's ``~True`` is -2)."""
    return (not a) if isinstance(a, bool) else ~a


_PRED = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
         "gt": operator.gt, "ge": operator.ge}
_EVAL = {
    Op.ADD: _operator(operator.add), Op.SUB: _operator(operator.sub),
    Op.MUL: _operator(operator.mul), Op.DIV: _operator(operator.truediv),
    Op.FLOORDIV: _floor(operator.floordiv), Op.MOD: _floor(operator.mod),
    Op.MIN: _minmax(minimum_number, np.minimum, min),
    Op.MAX: _minmax(maximum_number, np.maximum, max),
    Op.AND: _operator(operator.and_), Op.OR: _operator(operator.or_),
    Op.XOR: _operator(operator.xor), Op.SHL: _shift(True), Op.SHR: _shift(False),
    Op.NEG: _operator(operator.neg), Op.ABS: _operator(abs), Op.NOT: _not,
}

for _name in BINARY:
    define(_name, f"elementwise {_name.base} of two scalars of one type",
           all_of(_scalar_operands, _binary_types(_name)), result=like_first, operands=2, results=1,
           eval=_EVAL[_name])


def _unary_types(name):
    def check(op):
        (a,) = op.operands
        if name in (Op.NEG, Op.ABS) and a.type.dtype.is_bool:
            return f"{name.base} needs a number"
        if name is Op.NOT and a.type.dtype.is_float:
            return "bitwise/logical not needs an integer or bool"
        return None
    return check


for _name in UNARY:
    define(_name, f"{_name.base} of a scalar",
           all_of(_scalar_operands, _unary_types(_name)), result=like_first, operands=1, results=1,
           eval=_EVAL[_name])


def _cmp(op):
    a, b = op.operands
    if a.type != b.type:
        return f"compares different types {a.type} and {b.type}"
    if op.attrs.get("pred") not in PREDICATES:
        return f"unknown predicate {op.attrs.get('pred')!r}"
    return None


define(Op.CMP, "compare two scalars of one type; attr pred in eq/ne/lt/le/gt/ge",
       all_of(_scalar_operands, _cmp), result=lambda ts, attrs: [bool_like(ts[0])],
       operands=2, results=1, eval=lambda d, attrs, a, b: _PRED[attrs["pred"]](a, b))


def _constant(op):
    t = op.result.type
    if not isinstance(t, (Scalar, Tile)):
        return "constant must be a scalar or a (splat) tile"
    value, d = op.attrs.get("value"), t.dtype
    python_type = bool if d.is_bool else int if d.is_int else float
    if type(value) is not python_type:
        return f"constant value {value!r} of a {d} constant is not a Python {python_type.__name__}"
    if d.is_int:
        lo, hi = int_range(d)
        return None if lo <= value <= hi else f"constant {value} does not fit {d}"
    if d.is_float and value == value and float(cast(value, d)) != value:
        return f"constant {value!r} is not a {d} value (round it once: dtypes.cast)"
    return None


define(Op.CONSTANT, "a scalar or splat-tile constant; attr value: the Python bool, int or "
       "float of the dtype (in range, exactly representable), which every backend emits as is",
       _constant, operands=0, results=1,
       eval=lambda d, attrs: np.asarray(cast(attrs["value"], d)))

define(Op.CAST, "convert a scalar or tile to the result's element type (numeric conversion)",
       all_of(_scalar_operands,
              lambda op: None if type(op.result.type) is type(op.operands[0].type)
              and _same_shape(op.result.type, op.operands[0].type) else "result changes shape"),
       operands=1, results=1, eval=lambda d, attrs, a: dtypes.convert(a, d))


def _select(op):
    c, a, b = op.operands
    if c.type != bool_like(a.type):
        return "condition must be bool (of the choices' shape)"
    if a.type != b.type:
        return "both choices need one type"
    return None


def _select_eval(d, attrs, c, a, b):
    return (a if c else b) if d is None else np.where(c, a, b).astype(d.numpy)


define(Op.SELECT, "cond ? a : b, evaluating both",
       all_of(_scalar_operands, _select),
       result=lambda ts, attrs: [ts[1]], operands=3, results=1, eval=_select_eval)

# every op of this module: the arithmetic the analyses look through
ARITH = frozenset((*BINARY, *UNARY, Op.CMP, Op.CONSTANT, Op.CAST, Op.SELECT))
