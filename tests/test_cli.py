"""The ``fearless`` command line: inspect (SIMT and tile kernels) and compile ahead of time."""
from __future__ import annotations

import pytest

from fearless.backends.tileir import tileiras
from fearless.cli import main

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
needs_tileiras = pytest.mark.skipif(tileiras.find() is None, reason="tileiras not installed")


def test_inspect_a_simt_kernel_ptx(capsys):
    assert main(["inspect", str(ROOT / "examples/saxpy.py") + ":saxpy", "--stage", "ptx"]) == 0
    out = capsys.readouterr().out
    assert ".visible .entry saxpy" in out and "ld.global" in out


def test_inspect_a_tile_kernel_ir_needs_the_tile_shape(capsys):
    gemm = str(ROOT / "examples/tile_gemm.py") + ":matmul"
    with pytest.raises(SystemExit, match="rank and tile shape of 'c'"):
        main(["inspect", gemm, "--signature", "c=f16:2,a=f16:2,b=f16:2"])
    assert main(["inspect", gemm, "--stage", "ir", "--const", "bk=32",
                 "--signature", "c=f16:2/64x64,a=f16:2,b=f16:2"]) == 0
    out = capsys.readouterr().out
    assert "tile.mma" in out and "shape = (64, 32)" in out


@needs_tileiras
def test_inspect_a_tile_kernel_tileir(capsys):
    add = str(ROOT / "examples/tile_vector_add.py") + ":add"
    assert main(["inspect", add, "--stage", "tileir", "--signature", "z=f32:1/1024"]) == 0
    out = capsys.readouterr().out
    assert "load_view_tko" in out and "assume div_by<16>" in out


@needs_tileiras
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_fills_the_cache_for_a_gpu_without_tileiras(tmp_path, monkeypatch, capsys, arch):
    import dataclasses

    from fearless import tile_kernel
    cache = tmp_path / "cache"
    monkeypatch.setattr(tile_kernel, "CONFIG", dataclasses.replace(tile_kernel.CONFIG,
                                                                   cache_dir=cache))
    script = tmp_path / "one.py"
    script.write_text(
        "import fearless as fl\nfrom fearless import tile as ft, f32\n"
        "@ft.kernel\ndef twice(z: ft.Out[f32], x: ft.In[f32]):\n"
        "    z.store(ft.load_like(x, z) * 2.0)\n"
        "z, _ = twice(fl.zeros(4096).partition(1024), fl.ones(4096)).sync()\n")
    assert main(["compile", str(script), "--arch", arch]) == 0
    out = capsys.readouterr().out
    assert f"{arch}  twice(" in out and "1 cubins" in out
    assert len(list(cache.rglob("*.entry"))) == 1  # what a GPU machine then loads
