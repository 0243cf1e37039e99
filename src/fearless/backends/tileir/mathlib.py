"""Math functions Tile IR has no operation for, built from the operations it has: ``RULES``.

Each function is a recipe written against ``Ops`` (IEEE adds, multiplies, fma, divisions and
square roots, compares, selects, integer operations on a float's bits, and Tile IR's ``log``,
``sin``, ``floor``, ``remf`` and ``atan2``) on one float type, so the same recipe runs on NumPy
in the tests, which measure its error (tests/backends/tileir/test_mathlib.py). f16/bf16 are
computed in f32 and rounded once, as every math function is. Each recipe's docstring states its
precision; docs/semantics.md has the table. ``lower.py`` adds ``RULES`` to its own.
"""
from __future__ import annotations

import decimal
import math

from fearless.backends.tileir import tir
from fearless.ir.opdef import Op
from fearless.ir.types import Tile

_FLOAT = {"f16": tir.F16, "bf16": tir.BF16, "f32": tir.F32, "f64": tir.F64}


class Ops:
    """The Tile IR operations a recipe uses, on values of one float type and one shape, and
    on integers of the float's width (its bits: ``bits``, ``real``)."""

    def __init__(self, low, work: tir.ScalarType, shape: tuple):
        self.low, self.b, self.work, self.shape = low, low.b, work, shape
        self.int = tir.I32 if work.bits == 32 else tir.I64

    def c(self, value: float):
        """A constant (rounded once to the work type, as every constant)."""
        return self.low.const(value, self.work, self.shape)

    def ci(self, value: int):
        """An integer constant of the work type's width (two's complement)."""
        bits = self.int.bits
        value &= (1 << bits) - 1
        return self.low.const(value - (1 << bits) if value >> (bits - 1) else value, self.int,
                              self.shape)

    def bits(self, x):
        return self.b.bitcast(x, self.int)

    def real(self, i):
        return self.b.bitcast(i, self.work)

    def iadd(self, x, y):
        return self.b.addi(x, y)

    def isub(self, x, y):
        return self.b.subi(x, y)

    def iand(self, x, y):
        return self.b.andi(x, y)

    def ior(self, x, y):
        return self.b.ori(x, y)

    def shl(self, x, k: int):
        return self.b.shli(x, self.ci(k))

    def shr(self, x, k: int):
        """``x >> k``, arithmetic."""
        return self.b.shri(x, self.ci(k))

    def imul(self, x, y):
        return self.b.muli(x, y)

    def icmp(self, pred: str, x, y):
        return self.b.cmpi(pred, x, y)

    def widen(self, n):
        """An i32 operand as an integer of the work type's width."""
        return n if self.int.bits == 32 else self.b.exti(n, self.int)

    def itof(self, i):
        return self.b.itof(i, self.work)

    def to_int(self, x):
        """A float holding an integer of the work width's range (not NaN) as that integer."""
        return self.b.ftoi(x, self.int)

    def fma(self, x, y, z):
        """``x * y + z`` rounded once."""
        return self.b.fma(x, y, z)

    def sqrt(self, x):
        return self.b.sqrt(x)

    def rem(self, x, y):
        """C's ``fmod`` (exact)."""
        return self.b.remf(x, y)

    def atan2(self, x, y):
        return self.b.atan2(x, y)

    def add(self, x, y):
        return self.b.addf(x, y)

    def sub(self, x, y):
        return self.b.subf(x, y)

    def mul(self, x, y):
        return self.b.mulf(x, y)

    def div(self, x, y):
        return self.b.divf(x, y)

    def neg(self, x):
        return self.b.negf(x)

    def abs(self, x):
        return self.b.absf(x)

    def floor(self, x):
        return self.b.floor(x)

    def log(self, x):
        return self.b.log(x)

    def sin(self, x):
        return self.b.sin(x)

    def select(self, cond, x, y):
        return self.b.select(cond, x, y)

    def cmp(self, pred: str, x, y):
        """``x <pred> y``, ordered: False where either is NaN."""
        return self.b.cmpf(pred, x, y)


