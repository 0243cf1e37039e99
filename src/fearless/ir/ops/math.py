"""Math functions on floats (``math.<fn>``), lowered to libdevice / NVVM on the GPU and NumPy on CPU.

Operands (scalars, or tiles in tile kernels) and result share one float type (f16/bf16 operands are computed in f32 by the backends
and rounded back, which gives the correctly rounded result for these functions' inputs).
``math.isnan``/``isinf``/``isfinite`` return bool.
"""
from __future__ import annotations

from fearless.ir.opdef import define, like_first
from fearless.ir.ops.arith import bool_like
from fearless.ir.types import Scalar, Tile

UNARY = ("sqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
         "asinh", "acosh", "atanh", "erf", "erfc", "floor", "ceil", "trunc", "fabs",
         "cbrt", "rsqrt")
BINARY = ("pow", "atan2", "hypot", "copysign", "fmod")
PREDICATES = ("isnan", "isinf", "isfinite")


def _floats(op):
    for v in op.operands:
        if not (isinstance(v.type, (Scalar, Tile)) and v.type.dtype.is_float):
            return f"operand of type {v.type} is not a float"
    if len({v.type for v in op.operands}) != 1:
        return "operands differ in type"
    return None


def _predicate(types, attrs) -> list:
    return [bool_like(types[0])]


# NumPy's spelling where it is not the math module's
_NUMPY = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
          "acosh": "arccosh", "atanh": "arctanh", "pow": "power", "atan2": "arctan2"}


def _users(fn: str) -> tuple[str, ...]:
    """What kernels call ``math.<fn>``: the math module's function and NumPy's ufunc (the
    frontend keeps those that exist; rsqrt is ``ft.rsqrt`` only)."""
    return () if fn == "rsqrt" else (f"math.{fn}", f"np.{_NUMPY.get(fn, fn)}")


# the result types are the rules' (like_first, _predicate), which the verifier checks
for _fn in UNARY:
    define(f"math.{_fn}", f"{_fn}(x) for a float x", _floats,
           result=like_first, operands=1, results=1, user_names=_users(_fn))
for _fn in BINARY:
    define(f"math.{_fn}", f"{_fn}(x, y) for floats of one type", _floats,
           result=like_first, operands=2, results=1, user_names=_users(_fn))
for _fn in PREDICATES:
    define(f"math.{_fn}", f"{_fn}(x) -> bool for a float x", _floats,
           result=_predicate, operands=1, results=1, user_names=_users(_fn))
