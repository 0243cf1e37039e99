"""The reference semantics of the scalar ops (arith.*, math.*), one rule per op, on lane vectors.

Every rule takes the operands as NumPy arrays (one element per lane, or 0-d; tiles in tile
kernels) and the op, and returns the result array. docs/semantics.md is the definition they
implement and the GPU lowerings follow: integer ops wrap; ``//`` and ``%`` floor like Python (a
zero divisor gives 0 for integers, NumPy's result for floats; f16/bf16 work in f32); shifts by the
width or more (or a negative amount) give 0, or the sign for signed right shifts; conversions are
``dtypes.convert``; min/max are IEEE 754-2019 minimumNumber/maximumNumber; math functions are
computed in f64 and rounded once to the operand type.
"""
from __future__ import annotations

import math

import numpy as np

from fearless import dtypes
from fearless.ir.types import Scalar


def _dtype(op):
    return op.results[0].type.dtype.numpy


def _shift(left: bool):
    def rule(op, a, b):
        d = op.operands[0].type.dtype
        bits = d.bits
        amount = np.asarray(b).astype(np.uint64)
        big = amount >= bits
        safe = np.where(big, 0, amount).astype(a.dtype)
        if left:
            out = np.left_shift(a, safe)
            return np.where(big, np.zeros((), a.dtype), out).astype(a.dtype)
        out = np.right_shift(a, safe)
        fill = np.where(a < 0, -1, 0).astype(a.dtype) if d.is_signed else np.zeros((), a.dtype)
        return np.where(big, fill, out).astype(a.dtype)
    return rule


def _cast(op, a):
    return dtypes.convert(a, op.results[0].type.dtype)


def _float_rule(fn):
    """A math rule: computed in f64 (exact for every narrower operand) and rounded once, so that
    f16/bf16/f32 results are correctly rounded but for NumPy's f64 error (under an f64 ulp)."""
    def rule(op, *args):
        work = [np.asarray(x).astype(np.float64) for x in args]
        with np.errstate(all="ignore"):
            return dtypes.convert(np.asarray(fn(*work), np.float64), op.results[0].type.dtype)
    return rule


def _pow(x, y):
    """C's ``pow`` (docs/semantics.md). NumPy's ``power`` takes a square root when the exponent
    is the scalar 0.5, or an array of it with stride 0 (a broadcast), and ``sqrt`` differs from
    ``pow`` at -inf (NaN, not +inf) and -0.0 (-0.0, not +0.0): the exponent is copied into an
    array of at least one element, which takes NumPy's ``pow`` loop."""
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    x1, y1 = (np.broadcast_to(v, shape).reshape(shape or (1,)) for v in (x, y))
    return np.power(x1, y1.copy()).reshape(shape)  # a copy: fresh strides, never 0


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.asarray(x).dtype)


def _erfc(x):
    return np.vectorize(math.erfc, otypes=[np.float64])(x).astype(np.asarray(x).dtype)


def minimum_number(a, b):
    """IEEE 754-2019 minimumNumber: a NaN operand is ignored (NaN only when both are), and -0.0
    is below +0.0. NumPy's fmin returns either zero, by operand order and SIMD path."""
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


def _minmax(fn_float, fn_int):
    def rule(op, a, b):
        return (fn_float if op.results[0].type.dtype.is_float else fn_int)(a, b)
    return rule


def _floor_rule(fn):
    """``//`` or ``%`` by NumPy's rules, which are Python's (floor; the remainder takes the
    divisor's sign). Integers: a zero divisor gives 0, INT_MIN // -1 wraps to INT_MIN. Floats: a
    zero divisor gives a / b (``//``) or NaN (``%``); f16/bf16 are computed in f32, rounded once."""
    def rule(op, a, b):
        d = op.results[0].type.dtype
        with np.errstate(all="ignore"):
            if d.is_float and d.bits < 32:
                return dtypes.convert(fn(np.asarray(a, np.float32), np.asarray(b, np.float32)), d)
            return np.asarray(fn(a, b)).astype(d.numpy)
    return rule


ARITH = {
    "arith.add": lambda op, a, b: np.add(a, b, dtype=_dtype(op)),
    "arith.sub": lambda op, a, b: np.subtract(a, b, dtype=_dtype(op)),
    "arith.mul": lambda op, a, b: np.multiply(a, b, dtype=_dtype(op)),
    "arith.div": lambda op, a, b: np.true_divide(a, b).astype(_dtype(op)),
    "arith.floordiv": _floor_rule(np.floor_divide),
    "arith.mod": _floor_rule(np.remainder),
    "arith.min": _minmax(minimum_number, np.minimum),
    "arith.max": _minmax(maximum_number, np.maximum),
    "arith.and": lambda op, a, b: np.bitwise_and(a, b),
    "arith.or": lambda op, a, b: np.bitwise_or(a, b),
    "arith.xor": lambda op, a, b: np.bitwise_xor(a, b),
    "arith.shl": _shift(True),
    "arith.shr": _shift(False),
    "arith.neg": lambda op, a: np.negative(a).astype(_dtype(op)),
    "arith.not": lambda op, a: np.invert(a),
    "arith.abs": lambda op, a: np.abs(a).astype(_dtype(op)),
    "arith.cmp": lambda op, a, b: {"eq": np.equal, "ne": np.not_equal, "lt": np.less,
                                   "le": np.less_equal, "gt": np.greater,
                                   "ge": np.greater_equal}[op.attrs["pred"]](a, b),
    "arith.cast": _cast,
    "arith.select": lambda op, c, a, b: np.where(c, a, b).astype(_dtype(op)),
}

_NUMPY_MATH = {
    "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "erf": _erf, "erfc": _erfc, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "fabs": np.fabs, "cbrt": np.cbrt, "pow": _pow,
    "rsqrt": lambda x: 1 / np.sqrt(x), "atan2": np.arctan2, "hypot": np.hypot,
    "copysign": np.copysign, "fmod": np.fmod,
}

MATH = {f"math.{name}": _float_rule(fn) for name, fn in _NUMPY_MATH.items()}
MATH.update({
    "math.isnan": lambda op, a: np.isnan(np.asarray(a, np.float32) if a.dtype.itemsize < 4 else a),
    "math.isinf": lambda op, a: np.isinf(np.asarray(a, np.float32) if a.dtype.itemsize < 4 else a),
    "math.isfinite": lambda op, a: np.isfinite(np.asarray(a, np.float32)
                                               if a.dtype.itemsize < 4 else a),
})


def constant(op):
    t: Scalar = op.results[0].type
    return np.asarray(dtypes.cast(op.attrs["value"], t.dtype))
