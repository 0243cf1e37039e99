"""Independent references for the numerics tests: exact rational arithmetic, no NumPy casts.

``round_float(q, fmt)`` rounds a rational to a float format once, to nearest with ties to even,
by the definition (IEEE 754 section 4.3.1); ``wrap`` and ``saturate`` are the integer rules of
docs/semantics.md written with Python integers. Results are Python floats/ints (every f16, bf16
and f32 value is exact in a Python float).
"""
from __future__ import annotations

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
