"""Programmatic dependent launch (PDL): a tile kernel compiled for sm_90 or later signals its
dependents at once and waits for the grids it depends on before its first memory access, so it
may be launched while the kernel before it finishes and still read that kernel's results."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.backends.tileir.lower import uses_pdl
from fearless.dtypes import f32
from fearless.ir import types as T


@ft.kernel
def plus_one(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out) + 1.0)


@ft.kernel
def shift_add(out: ft.Out[f32], x: ft.In[f32]):
    # reads the next block's tile: each block depends on another block of the previous kernel,
    # which only the wait for that whole grid orders
    i = out.tile_index[0]
    n = out.tile_shape[0]
    out.store(ft.load(x, ((i + 1) % ft.cdiv(x.shape[0], n),), (n,)) + 1.0)


TYPES = (T.TensorView(f32, 1, T.Role.OUT, (64,)), T.TensorView(f32, 1, T.Role.IN))


def test_sm90_kernels_wait_before_their_first_memory_access():
    lines = plus_one.inspect("tileir", TYPES, arch="sm_90").splitlines()
    wait = next(i for i, line in enumerate(lines) if "gdc_wait_tko" in line)
    token = re.match(r"\s*(%\w+) = gdc_wait_tko", lines[wait]).group(1)
    assert any("gdc_launch_dependents_tko" in line for line in lines[:wait])
    memory = [i for i, line in enumerate(lines) if re.search(r"(load|store)_\w+_tko", line)]
    assert memory and min(memory) > wait
    assert all(f"token = {token}" in lines[i] for i in memory)


def test_older_archs_and_bytecode_versions_have_no_grid_dependency_control():
    assert "gdc_" not in plus_one.inspect("tileir", TYPES, arch="sm_80")
    assert uses_pdl((13, 4), "sm_90") and uses_pdl((13, 5), "sm_100a")
    assert not uses_pdl((13, 3), "sm_90") and not uses_pdl((13, 4), "sm_80")
    assert not uses_pdl((13, 4), None)


def _chain(x: fl.Tensor, steps: int) -> fl.Tensor:
    for _ in range(steps):
        x = shift_add(fl.empty(x.shape, f32).partition(256), x).enqueue()[0].unpartition()
    return x


def _expected(x: np.ndarray, steps: int) -> np.ndarray:
    return np.roll(x, -256 * steps) + steps


@pytest.mark.gpu
@pytest.mark.parametrize("captured", [False, True])
def test_a_chain_of_dependent_kernels_reads_each_result(captured):
    """40 kernels, each reading the next block's tile of its predecessor's output: with PDL
    each may start while the one before runs, and must still see its whole result. Every value
    is exact in f32 (a random one plus a count)."""
    fl.set_backend("cuda")
    host = np.random.default_rng(0).integers(-1000, 1000, 256 * 264).astype(np.float32)
    x = fl.asarray(host)
    if captured:
        with fl.capture() as graph:
            out = _chain(x, 40)
        graph.replay()
        graph.sync()
    else:
        out = _chain(x, 40)
    np.testing.assert_array_equal(out.numpy(), _expected(host, 40))


def test_fearless_pdl_0_turns_the_launch_attribute_off():
    from fearless.config import Config
    assert Config.from_env({}).pdl and Config.from_env({"FEARLESS_PDL": "1"}).pdl
    assert not Config.from_env({"FEARLESS_PDL": "0"}).pdl
