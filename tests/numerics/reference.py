"""Independent references for the numerics tests: exact rational arithmetic, no NumPy casts.

``round_float(q, fmt)`` rounds a rational to a float format once, to nearest with ties to even,
by the definition (IEEE 754 section 4.3.1); ``wrap`` and ``saturate`` are the integer rules of
docs/semantics.md written with Python integers; ``lgamma``, ``erf``, ``erfc`` and ``erfinv``
are the functions to 40 digits (decimal arithmetic). Results are Python floats/ints (every f16,
bf16 and f32 value is exact in a Python float); the ``*_exact`` functions give Decimals, to
measure f64 results in ulps (``ulps``).
"""
from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from fractions import Fraction

from fearless import dtypes


@dataclass(frozen=True)
class Format:
    precision: int  # significand bits, the hidden one included
    emin: int
    emax: int

    @property
    def largest(self) -> Fraction:
        return (2 - Fraction(1, 2 ** (self.precision - 1))) * Fraction(2) ** self.emax


FORMATS = {"f16": Format(11, -14, 15), "bf16": Format(8, -126, 127),
           "f32": Format(24, -126, 127), "f64": Format(53, -1022, 1023)}


def round_float(q, fmt: Format | str) -> float:
    """The rational ``q`` (int, float or Fraction) rounded once to ``fmt``; +-inf past the
    overflow threshold; NaN and infinities pass through."""
    fmt = FORMATS[fmt] if isinstance(fmt, str) else fmt
    if isinstance(q, float) and (not math.isfinite(q) or q == 0):
        return q  # NaN, +-inf and +-0 are exact
    q = Fraction(q)
    if q == 0:
        return 0.0
    sign, mag = (1 if q > 0 else -1), abs(q)
    e = max(_floor_log2(mag), fmt.emin)
    ulp = _pow2(e - fmt.precision + 1)
    n, rest = divmod(mag, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2 == 1):
        n += 1
    value = n * ulp
    if value > fmt.largest:
        return sign * math.inf
    return sign * float(value)


def _pow2(e: int) -> Fraction:
    return Fraction(1 << e) if e >= 0 else Fraction(1, 1 << -e)  # (Fraction's ** is slow)


def _floor_log2(q: Fraction) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while _pow2(e) > q:
        e -= 1
    while _pow2(e + 1) <= q:
        e += 1
    return e


def int_range(d: dtypes.DType) -> tuple[int, int]:
    if d.is_signed:
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1


def wrap(v: int, d: dtypes.DType) -> int:
    v &= (1 << d.bits) - 1
    return v - (1 << d.bits) if d.is_signed and v >> (d.bits - 1) else v


def saturate(x: float, d: dtypes.DType) -> int:
    """float -> integer: truncate toward zero, clamp to the type's range, NaN -> 0."""
    if math.isnan(x):
        return 0
    lo, hi = int_range(d)
    if math.isinf(x):
        return hi if x > 0 else lo
    return max(lo, min(hi, math.trunc(x)))


def ulp(x: float, fmt: Format | str) -> float:
    """The spacing of ``fmt`` at ``x`` (its subnormal spacing below the normal range)."""
    fmt = FORMATS[fmt] if isinstance(fmt, str) else fmt
    e = max(math.frexp(abs(x))[1] - 1 if x else fmt.emin, fmt.emin)
    return 2.0 ** (e - fmt.precision + 1)


def halfway_cases(fmt: str, rng, n: int) -> list[Fraction]:
    """Rationals at, just above and just below the midpoints between neighbours of ``fmt``:
    where rounding twice goes wrong."""
    f = FORMATS[fmt]
    out = []
    for _ in range(n):
        e = int(rng.integers(-20, 40))
        m = int(rng.integers(1 << (f.precision - 1), 1 << f.precision))
        mid = (Fraction(2 * m + 1, 2)) * Fraction(2) ** (e - f.precision + 1)
        tiny = Fraction(2) ** (e - f.precision - int(rng.integers(20, 45)))
        out += [mid, mid + tiny, mid - tiny]
    return out


