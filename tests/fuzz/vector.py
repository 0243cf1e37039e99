"""The reference semantics of tile operations, elementwise over NumPy arrays, with error bounds.

A ``TV`` holds a tile (or a 0-d scalar): ``v`` (float64 for float dtypes, the exact NumPy
integer dtype for integers, bool), ``e`` (the error bound, as in ``scalar``) and ``bad`` (the
elements not checked: undefined behaviour, or a decision an error bound could flip). Floats are
computed in f64 and rounded once to their dtype by ``fround`` (``np.rint``: ties to even), as
``scalar.fround`` does for one value; the same double-rounding argument makes + - * / and sqrt
exact. Integer arrays wrap as NumPy's do.
"""
from __future__ import annotations

import math

import numpy as np

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules, scalar
from tests.fuzz.scalar import FORMATS, MAX_FINITE, UNIT


class TV:
    """``p``: as ``scalar.Val.prod``, the rounding error of the product this value is (0
    unless it came from a float multiplication and the profile allows fma contraction)."""

    __slots__ = ("v", "e", "bad", "p")

    def __init__(self, v, e=None, bad=None, p=0.0):
        self.v = np.asarray(v)
        self.e = np.zeros(self.v.shape) if e is None else np.asarray(e, dtype=np.float64)
        self.bad = np.zeros(self.v.shape, bool) if bad is None else np.asarray(bad)
        self.p = p


def fround(x: np.ndarray, d: DType) -> np.ndarray:
    """``x`` (float64) rounded elementwise to float dtype ``d``."""
    x = np.asarray(x, dtype=np.float64)
    if d.name == "f64":
        return x
    p, emin, _ = FORMATS[d.name]
    with np.errstate(all="ignore"):
        finite = np.isfinite(x) & (x != 0)
        e = np.frexp(np.where(finite, x, 1.0))[1]
        q = np.maximum(e - 1, emin) - (p - 1)
        y = np.ldexp(np.rint(np.ldexp(np.where(finite, x, 1.0), -q)), q)
        y = np.where(np.abs(y) > MAX_FINITE[d.name], np.copysign(np.inf, x), y)
        y = np.where(y == 0, np.copysign(0.0, x), y)
    return np.where(finite, y, x)


def ulp(d: DType, x: np.ndarray) -> np.ndarray:
    p, emin, _ = FORMATS[d.name]
    with np.errstate(all="ignore"):
        e = np.frexp(np.where(np.isfinite(x) & (x != 0), x, 1.0))[1] - 1
    return np.where(np.isfinite(x), np.ldexp(1.0, np.maximum(e, emin) - p + 1), np.inf)


def settle(d: DType, r: np.ndarray, e: np.ndarray, bad: np.ndarray) -> TV:
    """A float result with error bound ``e`` before its own rounding (see scalar.settle)."""
    with np.errstate(all="ignore"):
        grows = e > 0
        bad = bad | (grows & (~np.isfinite(r) | (np.abs(r) + e >= MAX_FINITE[d.name])))
        e = np.where(grows, e + ulp(d, np.abs(r) + e), 0.0)
    return TV(r, e, bad)


def literal(value, d: DType) -> TV:
    return TV(np.asarray(scalar.literal(value, d), dtype=_np(d)))


def _np(d: DType):
    return np.float64 if d.is_float else d.numpy


def convert(x: TV, src, dst: DType, relaxed: frozenset = frozenset()) -> TV:
    """``x`` of type ``src`` (a dtype or a weak marker) as ``dst`` (casts and promotion)."""
    if rules.is_weak(src):
        return literal(x.v.item(), dst)
    if src is dst:
        return x
    v = x.v
    if dst.is_bool:
        return TV(v != 0, None, x.bad | ((x.e > 0) & (np.abs(v) <= x.e)) if src.is_float
                  else x.bad)
    if src.is_bool:
        return TV(v.astype(_np(dst)), None, x.bad)
    if dst.is_int:
        if src.is_int:
            return TV(v.astype(dst.numpy), None, x.bad)
        lo, hi = rules.int_range(dst)
        with np.errstate(all="ignore"):
            t = np.trunc(v)
            out = ~np.isfinite(v) | (t < lo) | (t > hi)
            flips = (x.e > 0) & (np.trunc(v - x.e) != np.trunc(v + x.e))
        # out of range: saturate, NaN -> 0 (Python floats: NumPy's would compare 2**64 - 1
        # as a float and let 2.0**64 through)
        ints = [0 if k != k else lo if k < lo else hi if k > hi else int(k)
                for k in np.ravel(t).tolist()]
        bad = x.bad | flips | (False if "float-int-cast" in relaxed else out)
        return TV(np.array(ints, dtype=dst.numpy).reshape(v.shape), None, bad)
    if src.is_int:
        flat = [scalar.fround_int(int(k), dst) for k in v.flat]
        return TV(np.array(flat, dtype=np.float64).reshape(v.shape), None, x.bad)
    r = fround(v, dst)
    if (x.e > 0).any():
        return settle(dst, r, x.e, x.bad)
    return TV(r, None, x.bad, x.p if dst.bits > src.bits else 0.0)


