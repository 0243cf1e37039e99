"""Compiling for GPUs that are not here (runtime/ahead.py): FEARLESS_CROSS_COMPILE makes every
cpu-backend launch also compile its kernel for the listed archs, failing at that launch;
``fearless compile`` compiles a script's SIMT and tile kernels without running them."""
from __future__ import annotations

import dataclasses
import sys
import textwrap

import numpy as np
import pytest

import fearless as fl
from fearless.backends.llvm import lower as llvm_lower
from fearless.backends.tileir import tileiras
from fearless.cli import main
from fearless.config import Config
from fearless.errors import InternalError
from tests.support import import_source, random_array

KERNELS = sys.modules["fearless.kernel.base"]  # where both kernel kinds read CONFIG

ARCHS = ("sm_80", "sm_90")


def _nvjitlink():
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is needed to build cubins")


@pytest.fixture
def cross(tmp_path, monkeypatch):
    """FEARLESS_CROSS_COMPILE=sm_80,sm_90 with a fresh disk cache."""
    _nvjitlink()
    config = dataclasses.replace(KERNELS.CONFIG, cache_dir=tmp_path / "cache",
                                 cross_compile=ARCHS)
    monkeypatch.setattr(KERNELS, "CONFIG", config)
    return tmp_path


def _saxpy(tmp_path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent("""
        import fearless as fl

        @fl.kernel
        def saxpy(a: fl.f32, x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
            i = fl.thread.index_1d()
            if i < len(out):
                out[i] = a * x[i] + 1.0
        """))
    return import_source(path, name).saxpy


def test_config_reads_the_archs_once_each_and_refuses_a_typo():
    env = {"FEARLESS_CROSS_COMPILE": "sm_80, sm_90,sm_80"}
    assert Config.from_env(env).cross_compile == ("sm_80", "sm_90")
    assert Config.from_env({}).cross_compile == ()
    with pytest.raises(ValueError, match="'sm90' is not a GPU arch"):
        Config.from_env({"FEARLESS_CROSS_COMPILE": "sm90"})


def test_a_cpu_launch_also_compiles_a_cubin_for_each_arch(cross):
    k = _saxpy(cross, "cross_saxpy")
    xh = random_array(fl.f32, 1000)
    out = fl.full(1000, np.nan, fl.f32)
    k[k.prepare(1000)](2.5, fl.asarray(xh), out)
    np.testing.assert_array_equal(out.numpy(), np.float32(2.5) * xh + np.float32(1.0))
    cubins = {key[2]: c.cubin for key, c in k._compiled.items() if key[1] == "cuda"}
    assert set(cubins) == set(ARCHS) and all(cubins.values())
    assert len(list((cross / "cache").rglob("*.entry"))) == 3  # the cpu compile's, 2 cubins


def test_a_gpu_compile_failure_fails_the_launch_that_caused_it(cross, monkeypatch):
    k = _saxpy(cross, "cross_broken")
    monkeypatch.delitem(llvm_lower.RULES, "arith.mul")  # a lowering bug the cpu never sees
    with pytest.raises(InternalError, match="no rule for arith.mul") as info:
        k[k.prepare(8)](2.0, fl.ones(8), fl.zeros(8))
    note = "\n".join(info.value.__notes__)
    assert "kernel 'saxpy' for sm_80 (FEARLESS_CROSS_COMPILE)" in note
    assert "f32, array<f32, 1d, read>, array<f32, 1d, disjoint>" in note


@pytest.mark.skipif(tileiras.find() is None, reason="tileiras not installed")
def test_a_cpu_tile_launch_compiles_the_gpu_specialisation(cross):
    path = cross / "cross_tile.py"
    path.write_text(textwrap.dedent("""
        from fearless import tile as ft, f32

        @ft.kernel
        def twice(z: ft.Out[f32], x: ft.In[f32]):
            z.store(ft.load_like(x, z) * 2.0)
        """))
    twice = import_source(path, "cross_tile").twice
    xh = random_array(fl.f32, 4096)
    z, _ = twice(fl.zeros(4096).partition(1024), fl.asarray(xh)).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), xh * np.float32(2))
    gpu = [key for key in twice._compiled if key[2] == "cuda"]
    assert sorted(key[3] for key in gpu) == list(ARCHS)
    assert all(t.layout.align == 16 for key in gpu for t in key[0])  # the tensors' facts


def test_fearless_compile_compiles_simt_kernels_without_running_them(tmp_path, monkeypatch,
                                                                      capsys):
    _nvjitlink()
    monkeypatch.setattr(KERNELS, "CONFIG",
                        dataclasses.replace(KERNELS.CONFIG, cache_dir=tmp_path / "cache"))
    script = tmp_path / "simt_script.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import fearless as fl

        @fl.kernel
        def fill(out: fl.DisjointSlice[fl.f32]):
            i = fl.thread.index_1d()
            if i < len(out):
                out[i] = 1.0

        out = fl.full(64, np.nan, fl.f32)
        fill[fill.prepare(64)](out)
        print("first element", out.numpy()[0])
        """))
    assert main(["compile", str(script), "--arch", "sm_80", "--arch", "sm_90"]) == 0
    text = capsys.readouterr().out
    assert "first element nan" in text  # compiled, not run
    assert "sm_80  fill(array<f32, 1d, disjoint>)" in text and "sm_90  fill(" in text
    assert "2 cubins" in text
    assert len(list((tmp_path / "cache").rglob("*.entry"))) == 3  # the cpu compile's, 2 cubins