def _horner(m: Ops, coefficients, x):
    """``sum(c[k] * x**k)``, evaluated from the highest power down."""
    acc = m.c(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = m.add(m.c(c), m.mul(acc, x))
    return acc


def rint(m: Ops, bits: int, x):
    """The nearest integer, ties to even (``np.rint``): exact, as on every backend. Below
    2**p (p = 23 for f32, 52 for f64) ``(|x| + 2**p) - 2**p`` rounds to an integer once, by
    the add's own rounding to nearest even; from 2**p on every float is an integer. The sign
    is ``x``'s (``rint(-0.3)`` is -0.0), and infinities and NaN are ``x`` itself."""
    big = m.c(2.0 ** (23 if bits == 32 else 52))
    a = m.abs(x)
    r = m.sub(m.add(a, big), big)
    r = m.select(m.cmp("lt", x, m.c(0.0)), m.neg(r), r)
    return m.select(m.cmp("lt", a, big), m.select(m.cmp("eq", x, m.c(0.0)), x, r), x)


# lgamma(2 + e) = sum(_SERIES[k] * e**(k + 1)) for |e| <= 1/2: the coefficients are 1 - Euler's
# gamma, then (-1)**k (zeta(k) - 1) / k for k = 2, 3, ... (Abramowitz & Stegun 6.1.33 plus the
# series of ln(1 + e)), computed to 50 digits and rounded to f64
_SERIES = (0.42278433509846713, 0.3224670334241132, -0.0673523010531981, 0.020580808427784546,
           -0.007385551028673986, 0.0028905103307415234, -0.001192753911703261,
           0.0005096695247430425, -0.00022315475845357939, 9.945751278180853e-05,
           -4.492623673813314e-05, 2.050721277567069e-05, -9.439488275268397e-06,
           4.374866789907488e-06, -2.039215753801366e-06, 9.55141213040742e-07,
           -4.492469198764566e-07, 2.1207184805554665e-07, -1.0043224823968099e-07,
           4.7698101693639804e-08, -2.2711094608943164e-08, 1.0838659214896955e-08,
           -5.183475041970047e-09, 2.4836745438024785e-09, -1.1921401405860912e-09,
           5.731367241678862e-10, -2.7595228851242334e-10, 1.330476437424449e-10)
# lgamma(1 + e) = e * sum(_NEAR_ONE[j] * (e - 1/4)**j) for 0 <= e <= 1/2, without the
# cancellation of lgamma(2 + e) - ln(1 + e): the series of lgamma(1 + e) / e (-gamma, then
# (-1)**k zeta(k) / k) moved to e = 1/4, computed to 50 digits and rounded to f64
_NEAR_ONE = (-0.3930873456872526, 0.6625352492439489, -0.2554826879615743, 0.13677079348835042,
             -0.08339250575533565, 0.054390401756884824, -0.03692956435369459,
             0.025743857659535425, -0.0182820761294336, 0.013163093814368027,
             -0.009579129355901411, 0.007030888316926897, -0.005197009448067491,
             0.0038642803635375793, -0.0028879017580305502, 0.002167711417892749,
             -0.0016333901622931993, 0.0012349652876497287, -0.0009365596024752161,
             0.0007121915716550685, -0.0005429051782355058, 0.0004147802845104666,
             -0.00031753650182030687, 0.00024354321685702022, -0.0001871111987400363)
# Stirling's series: lgamma(y) = (y - 1/2)(ln y - 1) + (ln(2 pi) - 1)/2 + sum(_STIRLING[k] /
# y**(2k + 1)), the coefficients B(2k + 2) / ((2k + 2)(2k + 1)) (Bernoulli numbers)
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156,
             -3617 / 122400)
