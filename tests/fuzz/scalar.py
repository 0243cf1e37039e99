"""The reference semantics of one scalar operation, in plain Python, with an error bound.

A value is a ``Val``: ``v`` is a Python bool, int (the exact integer, already wrapped to its
dtype) or float (an f64 holding a value exactly representable in its dtype); ``e`` bounds how far
a conforming backend may be from ``v`` (0: bit-exact); ``prod`` bounds the rounding error of
the product when the value came from a float multiplication (u * |a * b| in the product's
dtype): a backend that contracts ``a * b + c`` into one fma skips that rounding.

Floats are computed in f64 and rounded once to their dtype by ``fround`` (integer rounding with
``round``, ties to even). For f32/f16/bf16 operands the f64 result of + - * / and sqrt rounds
to the same value as the exact result would (53 >= 2p + 2), so these operations are exact here.
Math functions use NumPy's f64 functions and allow a few ulps of the result's dtype (``ULPS``).

Where an error bound could change a discrete outcome (a comparison, a float -> int cast, a
floor) the thread is marked ``uncertain`` and its outputs are not compared; where the language
does not define the result yet (see ``tests/fuzz/__init__.py``), the thread is marked
``undefined`` with the reason.
"""
from __future__ import annotations

import math

import numpy as np

from fearless import dtypes
from fearless.dtypes import DType
from tests.fuzz import rules

FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127),
           "f64": (53, -1022, 1023)}
MAX_FINITE = {n: (2 - 2.0 ** (1 - p)) * 2.0 ** emax for n, (p, _, emax) in FORMATS.items()}
UNIT = {n: 2.0 ** -p for n, (p, _, _) in FORMATS.items()}  # unit roundoff
EXACT_MATH = {"sqrt", "floor", "ceil", "trunc", "rint", "fabs", "copysign", "fmod", "isnan",
              "isinf", "isfinite"}
# With inexact arguments, the function's range over [x - e, x + e] is not at the endpoints:
PERIODIC = {"sin", "cos", "tan"}              # beyond a small e, anything (tan: poles)
STEPS = {"fmod", "atan2", "copysign"}  # jumps: unchecked
# non-decreasing step functions: exact where they are one value over the whole interval
JUMPS = {"floor", "ceil", "trunc", "rint"}
THROUGH_ZERO = {"cosh", "fabs", "hypot", "pow"}  # an extremum (or pole) where an argument is 0
LGAMMA_MIN = 1.4616321449683623  # lgamma's poles and turns are at x <= 0, and its minimum here


def lgamma_turns(x, e):
    """Whether lgamma has a pole or turns within [x - e, x + e] (arrays too)."""
    return (x - e <= 0) | ((x - e <= LGAMMA_MIN) & (LGAMMA_MIN <= x + e))


class Profile:
    """What a backend may do beyond exact rounding: ``contract`` a*b+c into an fma, and the
    ulps (of the result's dtype) each approximate math function may be off."""

    def __init__(self, name: str, contract: bool, ulps: dict):
        self.name, self.contract, self.ulps = name, contract, ulps

    def math_ulps(self, d: DType) -> float:
        return self.ulps[d.name]


# docs/semantics.md: the CPU rounds NumPy's f64 result once, as the reference does (one ulp
# allowed: NumPy's f64 functions may differ by an ulp between a scalar and a vectorised call);
# the GPU is held to CUDA's table (f32 <= 4 ulps, f64 <= 5) plus half an ulp, plus the
# reference's own half ulp; a 16-bit result is off by at most one of its ulps.
CPU = Profile("cpu", False, {"f16": 1.0, "bf16": 1.0, "f32": 1.0, "f64": 2.0})
GPU = Profile("gpu", True, {"f16": 1.0, "bf16": 1.0, "f32": 5.0, "f64": 6.0})


class Val:
    __slots__ = ("v", "e", "prod")

    def __init__(self, v, e: float = 0.0, prod: float = 0.0):
        self.v, self.e, self.prod = v, e, prod

    def __repr__(self):
        return f"Val({self.v!r}, e={self.e:g})" if self.e else f"Val({self.v!r})"


class Undefined(Exception):
    """Raised when a thread reaches behaviour the language does not define yet."""


class Thread:
    """Per-thread state of the reference: flags that decide whether its outputs are compared."""

    __slots__ = ("profile", "uncertain", "tags", "relaxed")

    def __init__(self, profile: Profile, relaxed: frozenset = frozenset()):
        self.profile = profile
        self.relaxed = relaxed  # options.GUARDS not applied: docs/semantics.md's rule there
        self.uncertain: str | None = None  # why the outputs cannot be checked
        self.tags: set = set()

    def doubt(self, why: str):
        """An error bound could flip a decision: the thread's outputs are not checked."""
        self.uncertain = self.uncertain or why

    def undefined(self, reason: str):
        raise Undefined(reason)


