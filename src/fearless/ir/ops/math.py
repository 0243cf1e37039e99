"""Math functions on floats (``math.<fn>``): libdevice / NVVM on the GPU, NumPy on the CPU.

Operands (scalars, or tiles in tile kernels) and result share one float type (f16/bf16 operands are
computed in f32 by the backends and rounded back, which gives the correctly rounded result for
these functions' inputs), but for ``math.ldexp``'s i32 exponent (``OpDef.operand_kinds``).
``math.isnan``/``isinf``/``isfinite`` return bool.

Each op's ``eval`` (its reference semantics, docs/semantics.md) is its row below: the function's
f64 value (NumPy's, C's through Python's math module, or for erfinv, which neither has, ours),
rounded once to the operand type.
"""
from __future__ import annotations

import math

import numpy as np

from fearless import dtypes
from fearless.ir.opdef import Op, define, like_first
from fearless.ir.ops.arith import bool_like
from fearless.ir.types import Scalar, Tile


def _pow(x, y):
    """C's ``pow`` (docs/semantics.md). NumPy's ``power`` takes a square root when the exponent
    is the scalar 0.5, or an array of it with stride 0 (a broadcast), and ``sqrt`` differs from
    ``pow`` at -inf (NaN, not +inf) and -0.0 (-0.0, not +0.0): the exponent is copied into an
    array of at least one element, which takes NumPy's ``pow`` loop."""
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    x1, y1 = (np.broadcast_to(v, shape).reshape(shape or (1,)) for v in (x, y))
    return np.power(x1, y1.copy()).reshape(shape)  # a copy: fresh strides, never 0


def _elementwise(fn):
    """A function of Python's math module on f64 arrays (NumPy lacks it)."""
    return np.vectorize(fn, otypes=[np.float64])


def _lgamma(x: float) -> float:
    """C's ``lgamma``: Python's, with +inf at the poles (0 and the negative integers) and past
    the largest float, where Python raises."""
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


_erf, _erfc = _elementwise(math.erf), _elementwise(math.erfc)


def _erfinv(x):
    """The inverse error function on f64 arrays (NumPy and Python lack it): Winitzki's
    approximation (S. Winitzki, "A handy approximation for the error function and its
    inverse", 2008; relative error below 2e-3), then three steps of Halley's method on
    ``erf(y) = |x|``, each of which cubes the relative error: Python's erf, or for
    ``|x| > 1/2`` its erfc against the exact ``1 - |x|``, which keeps the digits near 1 (the
    result is within about 2 f64 ulps). +-1 gives +-inf, ``|x| > 1`` NaN, the sign is x's."""
    a = np.abs(x)
    log = np.log1p(-a) + np.log1p(a)  # ln(1 - x^2), accurate near |x| = 1
    c = 2 / (math.pi * 0.147) + log / 2
    y = np.sqrt(np.sqrt(c * c - log / 0.147) - c)
    tail = a > 0.5
    for _ in range(3):
        residual = np.where(tail, (1 - a) - _erfc(y), _erf(y) - a)
        step = residual / (2 / math.sqrt(math.pi) * np.exp(-y * y))
        y = y - step / (1 + y * step)
    y = np.where(a == 1, math.inf, np.where(a > 1, math.nan, y))
    return np.where(a == 0, x, np.copysign(y, x))


# the f64 reference of each function: NumPy's ufunc, or Python's math module elementwise
UNARY_F64 = {
    Op.SQRT: np.sqrt, Op.EXP: np.exp, Op.EXP2: np.exp2, Op.EXPM1: np.expm1, Op.LOG: np.log,
    Op.LOG2: np.log2, Op.LOG10: np.log10, Op.LOG1P: np.log1p, Op.SIN: np.sin, Op.COS: np.cos,
    Op.TAN: np.tan, Op.ASIN: np.arcsin, Op.ACOS: np.arccos, Op.ATAN: np.arctan,
    Op.SINH: np.sinh, Op.COSH: np.cosh, Op.TANH: np.tanh, Op.ASINH: np.arcsinh,
    Op.ACOSH: np.arccosh, Op.ATANH: np.arctanh, Op.ERF: _erf,
    Op.ERFC: _erfc, Op.ERFINV: _erfinv, Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.TRUNC: np.trunc,
    Op.FABS: np.fabs, Op.CBRT: np.cbrt, Op.RSQRT: lambda x: 1 / np.sqrt(x), Op.RINT: np.rint,
    Op.LGAMMA: _elementwise(_lgamma),
}
BINARY_F64 = {Op.POW: _pow, Op.ATAN2: np.arctan2, Op.HYPOT: np.hypot,
              Op.COPYSIGN: np.copysign, Op.FMOD: np.fmod}