_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30),
              Fraction(5, 66), Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510)]
_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582097494")


def lgamma(x: float) -> float:
    """ln|Gamma(x)| to about 28 digits, rounded to f64 (+inf at 0 and the negative integers,
    NaN for NaN): Python's ``math.lgamma`` is off by several f64 ulps near its roots 1 and 2.
    For x > 0: Gamma(x) = Gamma(x + n) / (x (x + 1) ... (x + n - 1)) and Stirling's series
    from 40 on (error below 1e-28); for x < 0 the reflection pi / (sin(pi x) Gamma(1 - x))."""
    if x != x or x == math.inf:
        return x if x != x else math.inf
    if x == -math.inf or (x <= 0 and x == math.floor(x)):
        return math.inf
    if x in (1.0, 2.0):
        return 0.0
    with decimal.localcontext() as ctx:
        ctx.prec = 45
        d = decimal.Decimal(x)
        if x < 0:
            r = d - decimal.Decimal(math.floor(x))
            r = min(r, 1 - r)  # |sin(pi x)| = sin(pi r), 0 < r <= 1/2
            t, s, k = _PI * r, decimal.Decimal(0), 0
            term = t
            while abs(term) > decimal.Decimal(10) ** -50:  # Taylor series of sin(t), t <= pi/2
                s += term
                k += 2
                term = -term * t * t / (k * (k + 1))
            return float(_PI.ln() - s.ln() - _lgamma_positive(1 - d))
        return float(_lgamma_positive(d))


def _lgamma_positive(d: decimal.Decimal) -> decimal.Decimal:
    product = decimal.Decimal(1)
    while d < 40:
        product *= d
        d += 1
    s = (d - decimal.Decimal("0.5")) * d.ln() - d + (2 * _PI).ln() / 2
    for k, b in enumerate(_BERNOULLI, start=1):
        s += decimal.Decimal(b.numerator) / b.denominator / (2 * k * (2 * k - 1)
                                                             * d ** (2 * k - 1))
    return s - product.ln()


_SQRT_PI = decimal.Decimal("1.77245385090551602729816748334114518279754945612238712821380")


def _erf_decimal(d: decimal.Decimal) -> decimal.Decimal:
    """erf(d) for d >= 0 by its series of positive terms, 2/sqrt(pi) exp(-d^2) *
    sum(2^n d^(2n+1) / (1 3 5 ... (2n+1))) (Abramowitz & Stegun 7.1.6): no cancellation."""
    term = d
    total, n = decimal.Decimal(0), 0
    d2 = d * d
    while term > total * decimal.Decimal(10) ** -(decimal.getcontext().prec + 2) or n == 0:
        total += term
        n += 1
        term = term * 2 * d2 / (2 * n + 1)
    return 2 / _SQRT_PI * (-d2).exp() * total


def _erfc_decimal(d: decimal.Decimal) -> decimal.Decimal:
    """erfc(d) for d >= 3 by its continued fraction (A&S 7.1.14), evaluated from the bottom:
    erfc(d) = exp(-d^2)/sqrt(pi) / (d + (1/2)/(d + 1/(d + (3/2)/(d + 2/(d + ...)))))."""
    tail = d
    for k in range(400, 0, -1):
        tail = d + decimal.Decimal(k) / 2 / tail
    return (-d * d).exp() / _SQRT_PI / tail


def erf(x: float) -> float:
    """erf(x) to about 40 digits, rounded to f64."""
    if x != x or x in (math.inf, -math.inf):
        return x if x != x else math.copysign(1.0, x)
    if x == 0:
        return x
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        d = abs(decimal.Decimal(x))
        value = 1 - _erfc_decimal(d) if d >= 3 else _erf_decimal(d)
    return math.copysign(float(value), x)


