"""The coefficient tables of the Tile IR recipes of erf, erfc and erfinv
(``backends/tileir/special.py``): Chebyshev interpolants computed in 60-digit decimal
arithmetic from this module's references, printed as Python.

    PYTHONPATH=src:. python -m tests.numerics.fit_special      # a few minutes

Each function is interpolated at the Chebyshev points of the first kind of its interval, with
the degree raised until the last two coefficients fall below 2**-58 of the first: what is left
out is far below an f64 ulp. The tests (tests/backends/tileir/test_special.py) measure the
recipes that use the tables against 40-digit references.
"""
from __future__ import annotations

import decimal
import math

from tests.numerics import reference

D = decimal.Decimal
_PI = reference._PI
_SQRT_PI = reference._SQRT_PI


def _cos(x: D) -> D:
    s, term, k = D(0), D(1), 0
    while abs(term) > D(10) ** -(decimal.getcontext().prec + 3):
        s += term
        k += 2
        term = -term * x * x / (k * (k - 1))
    return +s


def chebyshev(f, a: float, b: float, n: int) -> list[D]:
    """The coefficients of the degree-``n`` interpolant of ``f`` (Decimal -> Decimal) at the
    Chebyshev points of [a, b], in ``T_j(t)``, ``t = (2 x - (a + b)) / (b - a)``."""
    a, b = D(a), D(b)
    ts = [_cos(_PI * (k + D("0.5")) / (n + 1)) for k in range(n + 1)]
    values = [f((a + b) / 2 + (b - a) / 2 * t) for t in ts]
    coefficients = []
    for j in range(n + 1):
        total = D(0)
        for t, v in zip(ts, values):
            t0, t1 = D(1), t
            for _ in range(j - 1):
                t0, t1 = t1, 2 * t * t1 - t0
            total += v * (D(1) if j == 0 else t1)
        coefficients.append(total * 2 / (n + 1) / (2 if j == 0 else 1))
    return coefficients


def fit(f, a: float, b: float) -> list[float]:
    for n in range(6, 80, 2):
        c = chebyshev(f, a, b, n)
        if max(abs(c[-1]), abs(c[-2])) < abs(c[0]) * D(2) ** -58:
            return [float(v) for v in c]
    raise ValueError("no degree below 80 is enough")


def erfc_scaled(u: D) -> D:
    """x exp(x**2) erfc(x) at x = 1/u."""
    x = 1 / u
    if x >= 3:
        e = reference._erfc_decimal(x)
    else:
        with decimal.localcontext() as ctx:
            ctx.prec += 20
            e = 1 - reference._erf_decimal(x)
    return x * (x * x).exp() * e


def erfinv_ratio(w: D) -> D:
    """erfinv(x) / x at x = sqrt(1 - exp(-w)) (w > 0): Newton's method from a bisection of
    Python's erf/erfc, as reference.erfinv."""
    x = (1 - (-w).exp()).sqrt()
    rest = (-w).exp() / (1 + x)  # 1 - x
    tail = x > D("0.5")
    lo, hi = 0.0, 30.0
    for _ in range(200):
        mid = (lo + hi) / 2
        low = math.erfc(mid) > float(rest) if tail else math.erf(mid) < float(x)
        lo, hi = (mid, hi) if low else (lo, mid)
    y = D((lo + hi) / 2)
    for _ in range(6):
        slope = 2 / _SQRT_PI * (-y * y).exp()
        y -= ((rest - reference._erfc(y)) if tail else (reference._erf_decimal(y) - x)) / slope
    return y / x


def erfinv_slope(w: D) -> D:
    """(erfinv(x) / x - sqrt(pi) / 2) / w, so that erfinv(x) / x = sqrt(pi) / 2 + w * this:
    the constant then carries the value near 0 without the series' rounding."""
    return (erfinv_ratio(w) - _SQRT_PI / 2) / w


TABLES = {  # name: (function, interval)
    "ERFC_SCALED": (erfc_scaled, (1 / 28, 2.0)),
    "ERFINV_CENTRAL": (erfinv_slope, (0.0, 6.25)),
    "ERFINV_TAIL": (lambda s: erfinv_ratio(s * s), (2.5, 6.01)),
}


def main():
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        for name, (f, (a, b)) in TABLES.items():
            c = fit(f, a, b)
            print(f"_{name} = ({a!r}, {b!r}, (")
            for i in range(0, len(c), 3):
                print("    " + " ".join(f"{v!r}," for v in c[i:i + 3]))
            print("))")


if __name__ == "__main__":
    main()