PREDICATE_F64 = {Op.ISNAN: np.isnan, Op.ISINF: np.isinf, Op.ISFINITE: np.isfinite}
UNARY, BINARY, PREDICATES = tuple(UNARY_F64), tuple(BINARY_F64), tuple(PREDICATE_F64)
MATH = (*UNARY, *BINARY, *PREDICATES, Op.LDEXP)  # every op of this module
# the functions the Tile IR lowering has no rule for: SIMT kernels only (track "simt"), so tile
# kernels refuse them (passes/tile_subset.py) on every backend
_NO_TILE = frozenset({
    Op.LOG10, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH, Op.ATANH,
    Op.TRUNC, Op.ISNAN, Op.ISINF, Op.ISFINITE})


def _rounded(fn):
    """The eval of a math function: ``fn`` computed in f64 (exact for every narrower operand)
    and rounded once, so that f16/bf16/f32 results are correctly rounded but for the f64 error
    (under an f64 ulp). Python numbers (dtype None) give a Python float."""
    def ev(d, attrs, *args):
        work = [np.asarray(x).astype(np.float64) for x in args]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*work), np.float64)
        return out.item() if d is None else dtypes.convert(out, d)
    return ev


def _exp2(d, attrs, x):
    """exp2 rounded once; with the ``flush_to_zero`` attribute (``ft.exp2(x,
    flush_to_zero=True)``) a result below 2**-126, the smallest normal f32, is 0, as the GPU's
    ``ex2.approx.ftz`` gives (its inputs' subnormals flush to 0 too: exp2 of them is 1 anyway)."""
    out = _rounded(np.exp2)(d, attrs, x)
    if not attrs.get("flush_to_zero"):
        return out
    tiny = np.abs(np.asarray(out, np.float64)) < 2.0 ** -126
    if d is None:                   # a Python float (constant folding of literals)
        return 0.0 if tiny else out
    return np.where(tiny, np.zeros_like(out), out)


def _predicate_eval(fn):
    def ev(d, attrs, a):
        x = np.asarray(a)
        return fn(x.astype(np.float32) if x.dtype.itemsize < 4 else x)  # bf16 has no isnan
    return ev


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


def _users(op: Op) -> tuple[tuple[str, str], ...]:
    """What kernels call for ``op``: the math module's function, NumPy's ufunc, and
    ``fearless.math``'s for those the two lack (the frontend keeps those that exist; rsqrt is
    ``ft.rsqrt`` only)."""
    fn = op.base
    return () if op is Op.RSQRT else (("math", fn), ("np", _NUMPY.get(fn, fn)), ("fl.math", fn))


def _track(op: Op) -> str:
    return "simt" if op in _NO_TILE else "both"


def _ldexp_types(op):
    x, n = op.operands
    if not (isinstance(x.type, (Scalar, Tile)) and x.type.dtype.is_float):
        return f"operand of type {x.type} is not a float"
    return None if n.type == _like(x.type, dtypes.i32) else f"the exponent is {n.type}, not i32"


def _like(t, d):
    return Tile(d, t.shape) if isinstance(t, Tile) else Scalar(d)


def _ldexp(d, attrs, x, n):
    """``x * 2**n`` rounded once (C's ``ldexp``: exact unless it leaves the normal range): in
    f64, which holds every narrower result exactly but for those that round to 0 anyway."""
    with np.errstate(all="ignore"):
        out = np.ldexp(np.asarray(x).astype(np.float64), np.asarray(n).astype(np.int32))
    return out.item() if d is None else dtypes.convert(out, d)


# the result types are the rules' (like_first, _predicate), which the verifier checks
for _op, _f64 in UNARY_F64.items():
    define(_op, f"{_op.base}(x) for a float x", _floats, result=like_first, operands=1,
           results=1, track=_track(_op), user_names=_users(_op),
           eval=_exp2 if _op is Op.EXP2 else _rounded(_f64))
for _op, _f64 in BINARY_F64.items():
    define(_op, f"{_op.base}(x, y) for floats of one type", _floats, result=like_first,
           operands=2, results=1, track=_track(_op), user_names=_users(_op),
           eval=_rounded(_f64))
for _op, _f64 in PREDICATE_F64.items():
    define(_op, f"{_op.base}(x) -> bool for a float x", _floats, result=_predicate,
           operands=1, results=1, track=_track(_op), user_names=_users(_op),
           eval=_predicate_eval(_f64))
define(Op.LDEXP, "ldexp(x, n) = x * 2**n for a float x and an i32 n (the frontend saturates a "
       "wider integer: the result is the same)", _ldexp_types, result=like_first, operands=2,
       results=1, operand_kinds=("float", "i32"), track=_track(Op.LDEXP),
       user_names=_users(Op.LDEXP), eval=_ldexp)
