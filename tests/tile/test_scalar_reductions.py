"""Reductions to one value: ``ft.sum(t)``, ``ft.max(t)``, ``ft.min(t)``, ``ft.argmax(t)`` (no
axis), and a 1-d tile reduced along its axis, give a scalar (a 0-d tile) that takes part in
arithmetic and decides ``if`` and ``while``. Checked against NumPy on the CPU backend (outputs
poisoned first) and, with ``-m gpu``, on the GPU; on the CPU every kernel is also compiled for
sm_80 and sm_90 when tileiras is installed (``tests.support.launch_tile``)."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f16, f32, i8, i32
from fearless.compiler import compile_tile
from fearless.ir import types as T
from tests.support import BACKENDS, exact_ints, launch_tile as launch
from tests.tile import control_kernels as C


def poisoned(shape, dtype=f32):
    return fl.full(shape, np.nan if dtype.is_float else -7, dtype)


def _model_every_reduction(xh, bm=16, bn=32):
    x = xh.astype(np.float64)
    rows = []
    for i in range(xh.shape[0] // bm):
        t = x[i * bm:(i + 1) * bm, :bn]
        line = t[0]
        rows.append([t.sum(), t.max(), t.min(), np.argmax(t), line.sum(), np.argmax(line),
                     t.sum(), float((t > 0).any())])
    return np.array(rows)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [f32, f16, i32, i8], ids=lambda d: d.name)
def test_every_reduction_to_one_value(backend, dt):
    xh = exact_ints((64, 32), seed=1, dt=dt)  # small integers: every sum is exact
    xh[16:32] = np.abs(xh[16:32]) * -1  # a tile with no element > 0, and ties for argmax
    got = launch(C.every_reduction, poisoned((4, 8)).partition((1, 8)), fl.asarray(xh))
    np.testing.assert_array_equal(got, _model_every_reduction(xh))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_scalar_in_tile_arithmetic(backend):
    xh = np.random.default_rng(2).standard_normal(512).astype(np.float32) * 4
    got = launch(C.softmax_tile, poisoned(512).partition(64), fl.asarray(xh))
    x = xh.astype(np.float64).reshape(8, 64)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(1, keepdims=True)).ravel(), rtol=1e-5,
                               atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_scalar_decides_an_if(backend):
    xh = exact_ints(512, seed=3)
    xh[:64] = np.abs(xh[:64]) + 1  # one tile certainly positive, one certainly negative
    xh[64:128] = -np.abs(xh[64:128]) - 1
    got = launch(C.sign_of_sum, poisoned(512).partition(64), fl.asarray(xh))
    t = xh.reshape(8, 64)
    want = np.where(t.sum(1, keepdims=True) > 0, t, -t).ravel()
    np.testing.assert_array_equal(got, want)


def test_the_ir_types_a_full_reduction_as_a_scalar():
    k = C.sign_of_sum
    types = (T.TensorView(f32, 1, T.Role.OUT, (64,)), T.TensorView(f32, 1, T.Role.IN))
    fn = compile_tile(k.captured, k._ir_params(types), {}, None, "ir").fn
    (reduce,) = [op for op in fn.walk() if op.name == "tile.reduce"]
    assert reduce.results[0].type == T.Scalar(f32)
