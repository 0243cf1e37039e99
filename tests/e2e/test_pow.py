"""``x ** y`` is C's ``pow`` on every backend (docs/semantics.md), also where NumPy's ``power``
is not: with an exponent 0.5 given as a scalar or a broadcast, NumPy takes a square root, so
``(-inf) ** 0.5`` was NaN and ``(-0.0) ** 0.5`` was -0.0 in SIMT kernels on the CPU backend, where
C and the GPU give +inf and +0.0 (found through the differential fuzzer's tile seeds 4114 and
7712, whose reference had the same flaw). The GPU is held to C's special cases exactly (C99
Annex F) and to its ulp bound (plus half an ulp, the CPU's rounding) elsewhere.
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


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_simt_power_is_c_pow(backend):
    out = fl.full(X.size, 7.0, fl.f64)  # poison
    root[root.prepare(X.size)](fl.asarray(X), out)
    _check(out.numpy())


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_tile_power_is_c_pow(backend):
    o, _ = root_tile(fl.full(X.size, 7.0, fl.f64).partition(8), fl.asarray(X)).sync()
    _check(o.unpartition().numpy())


# every pair of these: C99 Annex F's special cases (zeros, infinities, NaN, 1, -1) and
# ordinary values
SPECIAL = [-math.inf, -2.5, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 2.5, 3.0, math.inf,
           math.nan]
ULPS = {np.float32: 4, np.float64: 2}  # the GPU's pow bound in ulps (docs/semantics.md)


@ft.kernel
def power_tile(o: ft.Out, x: ft.In, y: ft.In):
    o.store(ft.load_like(x, o) ** ft.load_like(y, o))


@fl.kernel
def power_simt(x: fl.Slice, y: fl.Slice, out: fl.DisjointSlice):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] ** y[i]


def _grid(np_type):
    xs, ys = np.meshgrid(SPECIAL, SPECIAL, indexing="ij")
    return xs.ravel().astype(np_type), ys.ravel().astype(np_type)


def _c_pow_grid(xs, ys):
    """C's pow in f64 rounded once to the operands' type (what the CPU backend computes):
    NumPy's power over whole arrays calls the C library's pow."""
    with np.errstate(all="ignore"):
        return np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(xs.dtype)


def _run_power(track, xs, ys):
    dt = fl.f32 if xs.dtype == np.float32 else fl.f64
    if track == "tile":
        o, *_ = power_tile(fl.full(xs.size, 7.0, dt).partition(32), fl.asarray(xs),
                           fl.asarray(ys)).sync()
        return o.unpartition().numpy()
    out = fl.full(xs.size, 7.0, dt)
    power_simt[power_simt.prepare(xs.size)](fl.asarray(xs), fl.asarray(ys), out)
    return out.numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("np_type", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("track", ["tile", "simt"])
def test_power_special_cases_are_exact_and_the_rest_within_the_bound(backend, track, np_type):
    xs, ys = _grid(np_type)
    got, want = _run_power(track, xs, ys), _c_pow_grid(xs, ys)
    special = ~np.isfinite(xs) | ~np.isfinite(ys) | (xs == 0) | (ys == 0) | (xs == 1) | \
        ~np.isfinite(want) | (want == 0)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), [
        (x, y, g) for x, y, g, w in zip(xs, ys, got, want) if np.isnan(g) != np.isnan(w)]
    exact = special & ~nan
    wrong = exact & ((got != want) | (np.signbit(got) != np.signbit(want)))
    assert not wrong.any(), list(zip(xs[wrong], ys[wrong], got[wrong], want[wrong]))
    ulp = np.spacing(np.abs(want[~special]).astype(np_type))
    assert np.all(np.abs(got[~special].astype(np.float64) - want[~special]) <=
                  (ULPS[np_type] + 0.5) * ulp)
    if backend == "cpu":  # the CPU backend is C's pow, bit for bit
        np.testing.assert_array_equal(got, want)
