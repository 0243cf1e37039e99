"""``x ** y`` is C's ``pow`` on every backend (docs/semantics.md), also where NumPy's ``power``
is not: with an exponent 0.5 given as a scalar or a broadcast, NumPy takes a square root, so
``(-inf) ** 0.5`` was NaN and ``(-0.0) ** 0.5`` was -0.0 in SIMT kernels on the CPU backend, where
C and the GPU give +inf and +0.0 (found through the differential fuzzer's tile seeds 4114 and
7712, whose reference had the same flaw).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from tests.support import BACKENDS

X = np.array([-math.inf, -0.0, 0.0, 4.0, 2.25, math.inf, -4.0, 1e-300], np.float64)


def _c_pow(x: float, y: float) -> float:
    """C99 Annex F's pow for the cases X holds (math.pow raises where C returns NaN)."""
    try:
        return math.pow(x, y)
    except ValueError:
        return math.nan


@fl.kernel
def root(x: fl.Slice[fl.f64], out: fl.DisjointSlice[fl.f64]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] ** 0.5


@ft.kernel
def root_tile(o: ft.Out[fl.f64], x: ft.In[fl.f64]):
    o.store(ft.load_like(x, o) ** ft.full((1,), 0.5, fl.f64))


def _check(got):
    want = np.array([_c_pow(float(v), 0.5) for v in X])
    np.testing.assert_array_equal(got, want)  # NaN == NaN here
    real = ~np.isnan(want)  # a NaN's sign is unspecified
    assert list(np.signbit(got[real])) == list(np.signbit(want[real]))


@pytest.mark.parametrize("where", BACKENDS)
def test_simt_power_is_c_pow(where):
    out = fl.full(X.size, 7.0, fl.f64)  # poison
    root[root.prepare(X.size)](fl.asarray(X), out)
    _check(out.numpy())


@pytest.mark.parametrize("where", BACKENDS)
def test_tile_power_is_c_pow(where):
    o, _ = root_tile(fl.full(X.size, 7.0, fl.f64).partition(8), fl.asarray(X)).sync()
    _check(o.unpartition().numpy())