_HALF_LN_2PI_LESS_HALF = 0.4189385332046727  # (ln(2 pi) - 1) / 2
_LN_PI = 1.1447298858494002
# per work width: terms of the series about 2, about 1 and of Stirling's, and where Stirling's
# takes over; the terms left out are below 2**-26 (f32) and 2**-56 (f64) of the result
_LGAMMA = {32: (14, 13, 4, 8.0), 64: (28, 25, 8, 10.0)}


def lgamma(m: Ops, bits: int, x):
    """ln|Gamma(x)| (``math.lgamma``; +inf at 0, the negative integers and -inf).

    ``x >= 0`` (``_lgamma_positive``): within 3 ulp of the result with a correctly rounded
    ``log`` (the tests measure 2.7 for f32, 2 for f64); Tile IR's ``log`` (CUDA's, 1 ulp) adds
    at most 2 ulp, where two terms partly cancel. ``x < 0``: the reflection ``ln(pi) -
    ln(sin(pi r)) - lgamma(1 - x)``, ``r`` the distance from ``x`` to the nearest integer
    (exact); its terms cancel near lgamma's roots, so the bound there is absolute:
    ``8 u (1 + |ln(sin(pi r))| + lgamma(1 - x))`` with ``u`` the unit roundoff (measured: 4.4),
    plus ``4 u`` times the same terms for Tile IR's ``log`` and ``sin`` (CUDA's: 1 and 2 ulp)."""
    negative = m.cmp("lt", x, m.c(0.0))
    y = m.select(negative, m.sub(m.c(1.0), x), x)
    g = _lgamma_positive(m, bits, y)
    r = m.abs(m.sub(x, rint(m, bits, x)))  # in [0, 1/2], exact (Sterbenz)
    s = m.sin(m.mul(m.c(math.pi), r))  # |sin(pi x)|: 0 at the poles, so the result is +inf
    out = m.select(negative, m.sub(m.sub(m.c(_LN_PI), m.log(s)), g), g)
    return m.select(m.cmp("eq", x, m.c(-math.inf)), m.c(math.inf), out)


def _lgamma_positive(m: Ops, bits: int, y):
    """lgamma(y) for y >= 0 (NaN gives NaN): Stirling's series from ``start`` on; in [1, 1.5)
    the series about 1; elsewhere below ``start`` the series about 2, after exact steps that
    bring ``y`` into [1.5, 2.5): lgamma(y) = lgamma(y - n) + ln((y - 1) ... (y - n)) from
    above, lgamma(y + 1) - ln(y) and lgamma(y + 2) - ln(y (y + 1)) from below (``y - 1``,
    ``y - 2`` are exact)."""
    n_series, n_near_one, n_stirling, start = _LGAMMA[bits]
    one = m.c(1.0)
    z, p = y, one
    for _ in range(math.ceil(start - 2.5)):
        down = m.cmp("ge", z, m.c(2.5))
        z = m.select(down, m.sub(z, one), z)
        p = m.select(down, m.mul(p, z), p)
    below = m.cmp("lt", y, m.c(1.5))
    tiny = m.cmp("lt", y, m.c(0.5))
    e = m.select(tiny, y, m.select(below, m.sub(y, one), m.sub(z, m.c(2.0))))
    series = m.mul(_horner(m, _SERIES[:n_series], e), e)
    logs = m.log(m.select(tiny, m.mul(y, m.add(y, one)), m.select(below, y, p)))
    middle = m.select(below, m.sub(series, logs), m.add(series, logs))
    # 0 - e * (-Q): +0.0 at y = 1, as C's lgamma(1) (e * Q would be -0.0)
    minus_q = _horner(m, [-c for c in _NEAR_ONE[:n_near_one]], m.sub(e, m.c(0.25)))
    near_one = m.sub(m.c(0.0), m.mul(minus_q, e))
    middle = m.select(m.cmp("ge", y, one), m.select(below, near_one, middle), middle)
    w = m.div(one, y)
    tail = m.mul(_horner(m, _STIRLING[:n_stirling], m.mul(w, w)), w)
    big = m.add(m.add(m.mul(m.sub(y, m.c(0.5)), m.sub(m.log(y), one)),
                      m.c(_HALF_LN_2PI_LESS_HALF)), tail)
    return m.select(m.cmp("ge", y, m.c(start)), big, middle)


