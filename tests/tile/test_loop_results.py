"""A ``for`` loop's result read after the loop, where an ``if`` may replace it.

tileiras 13.4 crashed, or computed wrong values, when an ``if`` branch yielded a loop result
unchanged and the loop's carried tile started as a constant (fuzz seeds 2968 and 11181); the
lowering now copies each loop result right after the loop (``control._copy``), which the last
test checks in the emitted Tile IR. These kernels are
that shape: on the cpu backend they check the language, on the GPU that the lowering computes the
same, and every run cross-compiles them in CI (FEARLESS_CROSS_COMPILE), which is where the crash
showed.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f16, f32, i8, i32, i64
from fearless import tile as ft
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import TileType
from fearless.compiler import compile_tile
from fearless.ir import types as T
from tests.support import BACKENDS, on_cpu, random_array

ROWS, COLS, TILE = 64, 64, (16, 32)  # 4 x 2 tiles: both branches run


@ft.kernel
def count_or_load(out: ft.Out, x: ft.In, n: int):
    acc = ft.zeros(out.tile_shape, out.dtype)
    for _ in range(n):
        acc = acc + 1
    t = ft.load_like(x, out)
    if out.tile_index[0] % 2 == 0:  # no else: the odd rows of tiles keep the loop's result
        acc = t + 1
    out.store(acc)


@ft.kernel
def count_or_load_swapped(out: ft.Out, x: ft.In, n: int):
    acc = ft.zeros(out.tile_shape, out.dtype)
    for _ in range(n):
        acc = acc + 1
    if out.tile_index[0] % 2 != 0:
        pass  # the then branch keeps the loop's result
    else:
        acc = ft.load_like(x, out) + 1
    out.store(acc)


@ft.kernel
def count_or_load_plus_zero(out: ft.Out, x: ft.In, n: int):
    acc = ft.zeros(out.tile_shape, out.dtype)
    for _ in range(n):
        acc = acc + 1
    if out.tile_index[0] % 2 == 0:
        acc = ft.load_like(x, out) + 1
    else:
        acc = acc + 0  # tileiras folds this back into the loop result
    out.store(acc)


KERNELS = [count_or_load, count_or_load_swapped, count_or_load_plus_zero]


def _run(kernel, xh, n, dt):
    out = fl.full(xh.shape, 99, dt).partition(TILE)  # 99: no element's expected value
    out, _, _ = kernel(out, fl.asarray(xh), n).sync()
    return out.unpartition().numpy()


def _want(xh, n):
    """Even rows of tiles: x + 1 rounded once to x's dtype (ints stay within it); odd: n."""
    want = np.full(xh.shape, n, xh.dtype)
    even = (np.arange(ROWS) // TILE[0]) % 2 == 0
    want[even] = xh[even] + xh.dtype.type(1)
    return want


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [f16, f32, i8, i32], ids=lambda d: d.name)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_a_branch_may_keep_the_loop_result(backend, kernel, dt):
    xh = random_array(dt, (ROWS, COLS), seed=7)
    n = 5
    got = _run(kernel, xh, n, dt)
    np.testing.assert_array_equal(got, _want(xh, n))
    if backend == "cuda":
        np.testing.assert_array_equal(got, on_cpu(lambda: _run(kernel, xh, n, dt)))


@ft.kernel
def matmul_or_load(c: ft.Out[f32], a: ft.In[f32], b: ft.In[f32], x: ft.In[f32]):
    i, j = c.tile_index
    acc = ft.zeros(c.tile_shape, f32)
    for k in range(ft.cdiv(a.shape[1], 16)):
        acc = ft.mma(ft.load(a, (i, k), (16, 16)), ft.load(b, (k, j), (16, 32)), acc)
    if j % 2 == 0:  # the shape of fuzz seed 11181, which computed wrong values on the GPU
        acc = ft.load_like(x, c)
    c.store(acc)


def _matmul(ah, bh, xh):
    c = fl.full(xh.shape, np.nan, f32).partition(TILE)
    c, *_ = matmul_or_load(c, fl.asarray(ah), fl.asarray(bh), fl.asarray(xh)).sync()
    return c.unpartition().numpy()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_branch_may_keep_the_mma_loop_result(backend):
    ah, bh = random_array(f32, (ROWS, 48), 8), random_array(f32, (48, 128), 9)
    xh = random_array(f32, (ROWS, 128), 10)
    got = _matmul(ah, bh, xh)
    a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
    want = a64 @ b64
    kept = (np.arange(128) // TILE[1]) % 2 == 0
    want[:, kept] = xh[:, kept]
    # mma on f32 inputs may round them to tf32 (2^-11) on tensor cores, then adds 48 terms in f32
    bound = (np.abs(a64) @ np.abs(b64)) * (2 * 2.0 ** -11 + 48 * 2.0 ** -24)
    bound[:, kept] = 0
    assert np.all(np.abs(got - want) <= bound)


def _ops(block):
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from _ops(region)


@pytest.mark.parametrize("dt", [f16, f32, i8, i32], ids=lambda d: d.name)
def test_the_lowering_copies_each_loop_result_before_any_use(dt):
    """Without tileiras too: every tile a ``for`` gives back is used only by the copy
    (``x + (-0.0)`` for floats, ``assume`` for integers) that ``control._copy`` makes right after
    the loop."""
    types = (T.TensorView(dt, 2, T.Role.OUT, TILE), T.TensorView(dt, 2, T.Role.IN),
             T.Scalar(i64))
    k = count_or_load
    module = decode(compile_tile(k.captured, k._ir_params(types), {}, "sm_90", "tileir").tileir)
    (fn,) = module.functions
    ops = list(_ops(fn.body))
    loops = [op for op in ops if op.name == "for"]
    assert loops
    for loop in loops:
        for result in loop.results:
            if not isinstance(result.type, TileType) or result.type.shape == ():
                continue  # the loop counter's slot: a 0-d i64
            users = [op for op in ops if any(v is result for v in op.fields.values()
                                             if not isinstance(v, (list, tuple)))]
            assert [u.name for u in users] == ["addf" if dt.is_float else "assume"]
