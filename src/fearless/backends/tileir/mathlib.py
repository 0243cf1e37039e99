"""Math functions Tile IR has no operation for, built from the operations it has: ``RULES``.

Each function is a recipe written against ``Ops`` (IEEE adds and multiplies, compares, selects,
Tile IR's ``log``, ``sin`` and ``floor``) on one float type, so the same recipe runs on NumPy in
the tests, which measure its error (tests/backends/tileir/test_mathlib.py). f16/bf16 are computed
in f32 and rounded once, as every math function is. Each recipe's docstring states its
precision; docs/semantics.md has the table. ``lower.py`` adds ``RULES`` to its own.
"""
from __future__ import annotations

import math

from fearless.backends.tileir import tir
from fearless.ir.opdef import Op
from fearless.ir.types import Tile

_FLOAT = {"f16": tir.F16, "bf16": tir.BF16, "f32": tir.F32, "f64": tir.F64}


class Ops:
    """The Tile IR operations a recipe uses, on values of one float type and one shape."""

    def __init__(self, low, work: tir.ScalarType, shape: tuple):
        self.low, self.b, self.work, self.shape = low, low.b, work, shape

    def c(self, value: float):
        """A constant (rounded once to the work type, as every constant)."""
        return self.low.const(value, self.work, self.shape)

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


def _rule(recipe):
    def rule(low, op):
        d = op.operands[0].type.dtype
        shape = op.results[0].type.shape if isinstance(op.results[0].type, Tile) else ()
        work = tir.F32 if d.bits == 16 else _FLOAT[d.name]
        args = [low.v(x) for x in op.operands]
        if d.bits == 16:  # computed in f32 and rounded once, as on the SIMT track
            args = [low.b.ftof(a, work) for a in args]
        out = recipe(Ops(low, work, shape), max(32, d.bits), *args)
        low.set(op, low.b.ftof(out, _FLOAT[d.name]) if d.bits == 16 else out)
    return rule


RULES = {Op.RINT: _rule(rint), Op.LGAMMA: _rule(lgamma)}
