"""The ``fearless`` command line: inspect (SIMT and tile kernels) and compile ahead of time."""
from __future__ import annotations

import importlib
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
    assert main(["inspect", gemm, "--signature", "c=f16:2,a=f16:2,b=f16:2"]) == 2
    assert capsys.readouterr() == ("", "error: give the rank and tile shape of 'c': --signature "
                                       "c=f16:NDIM/TILE, e.g. c=f16:2/64x64 for a 2-d output "
                                       "in 64x64 tiles\n")
    assert main(["inspect", gemm, "--stage", "ir", "--const", "bk=32",
                 "--signature", "c=f16:2/64x64,a=f16:2,b=f16:2"]) == 0
    out = capsys.readouterr().out
    assert "tile.mma" in out and "shape = (64, 32)" in out


def test_inspect_specialises_as_a_call_does(capsys):
    """--signature goes through the kernels' own specialise(): a TypeVar given once binds the
    other parameters naming it, and a dtype the annotation contradicts is refused as a call's
    argument would be (both printed the IR of a kernel no call could make before)."""
    generic = str(ROOT / "examples/generic_map.py") + ":generic_map"
    assert main(["inspect", generic, "--signature", "x=f16"]) == 0
    assert ("kernel @generic_map(%scale: f16, %x: array<f16, 1d, read>, "
            "%out: array<f16, 1d, disjoint>)") in capsys.readouterr().out
    assert main(["inspect", str(ROOT / "examples/saxpy.py"), "--signature", "x=f64"]) == 1
    assert capsys.readouterr() == ("", "error: kernel 'saxpy', parameter 'x': expects dtype "
                                       "f32, got f64\nhelp: convert the array first, for "
                                       "example fl.asarray(x, fl.f32)\n")


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

    tile_kernel = importlib.import_module("fearless.kernel.base")
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


SAXPY = str(ROOT / "examples/saxpy.py")
GEMM = str(ROOT / "examples/tile_gemm.py")
DTYPES = "bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64"
MISTAKES = {
    "missing file": (["inspect", "nofile.py:k"], "nofile.py: no such file"),
    "missing file, every kernel": (["inspect", "nofile.py"], "nofile.py: no such file"),
    "compile a missing file": (["compile", "nofile.py"], "nofile.py: no such file"),
    "compile a folder": (["compile", str(ROOT / "examples")],
                         f"{ROOT / 'examples'} is not a file"),
    "missing kernel": (["inspect", f"{SAXPY}:saxpi"], f"{SAXPY} has no 'saxpi'; its kernels: "
                                                      f"saxpy"),
    "not a kernel": (["inspect", f"{SAXPY}:np"], f"'np' in {SAXPY} is a module, not a "
                                                 f"@fearless.kernel or tile kernel; its "
                                                 f"kernels: saxpy"),
    "module without kernels": (["inspect", "json"], "no @fearless.kernel or tile kernel in json"),
    "missing module": (["inspect", "no_such_module:k"],
                       "cannot import 'no_such_module' (No module named 'no_such_module'); give "
                       "module:function of an importable module, or path/to/file.py:function"),
    "signature without =": (["inspect", SAXPY, "--signature", "x"],
                            "--signature 'x': expected name=dtype[:ndim][[extents]][/tile], "
                            "e.g. x=f32, out=f32:2, z=f16:2/64x64 or a=f16[m,k]"),
    "unknown dtype": (["inspect", SAXPY, "--signature", "x=f99"],
                      f"--signature 'x=f99': 'f99' is not a dtype; one of {DTYPES}"),
    "bad rank": (["inspect", SAXPY, "--signature", "out=f32:two"],
                 "--signature 'out=f32:two': the rank 'two' is not a positive integer"),
    "bad tile shape": (["inspect", GEMM, "--signature", "c=f16:2/64xq"],
                       "--signature 'c=f16:2/64xq': the tile shape '64xq' is not positive "
                       "extents joined by x, such as 64x64"),
    "unknown parameter": (["inspect", SAXPY, "--signature", "z=f32"],
                          "--signature names 'z', which is not a parameter of 'saxpy' (those "
                          "are: a, x, y, out)"),
    "bad constant": (["inspect", GEMM, "--const", "bk=many"],
                     "--const 'bk=many': 'many' is not a number"),
    "unknown constant": (["inspect", GEMM, "--const", "bn=64"],
                         "--const names 'bn', which is not a constant of 'matmul' (those are: "
                         "bk)"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_command_line_mistakes_are_one_line_and_exit_2(capsys, name):
    argv, message = MISTAKES[name]
    assert main(argv) == 2
    assert capsys.readouterr() == ("", f"error: {message}\n")


def test_mistakes_from_the_shell_exit_2_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"),
                                                      os.environ.get("PYTHONPATH", "")]))
    for argv in (["inspect", "nofile.py:k"], ["compile", "nofile.py"]):
        proc = subprocess.run([sys.executable, "-m", "fearless", *argv], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=300)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "",
                                                                "error: nofile.py: no such file\n")


def test_a_script_that_raises_shows_its_own_frames(tmp_path, capsys):
    script = tmp_path / "raises_on_load.py"
    script.write_text("def helper():\n    return {}['missing']\n\n\nhelper()\n")
    for argv, verb in ((["inspect", str(script)], "loading"), (["compile", str(script)],
                                                                "running")):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            "Traceback (most recent call last):\n"
            f'  File "{script}", line 5, in <module>\n    helper()\n'
            f'  File "{script}", line 2, in helper\n    return {{}}[\'missing\']\n'
            "           ~~^^^^^^^^^^^\n"
            "KeyError: 'missing'\n"
            f"error: {verb} {script} raised KeyError\n")