def _format(bits: int) -> tuple[int, int]:
    """The work type's stored significand bits and exponent bias."""
    return (23, 127) if bits == 32 else (52, 1023)


def _pow2(m: Ops, bits: int, k):
    """2**k for an integer tile ``k`` of the normal exponent range (exact)."""
    p, bias = _format(bits)
    return m.real(m.shl(m.iadd(k, m.ci(bias)), p))


def copysign(m: Ops, bits: int, x, y):
    """``x``'s magnitude with ``y``'s sign bit: exact (NaNs too)."""
    sign = 1 << (bits - 1)
    return m.real(m.ior(m.iand(m.bits(x), m.ci(sign - 1)), m.iand(m.bits(y), m.ci(sign))))


def fmod(m: Ops, bits: int, x, y):
    """C's ``fmod``: Tile IR's ``remf``, exact."""
    return m.rem(x, y)


def atan2(m: Ops, bits: int, y, x):
    """C's ``atan2(y, x)``: Tile IR's ``atan2`` (CUDA's math library)."""
    return m.atan2(y, x)


# hypot: arguments above 2**t are scaled by 2**-s and those below 2**-t by 2**s, so that the
# squares neither overflow nor lose bits to underflow that the result keeps
_HYPOT = {32: (60, 90), 64: (450, 600)}


def hypot(m: Ops, bits: int, x, y):
    """``sqrt(x*x + y*y)`` without overflow or underflow on the way: with ``a >= b`` the
    magnitudes scaled by a power of two (exact), ``sqrt(fma(a, a, b * b))`` scaled back. The
    product ``b * b`` (relative error u, the unit roundoff, on at most half the sum), the fma
    (u) and the square root (half the sum's error, plus u) keep the result within 1.75 u, under
    2 ulp; a subnormal result is rounded once more (1 ulp more). An infinite argument gives
    +inf, NaN or not (C99)."""
    t, s = _HYPOT[bits]
    a, b = m.abs(x), m.abs(y)
    swap = m.cmp("lt", a, b)
    big, small = m.select(swap, b, a), m.select(swap, a, b)
    large, tiny = m.cmp("gt", big, m.c(2.0 ** t)), m.cmp("lt", big, m.c(2.0 ** -t))
    scale = m.select(large, m.c(2.0 ** -s), m.select(tiny, m.c(2.0 ** s), m.c(1.0)))
    back = m.select(large, m.c(2.0 ** s), m.select(tiny, m.c(2.0 ** -s), m.c(1.0)))
    big, small = m.mul(big, scale), m.mul(small, scale)
    h = m.mul(m.sqrt(m.fma(big, big, m.mul(small, small))), back)
    inf = m.c(math.inf)
    return m.select(m.cmp("eq", a, inf), inf, m.select(m.cmp("eq", b, inf), inf, h))


# cbrt(z) for z in [1, 8) to 7e-3 (a least-squares Chebyshev fit, in powers of z): the start of
# Newton's method, which squares the relative error each step
_CBRT_START = (0.656987, 0.411695, -0.0687684, 0.00723442, -0.000306711)
_CBRT_STEPS = {32: 2, 64: 3}  # 7e-3 -> 5e-5 -> 2e-9 (f32) -> 5e-18 (f64)