def binary(op: str, d: DType, a: TV, b: TV, relaxed: frozenset = frozenset(),
           contract: bool = False) -> TV:
    """``a <op> b``, both already of dtype ``d`` (they broadcast); ``contract``: the backend
    may fuse a product into a following add (``TV.p``)."""
    bad = a.bad | b.bad
    x, y = np.broadcast_arrays(a.v, b.v)
    with np.errstate(all="ignore"):
        if not d.is_float:
            return TV(*_int_binary(op, d, x, y, bad, relaxed))
        ea, eb = np.broadcast_arrays(a.e, b.e)
        if op in ("add", "sub"):
            e = ea + eb + a.p + b.p
            return settle(d, fround(x + y if op == "add" else x - y, d), e, bad)
        if op == "mul":
            r = settle(d, fround(x * y, d), np.abs(x) * eb + np.abs(y) * ea + ea * eb, bad)
            r.p = np.abs(x * y) * UNIT[d.name] if contract else 0.0
            return r
        if op == "div":
            r = fround(x / y, d)
            near = (eb > 0) & (np.abs(y) <= eb)
            e = np.where(near, 0.0, (ea + np.abs(r) * eb) / np.where(near, 1.0, np.abs(y) - eb))
            return settle(d, r, e, bad | near)
        if op in ("floordiv", "mod"):  # unchecked where the error could cross a step
            fn = np.floor_divide if op == "floordiv" else np.remainder
            # in the operands' precision (f16/bf16 in f32, rounded once): an f32 quotient
            # beyond 2**24 differs from the f64 one (fuzz seed 32682)
            r = fround(fn(x.astype(np.float32), y.astype(np.float32)) if d.bits <= 32
                       else fn(x, y), d)
            q = x / y
            inexact = (ea > 0) | (eb > 0)
            eq = np.where(np.abs(y) > eb, (ea + np.abs(q) * eb) / (np.abs(y) - eb), np.inf)
            step = inexact & (~np.isfinite(q) | ~np.isfinite(eq) |
                              (np.floor(q - 2 * eq) != np.floor(q + 2 * eq)))
            if op == "floordiv":
                return TV(r, None, bad | step)
            return settle(d, r, np.where(inexact, ea + np.abs(np.floor(q)) * eb, 0.0),
                          bad | step)
        if op in ("min", "max"):  # IEEE minimumNumber/maximumNumber: NaN ignored, -0 < +0
            r = np.fmin(x, y) if op == "min" else np.fmax(x, y)
            zeros = (x == 0) & (y == 0)
            pick_neg = (np.signbit(x) | np.signbit(y)) if op == "min" else \
                (np.signbit(x) & np.signbit(y))
            r = np.where(zeros, np.where(pick_neg, -0.0, 0.0), r)
            e = np.where(np.isnan(x), eb, np.where(np.isnan(y), ea, np.maximum(ea, eb)))
            return TV(r, e, bad)
    raise AssertionError(op)


def _int_binary(op, d, x, y, bad, relaxed):
    """Integer ops; where a guard is lifted (``relaxed``), the README's rule (see scalar)."""
    if op in ("floordiv", "mod"):
        zero = y == 0
        undefined = zero | (x < 0) | (y < 0)
        safe = np.where(zero, 1, y).astype(x.dtype)
        r = np.floor_divide(x, safe) if op == "floordiv" else np.remainder(x, safe)
        r = np.where(zero, 0, r).astype(x.dtype)
        return r, None, bad if "int-div" in relaxed else bad | undefined
    if op in ("shl", "shr"):
        big = (y < 0) | (y >= d.bits)
        s = np.where(big, 0, y).astype(x.dtype)
        r = np.left_shift(x, s) if op == "shl" else np.right_shift(x, s)
        fill = np.where((x < 0) & (op == "shr"), -1, 0).astype(x.dtype)
        r = np.where(big, fill, r).astype(x.dtype)
        return r, None, bad if "shift" in relaxed else bad | big
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
          "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor}[op]
    if d.is_bool:
        fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    return fn(x, y).astype(x.dtype), None, bad


