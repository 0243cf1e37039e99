"""NumPy semantics of the scalar ops (arith.*, math.*), one rule per op, on lane vectors.

Every rule takes the operands as NumPy arrays (one element per lane, or 0-d) and the op, and
returns the result array. They match the GPU lowering: integer ops wrap, shifts by the width or
more give 0 (or the sign for signed right shifts), float -> int casts saturate and send NaN to 0,
min/max return the non-NaN operand, f16/bf16 math is computed in f32 and rounded once.
"""
from __future__ import annotations

import math

import numpy as np

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
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    a = np.asarray(a)
    if not (src.is_float and dst.is_int):
        return a.astype(dst.numpy)
    # like cvt.rzi.sat: truncate, saturate at the limits, NaN -> 0
    info = np.iinfo(dst.numpy)
    x = a.astype(np.float64)
    hi, lo, nan = x >= float(info.max), x <= float(info.min), np.isnan(x)
    out = np.trunc(np.where(hi | lo | nan, 0.0, x)).astype(dst.numpy)
    out = np.where(hi, np.asarray(info.max, dst.numpy), out)
    return np.where(lo, np.asarray(info.min, dst.numpy), out)


def _float_rule(fn):
    """A math rule: compute in at least f32 (f16/bf16 are widened) and round once to the type."""
    def rule(op, *args):
        out_t = _dtype(op)
        work = [np.asarray(x).astype(np.float32) if np.asarray(x).dtype.itemsize < 4 else
                np.asarray(x) for x in args]
        return np.asarray(fn(*work)).astype(out_t)
    return rule


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.asarray(x).dtype)


def _erfc(x):
    return np.vectorize(math.erfc, otypes=[np.float64])(x).astype(np.asarray(x).dtype)


def _minmax(fn_float, fn_int):
    def rule(op, a, b):
        return (fn_float if op.results[0].type.dtype.is_float else fn_int)(a, b)
    return rule


def _mod(op, a, b):
    return np.remainder(a, b)


ARITH = {
    "arith.add": lambda op, a, b: np.add(a, b, dtype=_dtype(op)),
    "arith.sub": lambda op, a, b: np.subtract(a, b, dtype=_dtype(op)),
    "arith.mul": lambda op, a, b: np.multiply(a, b, dtype=_dtype(op)),
    "arith.div": lambda op, a, b: np.true_divide(a, b).astype(_dtype(op)),
    "arith.floordiv": lambda op, a, b: np.floor_divide(a, b).astype(_dtype(op)),
    "arith.mod": lambda op, a, b: _mod(op, a, b).astype(_dtype(op)),
    "arith.min": _minmax(np.fmin, np.minimum),
    "arith.max": _minmax(np.fmax, np.maximum),
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
    "trunc": np.trunc, "fabs": np.fabs, "cbrt": np.cbrt, "pow": np.power,
    "rsqrt": lambda x: 1 / np.sqrt(x), "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "fmod": np.fmod,
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
    return np.asarray(op.attrs["value"]).astype(t.dtype.numpy)