def cbrt(m: Ops, bits: int, x):
    """The real cube root. ``|x| = z * 2**(3q)`` with ``z`` in [1, 8) (exact, from the
    exponent bits; subnormals scaled by 2**(3k) first); ``cbrt(z)`` by Newton's method from a
    polynomial start, each step's residual ``y**3 - z`` computed with fmas to about u**2, so
    that the last step's ``y - r / (3 y**2)`` rounds once more than the correct rounding:
    within 1 ulp (measured: 0.5x). Then scaled by 2**q (exact) and given x's sign; 0, inf and
    NaN are x."""
    p, bias = _format(bits)
    k = 8 if bits == 32 else 18
    a = m.abs(x)
    tiny = m.cmp("lt", a, m.c(2.0 ** (1 - bias)))
    a = m.select(tiny, m.mul(a, m.c(2.0 ** (3 * k))), a)
    e = m.isub(m.shr(m.bits(a), p), m.ci(bias))  # the exponent (a's sign bit is clear)
    # q = floor(e / 3): (e + 1200) * 43691 >> 17 is (e + 1200) // 3 below 2**17 (43691 / 2**17
    # exceeds 1/3 by under 1 / 2**17 / 3), and e + 1200 is in [0, 2223]
    q = m.isub(m.shr(m.imul(m.iadd(e, m.ci(1200)), m.ci(43691)), 17), m.ci(400))
    r = m.isub(e, m.imul(q, m.ci(3)))
    z = m.real(m.ior(m.iand(m.bits(a), m.ci((1 << p) - 1)), m.shl(m.iadd(r, m.ci(bias)), p)))
    y = _horner(m, _CBRT_START, z)
    for _ in range(_CBRT_STEPS[bits]):
        y2 = m.mul(y, y)
        residual = m.add(m.fma(y, y2, m.neg(z)), m.mul(y, m.fma(y, y, m.neg(y2))))
        y = m.sub(y, m.div(residual, m.mul(m.c(3.0), y2)))
    out = copysign(m, bits, m.mul(y, _pow2(m, bits, m.isub(q, m.select(tiny, m.ci(k),
                                                                        m.ci(0))))), x)
    keep = m.cmp("lt", m.abs(x), m.c(math.inf))  # finite (NaN: False)
    return m.select(m.cmp("eq", x, m.c(0.0)), x, m.select(keep, out, x))


def ldexp(m: Ops, bits: int, x, n):
    """``x * 2**n`` rounded once (C's ``ldexp``), exact unless the result leaves the normal
    range. From the bits: a normal result adds ``n`` to the exponent field; below the normal
    range one multiplication by a power of two rounds the significand once; above it, +-inf.
    Subnormal ``x`` is first scaled into the normal range; 0, inf and NaN are ``x``; ``n`` is
    clamped to +-3 bias (every result past it is 0 or inf) so that the sums fit."""
    p, bias = _format(bits)
    n = m.widen(n)
    limit = 3 * bias
    n = m.select(m.icmp("gt", n, m.ci(limit)), m.ci(limit),
                 m.select(m.icmp("lt", n, m.ci(-limit)), m.ci(-limit), n))
    a = m.abs(x)
    tiny = m.cmp("lt", a, m.c(2.0 ** (1 - bias)))
    x1 = m.select(tiny, m.mul(x, m.c(2.0 ** (p + 1))), x)
    n1 = m.isub(n, m.select(tiny, m.ci(p + 1), m.ci(0)))
    b1 = m.bits(x1)
    t = m.iadd(m.iand(m.shr(b1, p), m.ci(2 * bias + 1)), n1)  # the result's biased exponent
    normal = m.real(m.iadd(b1, m.shl(n1, p)))
    exponent_field = (2 * bias + 1) << p
    lowest = m.real(m.ior(m.iand(b1, m.ci(~exponent_field)), m.ci(1 << p)))
    k = m.isub(t, m.ci(1))
    k = m.select(m.icmp("lt", k, m.ci(-(p + 2))), m.ci(-(p + 2)), k)
    below = m.mul(lowest, _pow2(m, bits, k))
    above = m.real(m.ior(m.iand(b1, m.ci(1 << (bits - 1))), m.ci(exponent_field)))
    out = m.select(m.icmp("gt", t, m.ci(2 * bias)), above,
                   m.select(m.icmp("lt", t, m.ci(1)), below, normal))
    keep = m.cmp("lt", a, m.c(math.inf))  # finite (NaN: False)
    return m.select(m.cmp("eq", x, m.c(0.0)), x, m.select(keep, out, x))