def compare(pred: str, d: DType, a: TV, b: TV) -> TV:
    x, y = np.broadcast_arrays(a.v, b.v)
    fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal}[pred]
    with np.errstate(invalid="ignore"):
        r = fn(x, y)
        e = a.e + b.e
        flips = (e > 0) & (np.abs(x - y) <= e) if d.is_float else False
    return TV(r, None, a.bad | b.bad | flips)


def where(c: TV, a: TV, b: TV) -> TV:
    cond = np.broadcast_to(c.v, np.broadcast_shapes(c.v.shape, a.v.shape, b.v.shape))
    return TV(np.where(cond, a.v, b.v), np.where(cond, a.e, b.e),
              c.bad | np.where(cond, a.bad, b.bad))


def unary(op: str, d: DType, a: TV) -> TV:
    if d.is_float:
        return TV(-a.v if op == "neg" else np.abs(a.v), a.e, a.bad, a.p if op == "neg" else 0.0)
    if op == "invert":
        return TV(~a.v, None, a.bad)
    with np.errstate(all="ignore"):
        return TV((-a.v if op == "neg" else np.abs(a.v)).astype(a.v.dtype), None, a.bad)


def math_call(fn: str, d: DType, args: list[TV], profile) -> TV:
    """``fn`` elementwise (see scalar.math_call and scalar._propagated for the bounds)."""
    xs = np.broadcast_arrays(*(a.v for a in args))
    errs = np.broadcast_arrays(*(a.e for a in args))
    bad = args[0].bad if len(args) == 1 else args[0].bad | args[1].bad
    with np.errstate(all="ignore"):
        center = scalar._NP[fn](*xs)
        r = fround(center, d)
        e = np.zeros(r.shape)
        for k, err in enumerate(errs):
            if not (err > 0).any():
                continue
            if fn in scalar.JUMPS:  # exact where one value over the interval
                lo, hi = scalar._NP[fn](xs[k] - err), scalar._NP[fn](xs[k] + err)
                bad = bad | ((err > 0) & ((lo != hi) | (np.signbit(lo) != np.signbit(hi))))
                continue
            if fn in scalar.STEPS:
                bad = bad | (err > 0)
                continue
            if fn in scalar.PERIODIC:
                bad = bad | (err > 0.25)
            if fn in scalar.THROUGH_ZERO:
                bad = bad | ((err > 0) & (np.abs(xs[k]) <= err))
            if fn == "lgamma":
                bad = bad | ((err > 0) & scalar.lgamma_turns(xs[k], err))
            if fn == "pow" and k == 1:
                bad = bad | scalar.pow_jumps(xs[0], xs[1], err)
            for sign in (-1, 1):
                moved = list(xs)
                moved[k] = xs[k] + sign * err
                y = scalar._NP[fn](*moved)
                bad = bad | (np.isnan(y) != np.isnan(center)) | (np.isinf(y) != np.isinf(center))
                if fn == "tan":
                    bad = bad | ((np.cos(moved[k]) > 0) != (np.cos(xs[k]) > 0))
                e = np.maximum(e, np.where(np.isfinite(y) & np.isfinite(center),
                                           np.abs(y - center), 0.0))
    if fn in scalar.EXACT_MATH:
        return settle(d, r, e, bad) if (e > 0).any() else TV(r, None, bad)
    exact = (center == 0) | ((xs[1] == 0) | (xs[0] == 1) if fn == "pow" else False)
    finite = np.isfinite(r) & ~(exact & (e == 0))  # an exact 0 (sin(0), log(1)), pow(x, 0)
    approx = np.where(finite, profile.math_ulps(d) * ulp(d, np.abs(r)), 0.0)
    if fn == "lgamma":  # scalar.lgamma_bound: the tile recipe's bounds on the GPU
        bounds = [scalar.lgamma_bound(profile, "tile", d, float(x), float(y)) if ok else 0.0
                  for x, y, ok in zip(np.ravel(xs[0]), np.ravel(r), np.ravel(finite))]
        approx = np.array([math.inf if b is None else b for b in bounds]).reshape(r.shape)
    own = np.where(e > 0, ulp(d, np.abs(r) + e), 0.0)
    return TV(r, e + approx + own, bad | (~finite & (e > 0)))


