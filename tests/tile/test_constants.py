"""Constant tiles mean the same on both backends (found by the fuzzer: seeds 1864, 1944, 2041,
2327, 2827, 3711 and 3826 of ``python -m tests.fuzz --device``).

A bool constant of at most 8 elements was written with one byte per element where Tile IR reads
one bit per element, so ``ft.full((2, 1), True, fl.bool_)`` was [[True], [False]] on the GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from tests.support import BACKENDS


@ft.kernel
def bool_columns(o: ft.Out[fl.i32], x: ft.In[fl.i8]):
    a = ft.load(x, (o.tile_index[1],), (32,))
    ones = ft.full((2, 1), True, fl.bool_).astype(fl.i64).astype(fl.i8)
    o.store(ft.broadcast(a, (2, 32)).astype(fl.i32) * 4 + ones + (ft.full((1, 1), False,
                                                                          fl.bool_) * 2))


@pytest.mark.parametrize("where", BACKENDS)
def test_small_bool_constants_are_every_element(where):
    rng = np.random.default_rng(7)
    x = rng.integers(-100, 100, 88).astype(np.int8)
    out = fl.full((2, 88), -7, fl.i32)  # poison
    o, _ = bool_columns(out.partition((2, 32)), fl.asarray(x)).sync()
    want = np.broadcast_to(x.astype(np.int64) * 4 + 1, (2, 88))
    np.testing.assert_array_equal(o.unpartition().numpy(), want)


# -- compile-time constants that == cannot tell apart --------------------------------------------

@ft.kernel
def over_constant(o: ft.Out[fl.f32], x: ft.In[fl.f32], c: ft.Const[float] = 1.0):
    o.store(ft.load_like(x, o) / c)


@pytest.mark.parametrize("where", BACKENDS)
def test_signed_zero_constants_compile_apart(where):
    """0.0 == -0.0, so a cache keyed by value ran the kernel compiled for 0.0 when -0.0 was
    given (x / c gave +inf for -inf): found reading the tile fast path's key."""
    x = fl.asarray(np.array([1.0, -2.0, 0.5, 3.0], np.float32))
    got = {}
    for c in (0.0, -0.0, 0.0, -0.0):  # repeats take the fast path on the GPU
        o, _ = over_constant(fl.full(4, np.nan, fl.f32).partition(4), x, c).sync()
        got.setdefault(str(c), []).append(o.unpartition().numpy())
    with np.errstate(divide="ignore"):
        for c in (0.0, -0.0):
            for run in got[str(c)]:
                np.testing.assert_array_equal(run, x.numpy() / np.float32(c))


def test_constant_keys_tell_types_signs_and_nested_values_apart():
    from fearless.kernel.params import const_key, const_keys
    keys = [const_key(v) for v in (0.0, -0.0, 0, False, 1, 1.0, True, (1, 2), (1.0, 2),
                                   [1, 2], np.float64(-0.0))]
    assert len(set(keys)) == len(keys)
    assert const_key(float("nan")) == const_key(float("nan"))  # one NaN: no recompiles
    assert const_keys({"b": -0.0, "a": 2}) == (("a", (int, 2)), ("b", const_key(-0.0)))


def test_the_tile_fast_path_keys_signed_zero_constants_apart():
    from fearless.kernel import tile_fast
    x = fl.asarray(np.ones(4, np.float32))
    keys = [tile_fast.signature(over_constant.params, (fl.zeros(4).partition(4), x, c),
                                over_constant.per_sm)[0] for c in (0.0, -0.0, 0.0)]
    assert keys[0] != keys[1] and keys[0] == keys[2]