def _ln2_parts(bits: int) -> tuple[float, float]:
    """ln 2 as hi + lo: hi has its last 11 significand bits zero, so that ``k * hi`` is exact
    for ``|k| < 2**11``; lo is the rest (from 40 digits), rounded to the work type."""
    p, _ = _format(bits)
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        ln2 = decimal.Decimal(2).ln()
        hi = math.ldexp(round(math.ldexp(float(ln2), p + 1 - 11)), -(p + 1 - 11))
        return hi, float(ln2 - decimal.Decimal(hi))


_LN2 = math.log(2.0)
# expm1: Taylor terms 1/n! of the reduced argument |r| < ln(2) (the rest below 2**-26 and
# 2**-56 of the result), and the arguments past which the result is -1 (rounded) or +inf
_EXPM1 = {32: (10, 17.5, 89.5), 64: (17, 38.0, 710.5)}


def expm1(m: Ops, bits: int, x):
    """``exp(x) - 1`` without the cancellation near 0. ``x = k ln2 + r``, ``k`` the nearest
    integer to ``x / ln2`` but 0 for ``|x| < ln2`` (Cody and Waite's two-part ln 2: ``r`` within
    0.5 ulp of its exact value), ``expm1(r) = r + r (r Q(r))`` by Taylor's series, then
    ``2**k (expm1(r) + 1) - 1`` as ``2**k (expm1(r) + (1 - 2**-k))`` for ``k > 0`` (exact
    ``1 - 2**-k``, and ``r >= 0`` for ``k = 1``, so no cancellation) and as written for
    ``k < 0`` (a result of magnitude above 1/2), scaled by two exact powers of two. Within 2 ulp
    (the tests measure 1.4); 0 is x, NaN is NaN, +inf past ln(max), -1 below its rounding
    point."""
    terms, low, high = _EXPM1[bits]
    p, _ = _format(bits)
    hi, lo = _ln2_parts(bits)
    nan = m.cmp("ne", x, x)
    xc = m.select(nan, m.c(0.0), x)
    xc = m.select(m.cmp("lt", xc, m.c(-low)), m.c(-low),
                  m.select(m.cmp("gt", xc, m.c(high)), m.c(high), xc))
    kf = m.select(m.cmp("lt", m.abs(xc), m.c(_LN2)), m.c(0.0),
                  rint(m, bits, m.mul(xc, m.c(1 / _LN2))))
    r = m.sub(m.sub(xc, m.mul(kf, m.c(hi))), m.mul(kf, m.c(lo)))
    q = _horner(m, [1 / math.factorial(n) for n in range(2, terms + 1)], r)
    y = m.add(r, m.mul(r, m.mul(r, q)))
    k = m.to_int(kf)
    up = m.add(y, m.sub(m.c(1.0), _pow2(m, bits, m.isub(m.ci(0), m.select(
        m.icmp("gt", k, m.ci(p + 2)), m.ci(p + 2), k)))))
    down = m.add(y, m.c(1.0))
    half = m.shr(k, 1)  # 2**k = 2**(k >> 1) 2**(k - (k >> 1)): each in the normal range
    scaled = m.mul(m.mul(m.select(m.icmp("gt", k, m.ci(0)), up, down), _pow2(m, bits, half)),
                   _pow2(m, bits, m.isub(k, half)))
    out = m.select(m.icmp("gt", k, m.ci(0)), scaled, m.sub(scaled, m.c(1.0)))
    out = m.select(m.icmp("eq", k, m.ci(0)), y, out)
    out = m.select(m.cmp("gt", x, m.c(high)), m.c(math.inf), out)
    return m.select(m.cmp("eq", x, m.c(0.0)), x, m.select(nan, x, out))


_LOG1P_TERMS = {32: 5, 64: 11}  # of 2 atanh(s) - 2 s, |s| <= 0.172: the rest below 2**-26, -56