# rounding --------------------------------------------------------------------------------------

def wrap(v: int, d: DType) -> int:
    if d.is_bool:
        return bool(v)
    v &= (1 << d.bits) - 1
    if d.is_signed and v >> (d.bits - 1):
        v -= 1 << d.bits
    return v


def fround(x: float, d: DType) -> float:
    """``x`` rounded to the nearest value of float dtype ``d`` (ties to even; overflow -> inf)."""
    if d.name == "f64" or x != x or x == 0 or math.isinf(x):
        return x
    p, emin, _ = FORMATS[d.name]
    q = max(math.frexp(x)[1] - 1, emin) - (p - 1)
    y = math.ldexp(round(math.ldexp(x, -q)), q)
    if abs(y) > MAX_FINITE[d.name]:
        return math.copysign(math.inf, x)
    return y if y != 0 else math.copysign(0.0, x)


def fround_int(n: int, d: DType) -> float:
    """The integer ``n`` rounded once to float dtype ``d``."""
    if abs(n) < (1 << 53):
        return fround(float(n), d)
    p = FORMATS[d.name][0]
    m, shift = abs(n), abs(n).bit_length() - p
    q, rem = m >> shift, m & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if rem > half or (rem == half and q & 1):
        q += 1
    y = float(q << shift)
    if y > MAX_FINITE[d.name]:
        y = math.inf
    return -y if n < 0 else y


def ulp(d: DType, x: float) -> float:
    p, emin, _ = FORMATS[d.name]
    if x != x or math.isinf(x):
        return math.inf
    e = math.frexp(x)[1] - 1 if x else emin
    return math.ldexp(1.0, max(e, emin) - p + 1)


def settle(th: Thread, d: DType, r: float, e: float) -> Val:
    """A float result with error bound ``e`` before its own rounding."""
    if e > 0:
        if r != r or math.isinf(r) or abs(r) + e >= MAX_FINITE[d.name]:
            th.doubt("a result near overflow or not finite")
        e += ulp(d, abs(r) + e)
    return Val(r, e)


# conversions -----------------------------------------------------------------------------------

def literal(value, d: DType):
    """A Python literal as a constant of ``d`` (an int literal wraps, a float saturates; the
    frontend refuses a literal that does not fit where the conversion is implicit)."""
    if d.is_bool:
        return bool(value)
    if d.is_int:
        if isinstance(value, float):  # saturating, as every float -> int conversion
            lo, hi = rules.int_range(d)
            return 0 if value != value else lo if value <= lo else hi if value >= hi else \
                math.trunc(value)
        return wrap(int(value), d)
    if isinstance(value, bool) or isinstance(value, int):
        return fround_int(int(value), d)
    return fround(float(value), d)


def convert(th: Thread, x: Val, src, dst: DType) -> Val:
    """``x`` of type ``src`` (a dtype or a weak marker) converted to ``dst``: the semantics of a
    cast, of promotion and of implicit conversion on assignment alike."""
    if rules.is_weak(src):
        return Val(literal(x.v, dst))
    if src is dst:
        return x
    v = x.v
    if dst.is_bool:
        if src.is_float and x.e and abs(v) <= x.e:
            th.doubt("bool() of a value near 0")
        return Val(v != 0)
    if src.is_bool:
        return Val(int(v) if dst.is_int else float(v))
    if dst.is_int:
        if src.is_int:
            return Val(wrap(v, dst))
        return Val(float_to_int(th, x, dst))
    if src.is_int:
        if dst.name == "bf16" and abs(v) >= (1 << 8):
            th.tags.add("bf16<-wide")
        return Val(fround_int(v, dst))
    if dst.name == "bf16" and src.name == "f64":
        th.tags.add("bf16<-wide")
    r = fround(v, dst)
    if x.e:
        return settle(th, dst, r, x.e)
    return Val(r, 0.0, x.prod if dst.bits > src.bits else 0.0)


def float_to_int(th: Thread, x: Val, d: DType) -> int:
    v = x.v
    lo, hi = rules.int_range(d)
    if v != v or math.isinf(v) or not lo <= math.trunc(v) <= hi:
        th.tags.add("float->int out of range")
        if "float-int-cast" not in th.relaxed:
            th.undefined("float -> int cast of NaN, inf or a value out of range")
        return 0 if v != v else lo if v < 0 else hi  # saturate, NaN -> 0
    if x.e and not (math.isfinite(x.e) and math.trunc(v - x.e) == math.trunc(v + x.e)):
        th.doubt("an int cast near a boundary")
    return math.trunc(v)


