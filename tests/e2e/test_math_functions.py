"""The math functions added through their OpDef (issue 11): ``math.cbrt``, ``hypot``, ``atan2``,
``copysign``, ``fmod``, ``expm1``, ``log1p``, ``erf``, ``erfc``, ``ldexp`` and
``fl.math.erfinv``, in SIMT and tile kernels, f16/bf16/f32/f64, on the cpu backend (the ops'
evals) and with ``pytest -m gpu`` on the GPU (SIMT: libdevice; tile: the recipes of
backends/tileir/mathlib.py and special.py, and Tile IR's ``remf`` and ``atan2``), against
references of their own (exact rationals, 40-digit decimals, NumPy's f64 ``arctan2``), held to
docs/semantics.md's bounds. Outputs are poisoned with NaN first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32, f64
from fearless import tile as ft
from tests.numerics import reference
from tests.numerics.reference import round_float, ulp
from tests.support import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS, indirect=True)
DTYPES = [f16, bf16, f32, f64]
N = 256  # 8 tiles of 32; several SIMT blocks' worth of lanes


@dataclass(frozen=True)
class Fn:
    fn: Callable            # what the kernel calls
    arity: int
    exact: Callable         # (args as floats) -> the exact result: Fraction/Decimal or a float
    inputs: Callable        # (rng) -> list of float64 arrays (and an int array for ldexp)
    simt: tuple = (0, 0)    # CUDA's bounds in ulp (f32, f64), docs/semantics.md
    tile: tuple = (0, 0)    # the tile track's (its work type f32 or f64, then f64)
    tile_f64: bool = False  # the tile recipe works in f64 for every type (erf, erfc, erfinv)


def _spread(rng, n, lo=-30, hi=30):
    return rng.standard_normal(n) * 10.0 ** rng.integers(lo, hi, n)


def _special_or(fn):
    """``fn`` on finite args; NaN/inf args by NumPy's f64 function (exact there)."""
    def exact(*args):
        return fn(*args) if all(map(math.isfinite, args)) else None
    return exact


def _hypot(x, y):
    if math.isinf(x) or math.isinf(y):
        return math.inf
    return reference.hypot_exact(x, y) if x == x and y == y else math.nan


def _ldexp(x, n):
    if not math.isfinite(x) or x == 0:
        return x
    if abs(n) > 3000:
        return math.copysign(math.inf if n > 0 else 0.0, x)
    return Fraction(x) * (Fraction(1 << n) if n >= 0 else Fraction(1, 1 << -n))


def _unit(rng, n):
    return np.concatenate([rng.uniform(-1, 1, n - 40), 1 - np.exp(rng.uniform(-30, -1, 20)),
                           [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, math.nan] * 2 + [0.999, 1e-30,
                                                                                   -1e-30, 0.9]])


