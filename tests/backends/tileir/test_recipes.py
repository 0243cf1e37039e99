"""The Tile IR recipes of copysign, ldexp, hypot, cbrt, expm1 and log1p (backends/tileir/
mathlib.py) and of erf, erfc and erfinv (special.py), run on the host (tests/backends/tileir/
numpy_ops.py: each step the IR op's own eval, as the GPU computes it) against exact or 40-digit
references. The bounds are docs/semantics.md's and the recipes' docstrings'; each test also
checks that its bound is tight (the worst case reaches a quarter of it), not a loose guess.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fearless import dtypes
from fearless.backends.tileir import mathlib, special
from tests.backends.tileir.numpy_ops import run
from tests.numerics import reference
from tests.numerics.reference import round_float, ulps

F32_F64 = pytest.mark.parametrize("d", [dtypes.f32, dtypes.f64], ids=str)


def _wide(rng, d, n):
    """Random floats of ``d`` across its range (both signs, subnormals too) and edge values."""
    top = 38 if d.bits == 32 else 307
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-top - 8, top, n)
    tiny = float(np.finfo(d.numpy).smallest_subnormal)
    big = float(np.finfo(d.numpy).max)
    edges = [0.0, -0.0, tiny, -tiny, 2 * tiny, big, -big, 1.0, -1.0, 8.0, -27.0, math.inf,
             -math.inf, math.nan]
    return dtypes.convert(np.concatenate([x, edges]), d).astype(np.float64)


def _same(g, want) -> bool:
    return (g == want and math.copysign(1, g) == math.copysign(1, want)) or \
        (g != g and want != want)


def _check(worst, bound):
    assert worst <= bound
    assert worst > bound / 4, (worst, bound)  # the bound is tight


@F32_F64
def test_copysign_is_exact(d):
    rng = np.random.default_rng(1)
    x, y = _wide(rng, d, 500), rng.permutation(_wide(rng, d, 500))
    for a, b, g in zip(x, y, run(mathlib.copysign, d, x, y)):
        if a == a:
            assert _same(g, math.copysign(a, b)) if b == b else abs(g) == abs(a), (a, b, g)


@F32_F64
def test_ldexp_rounds_once(d):
    rng = np.random.default_rng(2)
    x = _wide(rng, d, 1500)
    span = 300 if d.bits == 32 else 2200
    n = np.concatenate([rng.integers(-span, span, x.size - 6), [2 ** 31 - 1, -2 ** 31, 0, 1,
                                                               -1, 60]]).astype(np.int32)
    for a, k, g in zip(x, n.tolist(), run(mathlib.ldexp, d, x, n)):
        if not math.isfinite(a) or a == 0:
            want = a
        elif abs(k) > 3000:  # past every finite float's range: +-inf or +-0
            want = math.copysign(math.inf if k > 0 else 0.0, a)
        else:
            want = round_float(Fraction(a) * (Fraction(1 << k) if k >= 0 else
                                              Fraction(1, 1 << -k)), d.name)
        assert _same(g, want), (a, k, g, want)


@F32_F64
def test_hypot_is_within_its_derived_bound(d):
    """1.75 ulp for normal results (the docstring's derivation); +inf for an infinite
    argument, NaN or not."""
    rng = np.random.default_rng(3)
    x = _wide(rng, d, 1500)
    y = np.concatenate([x[:500] * rng.uniform(0, 1, 500), rng.permutation(x[500:])])
    y = dtypes.convert(y, d).astype(np.float64)
    worst = 0.0
    for a, b, g in zip(x, y, run(mathlib.hypot, d, x, y)):
        if math.isinf(a) or math.isinf(b):
            assert g == math.inf, (a, b, g)
            continue
        if a != a or b != b:
            assert g != g
            continue
        exact = reference.hypot_exact(a, b)
        rounded = round_float(Fraction(exact), d.name)
        if rounded == math.inf or rounded < np.finfo(d.numpy).tiny:
            assert g == rounded or abs(g - rounded) <= reference.ulp(rounded, d.name), (a, b)
            continue
        worst = max(worst, ulps(g, exact, d.name))
    _check(worst, 1.75)


@F32_F64
def test_cbrt_is_within_its_bound(d):
    """0.6 ulp: the last Newton step rounds once; the residual's error is below u**2."""
    x = _wide(np.random.default_rng(4), d, 2000)
    worst = 0.0
    for a, g in zip(x, run(mathlib.cbrt, d, x)):
        if a == 0 or not math.isfinite(a):
            assert _same(g, a), (a, g)
            continue
        worst = max(worst, ulps(g, reference.cbrt_exact(a), d.name))
    _check(worst, 0.6)


def _near_zero(rng, d, n):
    x = np.concatenate([rng.uniform(-1, 1, n), rng.uniform(-40, 40, n // 2),
                        rng.standard_normal(n) * 10.0 ** rng.integers(-40, 0, n),
                        [0.0, -0.0, 0.34657359, -0.34657359, 0.6931472, -0.6931472, 1e-30,
                         math.inf, -math.inf, math.nan]])
    return dtypes.convert(x, d).astype(np.float64)


@F32_F64
def test_expm1_is_within_2_ulp(d):
    rng = np.random.default_rng(5)
    top = 88.7 if d.bits == 32 else 709.7
    x = np.concatenate([_near_zero(rng, d, 1500), rng.uniform(-800, 800, 300),
                        [top, top + 0.1, -17.4, -17.6, -37.9, -38.1]])
    x = dtypes.convert(x, d).astype(np.float64)
    worst = 0.0
    for a, g in zip(x, run(mathlib.expm1, d, x)):
        if a == 0 or a != a:
            assert _same(g, a), (a, g)
            continue
        if math.isinf(a):
            assert g == (math.inf if a > 0 else -1.0), (a, g)
            continue
        exact = reference.expm1_exact(a)
        rounded = round_float(Fraction(exact), d.name)
        if rounded in (math.inf, -1.0):
            assert g == rounded, (a, g)
            continue
        worst = max(worst, ulps(g, exact, d.name))
    _check(worst, 2)


@F32_F64
def test_log1p_is_within_2_ulp(d):
    rng = np.random.default_rng(6)
    x = np.concatenate([_near_zero(rng, d, 1500), -1 + np.exp(rng.uniform(-50, -1, 300)),
                        np.exp(rng.uniform(-80, 700, 300)), [-1.0, -2.0]])
    x = dtypes.convert(x, d).astype(np.float64)
    worst = 0.0
    for a, g in zip(x, run(mathlib.log1p, d, x)):
        if a == 0 or a != a or math.isinf(a) or a <= -1:
            want = a if a == 0 or a != a or a == math.inf else \
                (-math.inf if a == -1 else math.nan)
            assert _same(g, want), (a, g)
            continue
        worst = max(worst, ulps(g, reference.log1p_exact(a), d.name))
    _check(worst, 2)


@pytest.mark.parametrize("name, bound", [("erf", 2), ("erfc", 3)])
def test_erf_and_erfc_are_within_their_bounds_in_f64(name, bound):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-1, 1, 800), rng.uniform(-6, 6, 800),
                        rng.uniform(0.4, 28, 400), [0.5, -0.5, 26.5, 27.2, 27.5]])
    recipe, exact_of = {"erf": (special.erf, reference.erf_exact),
                        "erfc": (special.erfc, reference.erfc_exact)}[name]
    worst = 0.0
    for a, g in zip(x, run(recipe, dtypes.f64, x)):
        exact = exact_of(a)
        if round_float(Fraction(exact), "f64") == 0:
            assert g == 0, (a, g)
            continue
        worst = max(worst, ulps(g, exact, "f64"))
    _check(worst, bound)
    edges = [0.0, -0.0, math.inf, -math.inf, math.nan, 30.0, -30.0]
    want = {"erf": [0.0, -0.0, 1.0, -1.0, math.nan, 1.0, -1.0],
            "erfc": [1.0, 1.0, 0.0, 2.0, math.nan, 0.0, 2.0]}[name]
    for a, g, w in zip(edges, run(recipe, dtypes.f64, np.array(edges)), want):
        assert _same(g, w), (name, a, g)


def test_erfinv_is_within_3_ulp_in_f64():
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-1, 1, 800), 1 - np.exp(rng.uniform(-36.7, -0.5, 400)),
                        -(1 - np.exp(rng.uniform(-36.7, -0.5, 100))),
                        np.exp(rng.uniform(-700, -1, 100)), [0.5, 1 - 2.0 ** -53]])
    worst = 0.0
    for a, g in zip(x, run(special.erfinv, dtypes.f64, x)):
        worst = max(worst, ulps(g, reference.erfinv_exact(a), "f64"))
    _check(worst, 3)
    edges = [0.0, -0.0, 1.0, -1.0, 1.5, -2.0, math.nan]
    want = [0.0, -0.0, math.inf, -math.inf, math.nan, math.nan, math.nan]
    for a, g, w in zip(edges, run(special.erfinv, dtypes.f64, np.array(edges)), want):
        assert _same(g, w), (a, g)
