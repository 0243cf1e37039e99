"""``while``, ``break``, ``continue`` and ``return`` in tile kernels (lowered to Tile IR ``loop``,
``break``, ``continue`` and ``return``: backends/tileir/control.py), checked against a NumPy
model of each kernel on the CPU backend (the reference semantics; outputs poisoned first) and,
with ``-m gpu``, on the GPU. On the CPU every kernel is also compiled for sm_80 and sm_90 when
tileiras is installed (``tests.support.launch_tile``), which is where a tileiras crash
shows.

The data are small integers stored as floats, so every sum and product is exact on both
backends (an FMA or another order of additions changes nothing) and every decision a kernel
takes on its data is the same on the GPU; the one division (``scaled_down``) is compared with a
tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import f16, f32, i8, i32
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import TileType
from fearless.compiler import compile_tile
from fearless.ir import types as T
from tests.support import BACKENDS, exact_ints, launch_tile as launch
from tests.tile import control_kernels as C

N, TILE = 512, 64  # 8 tile blocks


def poisoned(shape, dtype=f32):
    return fl.full(shape, np.nan if dtype.is_float else -7, dtype)


def tiles(xh):
    return xh.astype(np.float64).reshape(-1, TILE)


def per_tile(model, xh, *args):
    return np.concatenate([model(t.copy(), *args) for t in tiles(xh)])


def _run(kernel, xh, *args):
    return launch(kernel, poisoned(N).partition(TILE), fl.asarray(xh), *args)


# while ------------------------------------------------------------------------------------------

def _halve(t, limit):
    k = 0
    while k < 64 and np.abs(t).max() > limit:
        t = t * 0.5
        k += 1
    return t + k * 1000


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_while_on_a_reduction(backend):
    xh = exact_ints(N, 4, lo=-40, hi=40)
    np.testing.assert_array_equal(_run(C.halve_until_small, xh, 3.0),
                                  per_tile(_halve, xh, 3.0))


def _while_skip_stop(t, n, limit):
    acc, k = np.zeros_like(t), 0
    while k < n:
        k += 1
        if k % 3 == 0:
            continue
        acc = acc + t * k
        if k > 1:
            if acc.max() > limit:
                break
    return acc + k * 1000


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("n", [0, 1, 10])
def test_while_with_break_and_continue(backend, n):
    xh = exact_ints(N, 5)
    np.testing.assert_array_equal(_run(C.while_skip_stop, xh, n, 30.0),
                                  per_tile(_while_skip_stop, xh, n, 30.0))


# for with break and continue ------------------------------------------------------------------

def _for_skip_stop(t, n, limit):
    acc, steps, last = np.zeros_like(t), 0, -1
    for k in range(2, n):
        last = k
        if k % 2 == 1:
            continue
        acc = acc + t
        steps += 1
        if acc.max() > limit:
            break
    return acc + steps * 1000 + last * 100000


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("n", [0, 3, 12])
def test_for_with_break_and_continue(backend, n):
    xh = exact_ints(N, 6)
    np.testing.assert_array_equal(_run(C.for_skip_stop, xh, n, 10.0),
                                  per_tile(_for_skip_stop, xh, n, 10.0))


def _for_continue(t, n):
    out = np.zeros_like(t)
    for k in range(n):
        if k % 2 == 0:
            continue
        if k % 3 == 0:
            out = out - 1.0
            continue
        out = out + t * k
    return out


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_continue_in_a_for_that_reads_and_writes_its_tile(backend):
    xh = exact_ints(N, 7)
    np.testing.assert_array_equal(_run(C.for_continue, xh, 9), per_tile(_for_continue, xh, 9))


def _nested_break(t, n, limit):
    acc = np.zeros_like(t)
    for i in range(n):
        j = 0
        while True:
            j += 1
            acc = acc + t
            if acc.max() > limit * (i + 1) or j >= 4:
                break
        acc = acc - 1.0
    return acc


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_break_leaves_the_inner_loop_only(backend):
    xh = exact_ints(N, 8)
    np.testing.assert_array_equal(_run(C.nested_break, xh, 5, 6.0),
                                  per_tile(_nested_break, xh, 5, 6.0))


# return -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_an_early_return_leaves_the_tile_unwritten(backend):
    xh = exact_ints(N, 9)
    xh[:TILE] = np.abs(xh[:TILE]) + 1  # tiles 0 and 5 return before their store
    xh[5 * TILE:6 * TILE] = np.abs(xh[5 * TILE:6 * TILE]) + 1
    got = _run(C.store_unless_positive, xh).reshape(-1, TILE)
    t = tiles(xh)
    returned = t.min(1) > 0
    assert list(np.flatnonzero(returned)) == [0, 5]
    assert np.isnan(got[returned]).all()  # still the poison
    np.testing.assert_array_equal(got[~returned], 2 * t[~returned])


def _return_from_loops(t, n, limit):
    acc = np.zeros_like(t)
    for i in range(n):
        j = 0
        while j < i:
            acc = acc + t
            j += 1
            if acc.max() > limit:
                return acc
    return -acc


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_return_inside_nested_loops(backend):
    xh = exact_ints(N, 10)
    xh[:TILE] = -np.abs(xh[:TILE])  # a tile that never returns early
    want = per_tile(_return_from_loops, xh, 5, 12.0)
    got = _run(C.return_from_loops, xh, 5, 12.0)
    np.testing.assert_array_equal(got, want)
    early = [tiles(xh)[k].max() > 0 for k in range(N // TILE)]
    assert not early[0] and any(early[1:])


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("s", [1.0, -1.0])
def test_an_early_return_in_a_device_function(backend, s):
    xh = exact_ints(N, 13)
    np.testing.assert_array_equal(_run(C.sign_by, xh, s), xh if s > 0 else -xh)


def _scaled_down(t, limit):
    top = np.float32(np.abs(t).max())
    if top <= limit:
        return t
    if top > 4 * limit:
        return t * 0.25
    return t * np.float64(np.float32(limit) / top)


def _doubled_past(t, limit, n):
    for _ in range(n):
        if t.max() > limit:
            return t
        t = t * 2.0
    return -t


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_early_returns_in_device_functions(backend):
    xh = exact_ints(N, 11, lo=-12, hi=12)
    xh[:TILE] = np.clip(xh[:TILE], -2, 2)  # every case of scaled_down and doubled_past
    xh[TILE:2 * TILE] = np.clip(xh[TILE:2 * TILE], -5, 0)
    limit, n = np.float32(3.0), 3
    got = _run(C.early_returns_in_functions, xh, n, limit)
    want = per_tile(lambda t: (_scaled_down(t, limit).astype(np.float32).astype(np.float64)
                               + _doubled_past(t, limit, n)), xh)
    np.testing.assert_allclose(got, want, rtol=1e-6)  # t * (limit / top): not exact
    if backend == "cpu":
        np.testing.assert_array_equal(got, want.astype(np.float32))


# a loop's result that a branch may keep ---------------------------------------------------------

ROWS, COLS, TILE2 = 64, 64, (16, 32)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [f16, f32, i8, i32], ids=lambda d: d.name)
@pytest.mark.parametrize("kernel", [C.count_or_load_while, C.count_or_load_break],
                         ids=lambda k: k.__name__)
def test_a_branch_may_keep_the_result_of_a_loop(backend, kernel, dt):
    xh = exact_ints((ROWS, COLS), 12, dt, lo=-50, hi=50)
    got = launch(kernel, poisoned((ROWS, COLS), dt).partition(TILE2), fl.asarray(xh), 5)
    want = np.full(xh.shape, 5, dt.numpy)
    even = (np.arange(ROWS) // TILE2[0]) % 2 == 0
    want[even] = xh[even] + 1
    np.testing.assert_array_equal(got, want)


def _ops(block):
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from _ops(region)


@pytest.mark.parametrize("kernel", [C.count_or_load_while, C.count_or_load_break],
                         ids=lambda k: k.__name__)
def test_the_lowering_copies_each_result_of_a_tile_ir_loop(kernel):
    """As for ``for`` (test_loop_results.py): the tiles a ``loop`` gives back are used only by
    their copies. (tileiras 13.4 compiled these kernels without the copy too, unlike the ``for``
    kernels there; the copy stays, as the wrong values that bug also gave show only on a GPU.)"""
    types = (T.TensorView(f32, 2, T.Role.OUT, TILE2), T.TensorView(f32, 2, T.Role.IN),
             T.Scalar(fl.i64))
    module = decode(compile_tile(kernel.captured, kernel._ir_params(types), {}, "sm_90",
                                 "tileir").tileir)
    (fn,) = module.functions
    ops = list(_ops(fn.body))
    loops = [op for op in ops if op.name == "loop"]
    assert loops
    for loop in loops:
        for result in loop.results:
            if not isinstance(result.type, TileType) or result.type.shape == ():
                continue  # the counter and the slots of scalars
            users = [op for op in ops if any(v is result for v in op.fields.values()
                                             if not isinstance(v, (list, tuple)))]
            assert [u.name for u in users] == ["addf"]


def test_a_for_without_break_stays_a_tile_ir_for():
    k = C.for_continue
    types = (T.TensorView(f32, 1, T.Role.OUT, (TILE,)), T.TensorView(f32, 1, T.Role.IN),
             T.Scalar(fl.i64))
    module = decode(compile_tile(k.captured, k._ir_params(types), {}, "sm_90", "tileir").tileir)
    names = [op.name for op in _ops(module.functions[0].body)]
    assert "for" in names and "loop" not in names and names.count("continue") == 3