FUNCTIONS = {
    "cbrt": Fn(math.cbrt, 1, lambda x: x if x == 0 or not math.isfinite(x)
               else reference.cbrt_exact(x),
               lambda rng: [np.concatenate([_spread(rng, N - 8), [0.0, -0.0, 8.0, -27.0,
                                                                  math.inf, -math.inf,
                                                                  math.nan, 1e-300]])],
               simt=(1, 1), tile=(0.6, 0.6)),
    "hypot": Fn(math.hypot, 2, _hypot,
                lambda rng: [np.concatenate([_spread(rng, N - 6), [math.inf, math.nan, 0.0,
                                                                   -3.0, 1e-300, 0.0]]),
                             np.concatenate([_spread(rng, N - 6), [math.nan, -math.inf, 0.0,
                                                                   4.0, 1e-300, -0.0]])],
                simt=(3, 2), tile=(1.75, 1.75)),
    "atan2": Fn(math.atan2, 2, lambda y, x: float(np.arctan2(y, x)),
                lambda rng: [np.concatenate([_spread(rng, N - 8, -5, 5),
                                             [0.0, -0.0, 0.0, 1.0, math.inf, -math.inf, 2.0,
                                              math.nan]]),
                             np.concatenate([_spread(rng, N - 8, -5, 5),
                                             [0.0, -0.0, -1.0, math.inf, math.inf, 3.0,
                                              -math.inf, 1.0]])],
                simt=(3, 2), tile=(3, 2)),
    "copysign": Fn(math.copysign, 2, lambda x, y: math.copysign(x, y) if y == y else abs(x),
                   lambda rng: [_spread(rng, N), np.concatenate([_spread(rng, N - 4),
                                                                 [0.0, -0.0, math.inf,
                                                                  -math.inf]])]),
    "fmod": Fn(math.fmod, 2, lambda x, y: math.fmod(x, y) if math.isfinite(x) and y else
               (x if math.isinf(y) and math.isfinite(x) else math.nan),
               lambda rng: [np.concatenate([_spread(rng, N - 4, -8, 8), [5.5, -5.5, math.inf,
                                                                         3.0]]),
                            np.concatenate([_spread(rng, N - 4, -8, 8), [2.0, 2.0, 1.0,
                                                                         0.0]])]),
    "expm1": Fn(math.expm1, 1, lambda x: x if x == 0 or x != x else
                (math.inf if x == math.inf else -1.0 if x == -math.inf else
                 reference.expm1_exact(x)),
                lambda rng: [np.concatenate([rng.uniform(-2, 2, N // 2),
                                             _spread(rng, N // 2 - 6, -12, 2),
                                             [0.0, -0.0, 90.0, -50.0, math.inf, math.nan]])],
                simt=(1, 1), tile=(2, 2)),
    "log1p": Fn(math.log1p, 1, lambda x: x if x == 0 or x != x or x == math.inf else
                (-math.inf if x == -1 else math.nan if x < -1 else reference.log1p_exact(x)),
                lambda rng: [np.concatenate([rng.uniform(-0.9, 2, N // 2),
                                             np.abs(_spread(rng, N // 2 - 6, -12, 12)),
                                             [0.0, -0.0, -1.0, -2.0, math.inf, math.nan]])],
                simt=(1, 1), tile=(2, 2)),
    "erf": Fn(math.erf, 1, lambda x: x if x == 0 or x != x else
              math.copysign(1.0, x) if math.isinf(x) else reference.erf_exact(x),
              lambda rng: [np.concatenate([rng.uniform(-4, 4, N - 6),
                                           [0.0, -0.0, 0.5, -6.0, math.inf, math.nan]])],
              simt=(2, 2), tile=(2, 2), tile_f64=True),
    "erfc": Fn(math.erfc, 1, lambda x: x if x != x else
               (0.0 if x == math.inf else 2.0 if x == -math.inf else reference.erfc_exact(x)),
               lambda rng: [np.concatenate([rng.uniform(-3, 9, N - 6),
                                            [0.0, -0.0, 0.5, 26.0, math.inf, math.nan]])],
               simt=(4, 5), tile=(3, 3), tile_f64=True),
    "erfinv": Fn(fl.math.erfinv, 1, lambda x: reference.erfinv(x) if x != x or abs(x) >= 1
                 or x == 0 else reference.erfinv_exact(x),
                 lambda rng: [_unit(rng, N)], simt=(2, 5), tile=(3, 3), tile_f64=True),
    "ldexp": Fn(math.ldexp, 2, _ldexp,
                lambda rng: [np.concatenate([_spread(rng, N - 4, -5, 5),
                                             [0.0, math.inf, math.nan, 1.0]]),
                             np.concatenate([rng.integers(-140, 140, N - 8),
                                             [3, 3, 3, 2 ** 40, -2 ** 40, 1, -1, 0]])]),
}


def _simt_kernel(fn, arity):
    if arity == 1:
        @fl.kernel
        def unary(x: fl.Slice, out: fl.DisjointSlice):
            i = fl.thread.index_1d()
            if i < len(out):
                out[i] = fn(x[i])
        return unary

    @fl.kernel
    def binary(x: fl.Slice, y: fl.Slice, out: fl.DisjointSlice):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = fn(x[i], y[i])
    return binary


def _tile_kernel(fn, arity):
    if arity == 1:
        @ft.kernel
        def unary(o: ft.Out, x: ft.In):
            o.store(fn(ft.load_like(x, o)))
        return unary

    @ft.kernel
    def binary(o: ft.Out, x: ft.In, y: ft.In):
        o.store(fn(ft.load_like(x, o), ft.load_like(y, o)))
    return binary


KERNELS = {(name, track): (_simt_kernel if track == "simt" else _tile_kernel)(f.fn, f.arity)
           for name, f in FUNCTIONS.items() for track in ("simt", "tile")}


def _arguments(name, dtype):
    """The inputs of ``name`` as host arrays: floats rounded to ``dtype``; ldexp's exponents
    i64 (SIMT, which saturates them) or i32 (tile)."""
    args = FUNCTIONS[name].inputs(np.random.default_rng(sum(map(ord, name))))
    with np.errstate(over="ignore"):  # past f16's range: +-inf
        return [a.astype(np.int64) if a.dtype.kind == "i" else
                np.asarray(a, np.float64).astype(dtype.numpy) for a in args]


def _run(name, track, dtype, args):
    kernel = KERNELS[name, track]
    tensors = [fl.asarray(a) for a in args]
    if track == "tile":
        out, *_ = kernel(fl.full(N, np.nan, dtype).partition(32), *tensors).sync()
        return out.unpartition().numpy().astype(np.float64)
    out = fl.full(N, np.nan, dtype)
    kernel[kernel.prepare(N)](*tensors, out)
    return out.numpy().astype(np.float64)


def _bound(backend, track, f: Fn, fmt: str, exact: float) -> float:
    """How far from the exact result the result may be (docs/semantics.md)."""
    if f.simt == (0, 0):  # exact functions
        return 0.0
    if backend == "cpu":  # the f64 function (about 1 ulp; ours, erfinv, 2), rounded once
        return 0.5 * ulp(exact, fmt) + 2 * ulp(exact, "f64")
    work = "f64" if fmt == "f64" or (track == "tile" and f.tile_f64) else "f32"
    ulps = (f.simt if track == "simt" else f.tile)[work == "f64"]
    if track == "simt":
        ulps += 0.5  # CUDA's bounds are from the correctly rounded result
    rounding = 0.5 * ulp(exact, fmt) if fmt != work else 0.0
    subnormal = ulp(exact, work) if abs(exact) < 2.0 ** reference.FORMATS[work].emin else 0
    return rounding + ulps * ulp(exact, work) + subnormal


def _same(g, want) -> bool:
    return (g == want and math.copysign(1, g) == math.copysign(1, want)) or \
        (g != g and want != want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("track", ["simt", "tile"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_math_function_keeps_its_bound(backend, name, track, dtype):
    f = FUNCTIONS[name]
    args = _arguments(name, dtype)
    got = _run(name, track, dtype, args)
    fmt = dtype.name
    for *xs, g in zip(*(a.tolist() for a in args), got.tolist()):
        want = f.exact(*xs)
        if isinstance(want, float) and (want != want or math.isinf(want) or want == 0):
            if name in ("cbrt", "ldexp", "copysign", "fmod", "expm1", "log1p", "erf", "erfinv"):
                assert _same(g, want), (xs, g, want)
            else:  # a zero of hypot, erfc, atan2 (its sign is atan2's) or a special value
                assert _same(g, want) or (g == want == 0 and name != "atan2"), (xs, g, want)
            continue
        rounded = round_float(Fraction(want), fmt)
        if math.isinf(rounded) or rounded == 0 or abs(rounded) < 2 * ulp(0.0, fmt):
            # past the format's range or at its bottom: the rounded value (or a neighbour)
            assert _same(g, rounded) or abs(g - rounded) <= ulp(0.0, fmt), (xs, g, rounded)
            continue
        bound = _bound(backend, track, f, fmt, float(rounded))
        error = float(abs(Fraction(g) - Fraction(want)))
        if f.simt == (0, 0):
            assert _same(g, rounded), (xs, g, rounded)
        else:
            assert error <= bound, (name, xs, g, float(want), error / ulp(float(rounded), fmt))