def erfc(x: float) -> float:
    """erfc(x) = 1 - erf(x) to about 40 digits, rounded to f64 (0 past 27.3, where it leaves
    the f64 range)."""
    if x != x:
        return x
    if x in (math.inf, -math.inf):
        return 0.0 if x > 0 else 2.0
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        d = decimal.Decimal(x)
        if d >= 3:
            return float(_erfc_decimal(d))
        ctx.prec = 50 + 10  # 1 - erf(d) for d < 3 cancels at most 4 digits
        value = 1 - _erf_decimal(abs(d)) if d >= 0 else 1 + _erf_decimal(-d)
        return float(value)


def erfinv(x: float) -> float:
    """The inverse of erf to about 40 digits, rounded to f64 (+-inf at +-1, NaN outside)."""
    if x != x or abs(x) > 1:
        return math.nan
    if abs(x) == 1:
        return math.copysign(math.inf, x)
    if x == 0:
        return x
    return float(erfinv_exact(x))


def erfinv_exact(x: float) -> decimal.Decimal:
    """erfinv(x) for 0 < |x| < 1 to about 40 digits: Newton's method on erf (|x| <= 1/2) or on
    erfc (1 - |x|, exact), in 60 digits, from a bisection of Python's f64 erf / erfc."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        target = decimal.Decimal(abs(x))
        tail = target > decimal.Decimal("0.5")
        rest = 1 - target  # exact: x has 53 bits
        lo, hi = 0.0, 30.0
        for _ in range(200):  # a start within a few f64 ulps: Newton then converges at once
            mid = (lo + hi) / 2
            low = math.erfc(mid) > float(rest) if tail else math.erf(mid) < abs(x)
            lo, hi = (mid, hi) if low else (lo, mid)
        y = decimal.Decimal((lo + hi) / 2)
        for _ in range(4):
            slope = 2 / _SQRT_PI * (-y * y).exp()
            residual = (rest - _erfc(y)) if tail else (_erf_decimal(y) - target)
            y -= residual / slope
        return y if x > 0 else -y


def _erfc(d: decimal.Decimal) -> decimal.Decimal:
    """erfc(d) for d >= 0 in the current precision (plus the digits 1 - erf loses)."""
    if d >= 3:
        return _erfc_decimal(d)
    with decimal.localcontext() as ctx:
        ctx.prec += 10
        return +(1 - _erf_decimal(d))


# exact values (Decimal, about 40 digits) of finite results, for errors in ulps of f64 results

def erf_exact(x: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        d = abs(decimal.Decimal(x))
        v = 1 - _erfc_decimal(d) if d >= 3 else _erf_decimal(d)
        return v if x >= 0 else -v


def erfc_exact(x: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        d = decimal.Decimal(x)
        if d >= 3:
            return _erfc_decimal(d)
        ctx.prec = 70
        return +(1 - _erf_decimal(d) if d >= 0 else 1 + _erf_decimal(-d))


def expm1_exact(x: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return decimal.Decimal(x).exp() - 1


def log1p_exact(x: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return (1 + decimal.Decimal(x)).ln()


def hypot_exact(x: float, y: float) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return (decimal.Decimal(x) ** 2 + decimal.Decimal(y) ** 2).sqrt()


def cbrt_exact(x: float) -> decimal.Decimal:
    """The real cube root (x != 0), by Newton's method from Python's f64 estimate."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        d = abs(decimal.Decimal(x))
        y = decimal.Decimal(abs(x) ** (1 / 3))
        for _ in range(6):
            y -= (y ** 3 - d) / (3 * y * y)
        return y if x > 0 else -y


def ulps(got: float, exact, fmt: str) -> float:
    """|got - exact| in ulps of ``fmt`` at the exact value (``exact`` a Decimal or float)."""
    q = Fraction(exact)
    return float(abs(Fraction(got) - q)) / ulp(float(q), fmt)
