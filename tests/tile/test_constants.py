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