def reduce(kind: str, d: DType, a: TV, axis: int, acc: DType | None) -> TV:
    """sum/max/min along ``axis``: ``d`` the result dtype; a float sum accumulates in ``acc``
    (in any order: the bound is n * u * sum |x|) and rounds once to ``d``."""
    x = a.v
    bad = a.bad.any(axis=axis)
    if kind in ("max", "min") and d.is_bool:  # any / all: one sure True (False) decides
        decides = ((x if kind == "max" else ~x) & ~a.bad).any(axis=axis)
        return TV(x.max(axis=axis) if kind == "max" else x.min(axis=axis), None,
                  bad & ~decides)
    if kind in ("max", "min"):  # NaN ignored (all NaN: NaN), -0 < +0
        if not d.is_float:
            return TV(x.max(axis=axis) if kind == "max" else x.min(axis=axis), None, bad)
        with np.errstate(invalid="ignore"):
            nan = np.isnan(x)
            r = np.where(nan, -np.inf if kind == "max" else np.inf, x)
            r = r.max(axis=axis) if kind == "max" else r.min(axis=axis)
            if kind == "max":
                zero = np.where(((x == 0) & ~np.signbit(x)).any(axis=axis), 0.0, -0.0)
            else:
                zero = np.where(((x == 0) & np.signbit(x)).any(axis=axis), -0.0, 0.0)
            r = np.where(nan.all(axis=axis), np.nan, np.where(r == 0, zero, r))
        return TV(r, a.e.max(axis=axis), bad)
    if not d.is_float:
        return TV(x.astype(d.numpy).sum(axis=axis, dtype=d.numpy), None, bad)
    n = x.shape[axis]
    with np.errstate(all="ignore"):
        r = x.sum(axis=axis, initial=-0.0)  # addends all -0.0 sum to -0.0 (IEEE 754)
        # an infinite or NaN addend decides the sum in any order (inf, or NaN for a NaN or
        # infinities of both signs); finite addends may overflow in one order and not another
        finite = np.isfinite(x).all(axis=axis)
        mag = np.abs(x).sum(axis=axis)
        e = np.where(finite, a.e.sum(axis=axis) + n * UNIT[acc.name] * mag, 0.0)
        overflow = finite & (mag + e >= MAX_FINITE[acc.name])
        wide = fround(r, acc)
    return settle(d, fround(wide, d), e, bad | overflow | (finite & ~np.isfinite(e)))


def argmax(a: TV) -> TV:
    """The i32 index of the first maximum of the 1-d ``a``. A NaN is ignored, as ``ft.max``
    ignores it, so that the index holds ``ft.max``'s value, and an all-NaN tile gives 0
    (docs/semantics.md); unchecked where error bounds could make another element the largest."""
    x, e = a.v, np.broadcast_to(a.e, a.v.shape)
    bad = bool(a.bad.any())
    if x.dtype.kind != "f":
        return TV(np.asarray(np.argmax(x), dtype=np.int32), None, bad)
    nan = np.isnan(x)
    if nan.all():
        return TV(np.asarray(0, dtype=np.int32), None, bad)
    y = np.where(nan, -np.inf, x)
    top = (y == y.max()) & ~nan
    k = int(np.argmax(top))
    if (e > 0).any():
        with np.errstate(invalid="ignore"):
            close = ~nan & (np.abs(y - y[k]) <= e + e[k])
        close[k] = False
        bad = bad or bool(close.any())
    return TV(np.asarray(k, dtype=np.int32), None, bad)


def _tf32(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        finite = np.isfinite(x) & (x != 0)
        e = np.frexp(np.where(finite, x, 1.0))[1]
        y = np.ldexp(np.rint(np.ldexp(np.where(finite, x, 1.0), 11 - e)), e - 11)
    return np.where(finite, y, x)


def mma(a: TV, b: TV, acc: TV, in_dtype: DType, profile) -> TV:
    """acc + a @ b (docs/semantics.md): f32 inputs rounded to TF32 first, products exact in
    f64, the accumulation in any order, bounded by (k + 2) * u * (sum |a||b| + |acc|)."""
    k = a.v.shape[1]
    x, y = a.v, b.v
    if in_dtype is dtypes.f32:  # f32 inputs are rounded to TF32 (11 significant bits, RNE)
        x, y = _tf32(x), _tf32(y)
    with np.errstate(all="ignore"):
        r = x @ y + acc.v
        mag = np.abs(x) @ np.abs(y)
        u = UNIT["f64" if in_dtype is dtypes.f64 else "f32"]
        e = (k + 2) * u * (mag + np.abs(acc.v)) + np.abs(a.v) @ b.e + a.e @ np.abs(b.v) + acc.e
    out_d = dtypes.f64 if in_dtype is dtypes.f64 else dtypes.f32
    bad = acc.bad | a.bad.any(axis=1, keepdims=True) | b.bad.any(axis=0, keepdims=True)
    return settle(out_d, fround(r, out_d), e, bad)
