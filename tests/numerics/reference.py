"""Independent references for the numerics tests: exact rational arithmetic, no NumPy casts.

``round_float(q, fmt)`` rounds a rational to a float format once, to nearest with ties to even,
by the definition (IEEE 754 section 4.3.1); ``wrap`` and ``saturate`` are the integer rules of
docs/semantics.md written with Python integers; ``lgamma`` is ln|Gamma| to 40 digits. Results
are Python floats/ints (every f16, bf16 and f32 value is exact in a Python float).
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
    ulp = Fraction(2) ** (e - fmt.precision + 1)
    n, rest = divmod(mag, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2 == 1):
        n += 1
    value = n * ulp
    if value > fmt.largest:
        return sign * math.inf
    return sign * float(value)


def _floor_log2(q: Fraction) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
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
