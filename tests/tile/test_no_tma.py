"""FEARLESS_TMA=0: tile kernels compiled with no TMA load or store (what `fearless sanitize
--tool initcheck` runs under: initcheck does not see TMA's bulk tensor stores), cached apart
from the default cubins, computing the same values."""
from __future__ import annotations

import dataclasses
import importlib
import re

import numpy as np
import pytest

import fearless as fl
from fearless import sanitize
from fearless import tile as ft
from fearless.config import Config
from fearless.dtypes import f32
from fearless.ir import types as T

BASE = importlib.import_module("fearless.kernel.base")


@ft.kernel
def scale_rows(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out) + ft.load(x, (0, 0), out.tile_shape))


TYPES = (T.TensorView(f32, 2, T.Role.OUT, (4, 32)), T.TensorView(f32, 2, T.Role.IN))


@pytest.fixture
def no_tma(monkeypatch):
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, tma=False))


def _view_accesses(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"(load|store)_view_tko", line)]


def test_the_setting_is_read_from_the_environment():
    assert Config.from_env({}).tma and Config.from_env({"FEARLESS_TMA": "1"}).tma
    assert not Config.from_env({"FEARLESS_TMA": "0"}).tma


def test_every_view_load_and_store_refuses_tma(no_tma):
    accesses = _view_accesses(scale_rows.inspect("tileir", TYPES, arch="sm_90"))
    assert len(accesses) == 3  # two loads, one store
    assert all("allow_tma = false" in line for line in accesses)


def test_by_default_tileiras_chooses():
    accesses = _view_accesses(scale_rows.inspect("tileir", TYPES, arch="sm_90"))
    assert len(accesses) == 3 and not any("allow_tma" in line for line in accesses)


def test_the_caches_keep_the_two_apart(monkeypatch):
    with_tma = scale_rows.cache_key(TYPES, {}, "sm_90")
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, tma=False))
    assert scale_rows.cache_key(TYPES, {}, "sm_90") != with_tma


def test_initcheck_runs_without_tma_and_the_other_tools_with_it(monkeypatch):
    monkeypatch.delenv("FEARLESS_TMA", raising=False)
    assert sanitize._gpu_env("initcheck")["FEARLESS_TMA"] == "0"
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert "FEARLESS_TMA" not in sanitize._gpu_env(tool)


@pytest.mark.gpu
def test_the_values_match_the_default_compile(backend, no_tma):
    rng = np.random.default_rng(7)
    host = rng.standard_normal((64, 96)).astype(np.float32)
    out = fl.full((64, 96), np.nan, f32)  # poison
    o, _ = scale_rows(out.partition((4, 32)), fl.asarray(host)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), host + np.tile(host[:4, :32], (16, 3)))
