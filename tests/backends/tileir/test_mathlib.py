"""The Tile IR recipes of math functions (backends/tileir/mathlib.py), run on NumPy.

Each operation of a recipe is the IR op's own eval at the work type (IEEE adds and multiplies,
correctly rounded log and sin): what the recipe computes on the GPU but for the error of Tile IR's
log and sin. The errors measured here are the bounds the recipes' docstrings state.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from fearless import dtypes
from fearless.backends.tileir import mathlib
from tests.backends.tileir.numpy_ops import run
from tests.numerics import reference
from tests.numerics.reference import ulp


@pytest.mark.parametrize("d", [dtypes.f32, dtypes.f64], ids=str)
def test_rint_is_exact(d):
    rng = np.random.default_rng(1)
    big = 2.0 ** (23 if d.bits == 32 else 52)
    x = np.concatenate([[0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, big - 0.5, big,
                         -big + 1.5, 2 * big + 2, 1e-40, -1e-300, math.inf, -math.inf, math.nan],
                        np.arange(-8, 8, 0.25), rng.standard_normal(500) * 10.0 **
                        rng.integers(-3, 20, 500)])
    x = dtypes.convert(x, d).astype(np.float64)
    got = run(mathlib.rint, d, x)
    for v, g in zip(x, got):  # Python's round: ties to even, exactly
        want = v if not math.isfinite(v) else math.copysign(float(round(v)), v)
        assert (g == want and math.copysign(1, g) == math.copysign(1, want)) or \
            (g != g and want != want), (v, g, want)


def _lgamma_samples(rng, n=1500):
    return np.concatenate([
        rng.uniform(0, 3, n), rng.uniform(3, 12, n // 2), np.exp(rng.uniform(-20, 80, n // 2)),
        rng.uniform(-12, 0, n), -np.exp(rng.uniform(-20, 30, n // 4)),
        1 + rng.uniform(-1e-3, 1e-3, n // 4), 2 + rng.uniform(-1e-3, 1e-3, n // 4),
        [0.0, -0.0, 1.0, 2.0, 0.5, 1.5, 2.5, 8.0, 10.0, -1.0, -2.0, -2.5, 1e-38, 1e-300, 3e38,
         1e308, math.inf, -math.inf, math.nan]])


@pytest.mark.parametrize("d, ulps", [(dtypes.f32, 3), (dtypes.f64, 3)], ids=str)
def test_lgamma_recipe_keeps_its_stated_bounds(d, ulps):
    """x >= 0: ``ulps`` ulp of the result; x < 0: 8 units of roundoff times the sizes of the
    reflection's terms (they cancel near lgamma's roots). Against a 28-digit reference."""
    x = dtypes.convert(_lgamma_samples(np.random.default_rng(2)), d).astype(np.float64)
    got = run(mathlib.lgamma, d, x)
    unit, largest = 2.0 ** -(24 if d.bits == 32 else 53), float(np.finfo(d.numpy).max)
    worst = {True: 0.0, False: 0.0}
    for v, g in zip(x, got):
        want = reference.lgamma(v)
        if not abs(want) <= largest:  # NaN, a pole, or past the largest float
            assert g == math.copysign(math.inf, want) or (g != g and want != want), (v, g, want)
            continue
        if v >= 0:
            bound = ulps * ulp(want, d.name)
        else:
            r = abs(v - round(v))
            bound = 8 * unit * (1 + abs(math.log(math.sin(math.pi * r))) +
                                reference.lgamma(1 - v))
        worst[v >= 0] = max(worst[v >= 0], abs(g - want) / bound)
        assert abs(g - want) <= bound, (v, g, want, abs(g - want) / ulp(want, d.name))
    assert min(worst.values()) > 0.25, worst  # the bounds are tight, not loose guesses