def log1p(m: Ops, bits: int, x):
    """``log(1 + x)`` without losing x's digits. ``w = 1 + x`` rounded, with its exact error
    ``c`` (Knuth's TwoSum); ``w = 2**k m``, ``m`` in [sqrt(1/2), sqrt(2)) (exact, from the
    bits); ``log m = f - s (f - R)`` with ``f = m - 1`` (exact), ``s = f / (2 + f)`` and
    ``R = 2 s**2 / 3 + 2 s**4 / 5 + ...`` (the series of 2 atanh s = log m), the leading ``f``
    exact; then ``k ln2 + log m + c / w`` (``log(1 + c / w)`` to first order, ``c / w`` below
    u). For ``k = 0`` (``x`` in [-0.29, 0.41)) ``m = 1 + x`` exactly: ``f = x``, no ``c``.
    Within 2 ulp (the tests measure 1.1); -1 gives -inf, below -1 NaN, 0 is x."""
    p, bias = _format(bits)
    hi, lo = _ln2_parts(bits)
    one = m.c(1.0)
    w = m.add(one, x)
    back = m.sub(w, x)
    c = m.add(m.sub(one, back), m.sub(x, m.sub(w, back)))
    safe = m.select(m.cmp("gt", w, m.c(0.0)), w, one)  # w > 0 for x > -1 (NaN: 1)
    wb = m.bits(safe)
    e = m.isub(m.shr(wb, p), m.ci(bias))
    mant = m.real(m.ior(m.iand(wb, m.ci((1 << p) - 1)), m.ci(bias << p)))  # in [1, 2)
    big = m.cmp("gt", mant, m.c(math.sqrt(2.0)))
    mant = m.select(big, m.mul(mant, m.c(0.5)), mant)
    k = m.iadd(e, m.select(big, m.ci(1), m.ci(0)))
    near = m.icmp("eq", k, m.ci(0))
    f = m.select(near, x, m.sub(mant, one))
    c = m.select(near, m.c(0.0), c)
    s = m.div(f, m.add(m.c(2.0), f))
    s2 = m.mul(s, s)
    series = m.mul(s2, _horner(m, [2 / (2 * j + 1) for j in range(1, _LOG1P_TERMS[bits] + 1)],
                               s2))
    log_m = m.sub(f, m.mul(s, m.sub(f, series)))
    kf = m.itof(k)
    out = m.add(m.mul(kf, m.c(hi)), m.add(log_m, m.add(m.div(c, safe), m.mul(kf, m.c(lo)))))
    out = m.select(m.cmp("eq", x, m.c(-1.0)), m.c(-math.inf), out)
    out = m.select(m.cmp("lt", x, m.c(-1.0)), m.c(math.nan), out)
    out = m.select(m.cmp("eq", x, m.c(math.inf)), x, out)
    return m.select(m.cmp("eq", x, m.c(0.0)), x, m.select(m.cmp("ne", x, x), x, out))


def _rule(recipe):
    def rule(low, op):
        d = op.results[0].type.dtype
        shape = op.results[0].type.shape if isinstance(op.results[0].type, Tile) else ()
        work = tir.F32 if d.bits == 16 else _FLOAT[d.name]
        args = [low.v(x) for x in op.operands]
        if d.bits == 16:  # computed in f32 and rounded once, as on the SIMT track
            args = [low.b.ftof(a, work) if x.type.dtype.is_float else a
                    for a, x in zip(args, op.operands)]
        out = recipe(Ops(low, work, shape), max(32, d.bits), *args)
        low.set(op, low.b.ftof(out, _FLOAT[d.name]) if d.bits == 16 else out)
    return rule


RULES = {Op.RINT: _rule(rint), Op.LGAMMA: _rule(lgamma), Op.COPYSIGN: _rule(copysign),
         Op.FMOD: _rule(fmod), Op.ATAN2: _rule(atan2), Op.HYPOT: _rule(hypot),
         Op.CBRT: _rule(cbrt), Op.LDEXP: _rule(ldexp), Op.EXPM1: _rule(expm1),
         Op.LOG1P: _rule(log1p)}
