"""Math functions added through their definition (ir/ops/math.py) and one rule per backend:
``np.rint`` and ``math.lgamma`` in SIMT and tile kernels (and ``round(x)``, an i64 through
``np.rint``), on the CPU backend (the ops' evals)
and with ``pytest -m gpu`` on the GPU (SIMT: ``llvm.roundeven`` and libdevice's lgamma; tile:
the recipes of backends/tileir/mathlib.py), against references of their own: Python's ``round``
(ties to even, exact) and a 28-digit lgamma (tests/numerics/reference.py). The GPU is held to
docs/semantics.md's bounds.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32, f64
from fearless import tile as ft
from tests.numerics import reference
from tests.numerics.reference import round_float, ulp, wrap
from tests.support import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS, indirect=True)
DTYPES = [f16, bf16, f32, f64]


@fl.kernel
def rint_simt(x: fl.Slice, out: fl.DisjointSlice):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = np.rint(x[i])


@ft.kernel
def rint_tile(o: ft.Out, x: ft.In):
    o.store(np.rint(ft.load_like(x, o)))


@fl.kernel
def lgamma_simt(x: fl.Slice, out: fl.DisjointSlice):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = math.lgamma(x[i])


@ft.kernel
def lgamma_tile(o: ft.Out, x: ft.In):
    o.store(math.lgamma(ft.load_like(x, o)))


@fl.kernel
def round_simt(x: fl.Slice, out: fl.DisjointSlice[fl.i64]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = round(x[i]) + round(2.5) + round(-3.5) * 10  # literals: Python's, 2 - 40


def _run(track, kernels, x, dtype):
    """The kernel of ``track`` on ``x`` (rounded to ``dtype``); the results as f64."""
    simt, tile = kernels
    x = fl.asarray(np.asarray(x, np.float64).astype(dtype.numpy))
    if track == "tile":
        padded = -(-x.shape[0] // 32) * 32
        if padded != x.shape[0]:
            x = fl.asarray(np.resize(x.numpy(), padded))
        o, _ = tile(fl.full(padded, np.nan, dtype).partition(32), x).sync()
        return o.unpartition().numpy().astype(np.float64)
    out = fl.full(x.shape[0], np.nan, dtype)
    simt[simt.prepare(x.shape[0])](x, out)
    return out.numpy().astype(np.float64)


def _inputs(x, dtype):
    return np.asarray(x, np.float64).astype(dtype.numpy).astype(np.float64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("track", ["simt", "tile"])
def test_rint_rounds_half_to_even_exactly(backend, track, dtype):
    rng = np.random.default_rng(4)
    x = _inputs(np.concatenate([np.arange(-6, 6, 0.5), np.arange(-3, 3, 0.25) + 1 / 64,
                                [0.0, -0.0, 1e-30, -1e-30, 0.49999997, 2.0 ** 23 - 0.5, 2.0 ** 52,
                                 -(2.0 ** 52) - 1, 1e30, math.inf, -math.inf, math.nan],
                                rng.standard_normal(200) * 10.0 ** rng.integers(-2, 8, 200)]),
                dtype)
    got = _run(track, (rint_simt, rint_tile), x, dtype)[:x.size]
    for v, g in zip(x, got):
        want = v if not math.isfinite(v) else math.copysign(float(round(v)), v)
        same = (g == want and math.copysign(1, g) == math.copysign(1, want)) or (g != g and v != v)
        assert same, (v, g, want)


@pytest.mark.parametrize("dtype", [f16, f32, f64], ids=str)
def test_round_is_pythons_with_the_saturating_int_conversion(backend, dtype):
    x = _inputs([2.5, -2.5, 3.5, -0.5, 0.5, 0.49999997, -7.25, 1e15 + 0.5, 2.0 ** 62,
                 1e30, -1e30, math.inf, -math.inf, math.nan], dtype)
    out = fl.full(x.size, 7, fl.i64)
    round_simt[round_simt.prepare(x.size)](fl.asarray(x.astype(dtype.numpy)), out)
    lo, hi = -2 ** 63, 2 ** 63 - 1
    want = [0 if v != v else hi if v > hi else lo if v < lo else round(v) for v in x]
    assert out.numpy().tolist() == [wrap(w - 38, fl.i64) for w in want]  # i64 arithmetic


# CUDA's lgamma bounds (ulp) hold outside these intervals, where lgamma has its first roots
_CUDA_LGAMMA = {"f32": (6, (-10.001, -2.264)), "f64": (4, (-11.0001, -2.2637))}


def _lgamma_inputs(dtype):
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(0, 3, 120), rng.uniform(3, 40, 60),
                        np.exp(rng.uniform(-30, 20, 40)), 1 + rng.uniform(-0.01, 0.01, 20),
                        2 + rng.uniform(-0.01, 0.01, 20), rng.uniform(-12, 0, 120),
                        -np.exp(rng.uniform(2.5, 6, 20)),
                        [0.0, -0.0, 1.0, 2.0, -1.0, -3.0, 0.5, -0.5, 1e-20, math.inf,
                         -math.inf, math.nan]])
    return _inputs(x, dtype)


def _lgamma_bound(backend, track, fmt, v, want):
    """How far the result may be from the exact ``want`` (docs/semantics.md)."""
    work = "f64" if fmt == "f64" else "f32"  # f16/bf16 are computed in f32, rounded once
    rounding = 0.5 * ulp(want, fmt) if fmt != work else 0.0
    if backend == "cpu":  # Python's lgamma (within 8 * 2**-52 * max(1, |lgamma|)), rounded once
        return 0.5 * ulp(want, fmt) + 2.0 ** -49 * max(1.0, abs(want))
    if track == "simt":
        ulps, (lo, hi) = _CUDA_LGAMMA[work]
        return rounding + (ulps * ulp(want, work) if not lo <= v <= hi else math.inf)
    if v >= 0:
        return rounding + 5 * ulp(want, work)
    unit = 2.0 ** -(24 if work == "f32" else 53)
    r = abs(v - round(v))
    terms = 1 + abs(math.log(math.sin(math.pi * r))) + reference.lgamma(1 - v)
    return rounding + 12 * unit * terms


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("track", ["simt", "tile"])
def test_lgamma_keeps_its_bounds(backend, track, dtype):
    x = _lgamma_inputs(dtype)
    got = _run(track, (lgamma_simt, lgamma_tile), x, dtype)[:x.size]
    largest = float(reference.FORMATS[dtype.name].largest)
    for v, g in zip(x, got):
        want = reference.lgamma(v)
        if not abs(want) <= largest or round_float(want, dtype.name) == math.inf:
            # NaN, a pole (+inf), or past the largest value
            assert g == math.inf or (g != g and want != want), (v, g, want)
            continue
        if want == 0:  # lgamma(1) and lgamma(2): +0.0
            assert g == 0 and math.copysign(1, g) == 1, (v, g)
            continue
        bound = _lgamma_bound(backend, track, dtype.name, v, want)
        assert abs(g - want) <= bound, (v, g, want, abs(g - want) / ulp(want, dtype.name))
