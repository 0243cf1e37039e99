"""``dtypes.convert`` / ``dtypes.cast``, the language's one numeric conversion, against exact
rational rounding (tests/numerics/reference.py)."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from fearless import bf16, dtypes, f16, f32, f64, i8, i16, i32, i64, u8, u32, u64
from tests.numerics.reference import halfway_cases, round_float, saturate, wrap

FLOATS = [f16, bf16, f32]


def _exact_f64(values):
    return [float(q) for q in values if Fraction(float(q)) == q]


@pytest.mark.parametrize("dst", FLOATS, ids=str)
def test_f64_rounds_once_to_nearest_even(dst):
    rng = np.random.default_rng(1)
    x = np.array(_exact_f64(halfway_cases(dst.name, rng, 400)) + [1e300, -1e300, 1e-300, -0.0,
                                                                  math.inf, 65519.99, 65520.0])
    got = dtypes.convert(x, dst).astype(np.float64)
    want = np.array([round_float(v, dst.name) for v in x])
    assert np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert np.isnan(dtypes.convert(np.array([np.nan]), dst).astype(np.float64)).all()


def test_f64_just_above_a_bf16_midpoint_rounds_up():
    # ml_dtypes before 0.7 rounded f64 -> bf16 through f32, where this becomes the tie and goes
    # to even (1.0); fearless rounds once, whichever ml_dtypes is installed
    x = 1 + 2 ** -8 + 2 ** -30  # just above the midpoint of 1 and 1 + 2**-7
    assert float(dtypes.cast(x, bf16)) == 1 + 2 ** -7
    assert float(dtypes.convert(np.array([x]), bf16)[0]) == 1 + 2 ** -7


def _int_halfway(precision: int, bits: int, signed: bool, seed: int, n: int) -> list[int]:
    """Integers of ``bits`` bits at and around the midpoints of a ``precision``-bit format."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        shift = rng.randrange(2, bits - precision - (1 if signed else 0))
        mid = (2 * rng.randrange(1 << (precision - 1), 1 << precision) + 1) << (shift - 1)
        delta = rng.randrange(1, 1 << (shift - 1)) if shift > 2 else 1
        for v in (mid, mid + delta, mid - delta):
            if v < (1 << (bits - (1 if signed else 0))):
                out.append(-v if signed and rng.random() < 0.5 else v)
    return out


@pytest.mark.parametrize("src", [i32, i64, u32, u64], ids=str)
@pytest.mark.parametrize("dst", FLOATS + [f64], ids=str)
def test_integers_round_once(src, dst):
    precision = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}[dst.name]
    if precision + 2 >= src.bits:
        pytest.skip(f"every {src} is exact in {dst}")
    lo, hi = (-(1 << (src.bits - 1)), (1 << (src.bits - 1)) - 1) if src.is_signed else \
        (0, (1 << src.bits) - 1)
    values = _int_halfway(precision, src.bits, src.is_signed, src.bits + dst.bits, 300) + [lo, hi, 0, 1, hi - 1]
    got = dtypes.convert(np.array(values, src.numpy), dst).astype(np.float64)
    assert got.tolist() == [round_float(v, dst.name) for v in values]


@pytest.mark.parametrize("dst", FLOATS + [f64], ids=str)
def test_python_integers_of_any_size_round_once(dst):
    precision = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}[dst.name]
    values = _int_halfway(precision, 200, True, 7, 100) + [2 ** 1100, -(2 ** 1100), 2 ** 63,
                                                             2 ** 64 - 1, -(2 ** 63)]
    for v in values:
        assert float(dtypes.cast(v, dst)) == round_float(v, dst.name), v
    assert float(np.float32(2 ** 60 + 2 ** 36 + 1)) == 2 ** 60  # NumPy: through f64, twice
    assert float(dtypes.cast(2 ** 60 + 2 ** 36 + 1, f32)) == 2 ** 60 + 2 ** 37


@pytest.mark.parametrize("dst", [i8, i16, i32, i64, u8, u32, u64], ids=str)
def test_integers_wrap_and_floats_saturate(dst):
    ints = [0, 1, -1, 127, 128, -129, 255, 256, 2 ** 31, -(2 ** 31) - 1, 2 ** 63 - 1, -(2 ** 63)]
    assert dtypes.convert(np.array(ints, np.int64), dst).tolist() == [wrap(v, dst) for v in ints]
    huge = [2 ** 70 + 5, -(2 ** 100) - 3]
    assert [int(dtypes.cast(v, dst)) for v in huge] == [wrap(v, dst) for v in huge]
    floats = [0.0, -0.9, 0.9, 2.7, -2.7, 1e30, -1e30, math.inf, -math.inf, math.nan, 127.5,
              255.9, 2.0 ** 31, 2.0 ** 63, 2.0 ** 64, -(2.0 ** 63), 4294967295.5]
    for src in (f16, bf16, f32, f64):
        x = dtypes.convert(np.array(floats), src)
        got = dtypes.convert(x, dst).tolist()
        assert got == [saturate(float(v), dst) for v in x.astype(np.float64)], src


def test_to_bool_is_nonzero_and_nan_is_true():
    x = np.array([0.0, -0.0, 1e-40, np.nan, -np.inf])
    assert dtypes.convert(x, dtypes.bool_).tolist() == [False, False, True, True, True]
    assert dtypes.convert(np.array([0, 256], np.int64), dtypes.bool_).tolist() == [False, True]


def test_host_casts_and_bit_patterns_follow_the_same_rules():
    assert int(i8(300)) == 44 and int(u8(-1)) == 255 and int(i32(1e30)) == 2 ** 31 - 1
    assert float(bf16(1 + 2 ** -8 + 2 ** -30)) == 1 + 2 ** -7
    assert dtypes.float_bits(1 + 2 ** -8 + 2 ** -30, bf16) == 0x3F81
    assert dtypes.float_bits(1e10, f16) == 0x7C00  # past the largest f16: +inf, no error
    assert dtypes.float_bits(-1e300, f32) == 0xFF800000
    assert dtypes.convert(np.float64(3.0), bf16).shape == ()