def truth(th: Thread, x: Val, t) -> bool:
    if rules.is_weak(t):
        return bool(x.v)
    if t.is_float and x.e and abs(x.v) <= x.e:
        th.doubt("truth of a value near 0")
    return bool(x.v != 0) if not t.is_bool else x.v


# integer and float arithmetic -------------------------------------------------------------------

def _int_binary(th: Thread, op: str, d: DType, a: int, b: int):
    if op in ("floordiv", "mod"):
        if b == 0:
            th.tags.add("int div by zero")
            if "int-div" not in th.relaxed:
                th.undefined("integer division by zero")
            return 0  # docs/semantics.md: an integer division by zero gives 0
        if a < 0 or b < 0:
            th.tags.add("int div sign")
            if "int-div" not in th.relaxed:
                th.undefined("integer division or modulo of a negative operand")
        return wrap(a // b if op == "floordiv" else a % b, d)  # floor, as Python
    if op in ("shl", "shr"):
        if not 0 <= b < d.bits:
            th.tags.add("shift >= width")
            if "shift" not in th.relaxed:
                th.undefined("shift by a negative amount or by the width or more")
            # shifts by the width or more give 0 (the sign, shifting right a signed value); a
            # negative amount counts as a huge unsigned one
            return -1 if op == "shr" and a < 0 else 0
        return wrap(a << b, d) if op == "shl" else a >> b
    if d.is_bool:
        return {"and": a and b, "or": a or b, "xor": a != b}[op]
    return wrap({"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b),
                 "and": a & b, "or": a | b, "xor": a ^ b}[op], d)


def _ieee_div(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _float_floordiv_mod(th: Thread, op: str, a: float, b: float, d: DType) -> float:
    """Python's floor division and modulo (NumPy's, CPython's float_divmod) in the operands'
    precision, f32 for f16 and bf16 operands (docs/semantics.md). In f32 the algorithm's own
    division rounds, so a quotient beyond 2**24 can differ from the f64 one (fuzz seed 32682)."""
    th.tags.add("float //,%")
    if b == 0:
        th.tags.add("float //,% by zero")
    elif math.isinf(b):
        th.tags.add("float //,% by inf")
    if d.bits <= 32:
        with np.errstate(all="ignore"):
            fn = np.floor_divide if op == "floordiv" else np.remainder
            return float(fn(np.float32(a), np.float32(b)))
    if b == 0:
        return math.floor(_ieee_div(a, b)) if op == "floordiv" and not math.isnan(
            _ieee_div(a, b)) and not math.isinf(_ieee_div(a, b)) else (
            _ieee_div(a, b) if op == "floordiv" else math.nan)
    if math.isinf(a) or a != a or b != b:
        return math.nan
    return float(np.floor_divide(a, b) if op == "floordiv" else np.remainder(a, b))


def binary(th: Thread, op: str, d: DType, a: Val, b: Val) -> Val:
    """``a <op> b`` with both operands already of dtype ``d``."""
    if not d.is_float:
        return Val(_int_binary(th, op, d, a.v, b.v))
    x, y = a.v, b.v
    ea, eb = a.e, b.e
    if th.profile.contract and op in ("add", "sub"):
        for v in (a, b):
            if v.prod:
                th.tags.add("contractible")
        ea += a.prod
        eb += b.prod
    if op in ("add", "sub"):
        r = fround(x + y if op == "add" else x - y, d)
        return settle(th, d, r, ea + eb)
    if op == "mul":
        r = fround(x * y, d)
        e = abs(x) * eb + abs(y) * ea + ea * eb if (ea or eb) else 0.0
        out = settle(th, d, r, e)
        out.prod = abs(x * y) * UNIT[d.name] if th.profile.contract else 0.0
        return out
    if op == "div":
        r = fround(_ieee_div(x, y), d)
        if not (ea or eb) or (y == 0 and not eb and abs(x) > ea):
            return Val(r)  # exact, or an exact zero divisor and a numerator of known sign
        if abs(y) <= eb:
            th.doubt("a division by a value near 0")
            return Val(r, math.inf)
        return settle(th, d, r, (ea + abs(r) * eb) / (abs(y) - eb))
    if op in ("floordiv", "mod"):
        r = fround(_float_floordiv_mod(th, op, x, y, d), d)
        if not (ea or eb):
            return Val(r)
        q = _ieee_div(x, y)
        eq = (ea + abs(q) * eb) / (abs(y) - eb) if abs(y) > eb else math.inf
        if not (math.isfinite(q) and math.isfinite(eq)) or \
                math.floor(q - 2 * eq) != math.floor(q + 2 * eq):
            th.doubt("a float // or % of an inexact value near a step")
            return Val(r, math.inf)
        if op == "floordiv":
            return Val(r)
        return settle(th, d, r, ea + abs(math.floor(q)) * eb)
    if op in ("min", "max"):  # IEEE minimumNumber/maximumNumber: NaN ignored, -0 < +0
        th.tags.add(f"float {op}")
        if x != x or y != y:
            th.tags.add("nan min/max")
            return Val(y if x != x else x, eb if x != x else ea)
        key = (lambda v: (v, math.copysign(1.0, v)))
        r = min(x, y, key=key) if op == "min" else max(x, y, key=key)
        return Val(r, max(ea, eb))
    raise AssertionError(op)


def compare(th: Thread, pred: str, d: DType, a: Val, b: Val) -> bool:
    x, y = a.v, b.v
    if d.is_float and (a.e or b.e) and not (x != x or y != y) and abs(x - y) <= a.e + b.e:
        th.doubt("a comparison within the error bound")
    return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
            "ge": x >= y}[pred]


def unary(th: Thread, op: str, d: DType, a: Val) -> Val:
    """neg, abs or invert (``~``) of ``a``, already of dtype ``d``."""
    if d.is_float:
        r = -a.v if op == "neg" else abs(a.v)
        return Val(r, a.e, a.prod if op == "neg" else 0.0)
    if op == "invert":
        return Val((not a.v) if d.is_bool else wrap(~a.v, d))
    if d.name == "i16" and a.v == -32768:  # wraps to itself; nvJitLink 13.0 gives +32768 where
        th.tags.add("i16 -(-32768)")       # it is widened (classify.TOOLCHAIN_TAGS)
    return Val(wrap(-a.v if op == "neg" else abs(a.v), d))


# math functions --------------------------------------------------------------------------------

# NumPy's power takes sqrt for an exponent of 0.5 given as a scalar or a stride-0 array: NaN for
# (-inf) ** 0.5 and -0.0 for (-0.0) ** 0.5, where C's pow (and its array loop) give +inf and +0.0
_NP = {"sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
       "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos,
       "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
       "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
       "atanh": np.arctanh, "erf": np.vectorize(math.erf), "erfc": np.vectorize(math.erfc),
       "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "fabs": np.fabs, "cbrt": np.cbrt,
       "pow": lambda x, y: np.power(*(np.atleast_1d(v).copy() for v in np.broadcast_arrays(
           x, y))).reshape(np.broadcast(x, y).shape),
       "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
       "fmod": np.fmod, "rsqrt": lambda x: 1.0 / np.sqrt(x), "isnan": np.isnan,
       "isinf": np.isinf, "isfinite": np.isfinite, "rint": np.rint,
       "lgamma": np.vectorize(lambda x: _lgamma(x), otypes=[np.float64])}


def _lgamma(x: float) -> float:
    """C's lgamma: Python's, with +inf at the poles (0, the negative integers, -inf) and past the
    largest float, where Python raises (docs/semantics.md: a pole gives +inf)."""
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.nan if x != x else math.inf


def f64(fn: str, *xs: float):
    with np.errstate(all="ignore"):
        r = _NP[fn](*(np.float64(x) for x in xs))
    return bool(r) if fn in ("isnan", "isinf", "isfinite") else float(r)


def math_call(th: Thread, fn: str, d: DType, args: list[Val]):
    """``math.<fn>`` of ``args`` (already of float dtype ``d``); isnan & co. give a bool."""
    xs = [a.v for a in args]
    if fn == "copysign" and xs[1] != xs[1]:
        th.doubt("the sign of a NaN")  # unspecified (docs/semantics.md): x86 and the GPU differ
    center = f64(fn, *xs)
    if fn in ("isnan", "isinf", "isfinite"):
        return Val(center)
    r = fround(center, d)
    errs = [a.e for a in args]
    e = 0.0
    if any(errs):
        e = _propagated(th, fn, xs, errs, center)
    if fn in EXACT_MATH or th.uncertain:
        return settle(th, d, r, e) if e and math.isfinite(e) else Val(r)
    th.tags.add(f"math.{fn}")
    if r != r or math.isinf(r) or (not e and (center == 0 or _exact_pow(fn, xs))):
        return settle(th, d, r, e) if e else Val(r)  # an exact 0 (sin(0), log(1)), pow(x, 0)
    own = th.profile.math_ulps(d) * ulp(d, abs(r))
    if fn == "lgamma":
        own = lgamma_bound(th.profile, "simt", d, xs[0], r)
        if own is None:
            th.doubt("lgamma near its negative roots (no GPU bound there)")
            return Val(r, math.inf)
    return Val(r, e + own + (ulp(d, abs(r) + e) if e else 0))


# CUDA's lgamma keeps 6 (f32) / 4 (f64) ulps outside these intervals around its negative roots
LGAMMA_SIMT = {"f32": (6.0, (-10.001, -2.264)), "f64": (4.0, (-11.0001, -2.2637))}


def lgamma_bound(profile: Profile, track: str, d: DType, x: float, r: float) -> float | None:
    """How far a backend's ``lgamma(x)`` (``x`` of float dtype ``d``, computed on the SIMT or
    tile ``track``) may be from the reference ``r`` (finite), by docs/semantics.md; None where
    no bound is stated. The reference is Python's ``lgamma``, as the CPU's: within
    ``8 * 2**-52 * max(1, |r|)`` of the exact value (more ulps near its roots 1 and 2), which
    every bound includes. The GPU computes f16/bf16 in f32 and rounds once (one ulp of ``d``)."""
    own = 2.0 ** -49 * max(1.0, abs(r))
    if profile.name == "cpu":
        return own + profile.math_ulps(d) * ulp(d, abs(r))
    work = dtypes.f64 if d.name == "f64" else dtypes.f32
    rounding = ulp(d, abs(r)) if d.name != work.name else 0.0
    if track == "simt":
        ulps, (lo, hi) = LGAMMA_SIMT[work.name]
        if lo <= x <= hi:
            return None
        return own + rounding + (ulps + 1) * ulp(work, abs(r))
    if x >= 0:  # the tile recipe (backends/tileir/mathlib.py): 5 ulp
        return own + rounding + 6 * ulp(work, abs(r))
    dist = abs(x - round(x))  # reflection: cancels near the roots; an absolute bound
    terms = 1 + abs(math.log(math.sin(math.pi * dist))) + _lgamma(1 - x)
    return own + rounding + 12 * UNIT[work.name] * terms + ulp(work, abs(r))


def pow_jumps(x, y, e):
    """Whether ``pow(x, y)`` of a negative ``x`` jumps between NaN and a number over the
    exponent's interval ``y +- e``: it holds an integer, where the power is finite (fuzz seed
    41536: ``acosh(cosh(-1.0))`` is 1.0 on the GPU and not on the CPU). Works on arrays."""
    return (e > 0) & (x < 0) & (np.floor(y + e) >= np.ceil(y - e))


def _exact_pow(fn: str, xs) -> bool:
    """pow(x, +-0) and pow(1, y) are exactly 1 in every C library (C99 Annex F)."""
    return fn == "pow" and (xs[1] == 0 or xs[0] == 1)


def _propagated(th: Thread, fn: str, xs, errs, center: float) -> float:
    """How far ``fn`` moves when each argument moves by its error: the endpoints of each
    argument's interval (and 0 where the function turns there); ``uncertain`` where the range
    is not bounded that way (see PERIODIC, STEPS, THROUGH_ZERO)."""
    if fn in JUMPS:
        lo, hi = f64(fn, xs[0] - errs[0]), f64(fn, xs[0] + errs[0])
        if lo != hi or math.copysign(1.0, lo) != math.copysign(1.0, hi):
            th.doubt("math of an inexact value near a pole, jump or turn")
            return math.inf
        return 0.0
    if fn in STEPS or (fn in PERIODIC and max(errs) > 0.25) or (
            fn in THROUGH_ZERO and any(e and abs(x) <= e for x, e in zip(xs, errs))) or (
            fn == "lgamma" and lgamma_turns(xs[0], errs[0])) or (
            fn == "pow" and pow_jumps(xs[0], xs[1], errs[1])):
        th.doubt("math of an inexact value near a pole, jump or turn")
        return math.inf
    worst = 0.0
    for k, (x, e) in enumerate(zip(xs, errs)):
        if not e:
            continue
        for x2 in (x - e, x + e):
            moved = list(xs)
            moved[k] = x2
            y = f64(fn, *moved)
            if (y != y) != (center != center) or math.isinf(y) != math.isinf(center) or (
                    fn == "tan" and (math.cos(x2) > 0) != (math.cos(x) > 0)):
                th.doubt("math of an inexact value near a domain edge")
                return math.inf
            if y == y and center == center and not math.isinf(y):
                worst = max(worst, abs(y - center))
    return worst
