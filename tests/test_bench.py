"""``fearless bench``: a kernel timed from the command line (cold compile apart, warm-up, P50 /
P99 / min over the runs, GB/s and TFLOP/s, ``--compare``), on the cpu backend here and with CUDA
events on the GPU; its mistakes are one line and exit status 2; the size expressions are
evaluated without ``eval``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fearless import cli
from fearless.targets import parse_sizes
from fearless.targets import UsageError, evaluate

ROOT = Path(__file__).resolve().parent.parent

KERNELS = '''
import fearless as fl
from fearless import tile as ft


@fl.kernel
def scale(a: fl.f32, x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = a * x[i]


@fl.kernel
def scale_again(a: fl.f32, x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * a


@fl.kernel
def generic(x, out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i]


@ft.kernel
def plus(out: ft.Out[fl.f32], x: ft.In[fl.f32], step: ft.Const[int] = 1):
    out.store(ft.load_like(x, out) + 1.0 * step)
'''


@pytest.fixture
def kernels(tmp_path):
    path = tmp_path / "bench_kernels.py"
    path.write_text(KERNELS)
    return path


def bench(tmp_path, *argv):
    """``fearless bench ARGV`` in a fresh process on the cpu backend with an empty cache."""
    env = {**os.environ, "FEARLESS_BACKEND": "cpu", "FEARLESS_CACHE_DIR": str(tmp_path / "c"),
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("FEARLESS_CROSS_COMPILE", None)   # one compile per kernel: the counts below
    return subprocess.run([sys.executable, "-m", "fearless", "bench", *argv], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_simt_kernel_and_its_comparison(tmp_path, kernels):
    run = bench(tmp_path, f"{kernels}:scale", "--signature", "x=[n],out=f32[n]",
                "--size", "n=3*100", "--size", "a=2.5", "--bytes", "2*4*n", "--flops", "n",
                "--runs", "7", "--warmup", "2", "--compare", f"{kernels}:scale_again",
                "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["backend"] == "cpu" and report["clock"] == "host_wall"
    assert report["runs"] == 7 and report["l2_flush_bytes"] == 0
    assert report["sizes"] == {"n": 300, "a": 2.5} and report["bytes"] == 2400
    first, second = report["kernels"]
    assert [first["kernel"], second["kernel"]] == ["scale", "scale_again"]
    for r in (first, second):
        assert r["compile"]["cold"] == 1 and r["compile"]["disk"] == 0
        assert 0 < r["compile"]["cold_s"] < r["first_call_s"]
        assert 0 < r["min_s"] <= r["p50_s"] <= r["p99_s"] <= r["max_s"]
        assert r["min_s"] <= r["mean_s"] <= r["max_s"]
        assert r["gb_per_s"] == pytest.approx(2400 / r["p50_s"] / 1e9, rel=1e-12)
        assert r["tflop_per_s"] == pytest.approx(300 / r["p50_s"] / 1e12, rel=1e-12)
    assert report["ratio"] == pytest.approx(second["p50_s"] / first["p50_s"], rel=1e-12)


def test_the_table_says_it_is_the_cpu_backend(tmp_path, kernels):
    run = bench(tmp_path, f"{kernels}:scale", "--signature", "x=[n],out=[n]", "--size", "n=64",
                "--runs", "3", "--warmup", "0")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == ("fearless bench: backend cpu (the NumPy interpreter); the wall clock: "
                        "CPU times, not GPU times")
    assert lines[1] == "3 timed runs after 0 warm-up runs; sizes: n=64"
    row = next(line for line in lines if line.startswith("scale "))
    assert "cold" in row and row.split()[-2:] == ["-", "-"]   # no --bytes, no --flops


def test_a_tile_kernel_with_its_tile_shape_and_a_constant(tmp_path, kernels, capsys,
                                                          monkeypatch):
    monkeypatch.setenv("FEARLESS_CACHE_DIR", str(tmp_path / "c"))
    assert cli.main(["bench", f"{kernels}:plus", "--signature", "out=[m,n]/16x32,x=[m,n]",
                     "--size", "m=32,n=2*m", "--const", "step=3", "--runs", "2",
                     "--warmup", "1", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["kernels"]
    assert r["kernel"] == "plus" and 0 < r["min_s"] <= r["max_s"]


MISTAKES = {
    "a missing shape": (["scale", "--signature", "x=[n]", "--size", "n=8"],
                        "kernel 'scale': give the shape of array parameter 'out': --signature "
                        "out=[...], e.g. out=[n]"),
    "a generic parameter left open": (["generic", "--signature", "out=[n]", "--size", "n=8"],
                                      "parameter 'x' has no annotation; give --signature x=f32 "
                                      "(or f32:1 for an array)"),
    "an Out without a tile shape": (["plus", "--signature", "out=[n],x=[n]", "--size", "n=8"],
                                    "give the rank and tile shape of 'out': --signature "
                                    "out=f32:NDIM/TILE, e.g. out=f32:2/64x64 for a 2-d output "
                                    "in 64x64 tiles"),
    "an unknown kernel": (["nope", "--signature", "x=[n],out=[n]", "--size", "n=8"],
                          "{file} has no 'nope'; its kernels: scale, scale_again, generic, "
                          "plus"),
    "an unknown parameter": (["scale", "--signature", "y=[n]", "--size", "n=8"],
                             "--signature names 'y', which is not a parameter of 'scale' "
                             "(those are: a, x, out)"),
    "code in --flops": (["scale", "--signature", "x=[n],out=[n]", "--size", "n=8", "--flops",
                         "__import__('os').getpid()"],
                        "--flops \"__import__('os').getpid()\": \"__import__('os').getpid()\" "
                        "is not allowed: only numbers, --size names, + - * / // % ** and "
                        "parentheses"),
    "an unbound name": (["scale", "--signature", "x=[n],out=[n]", "--size", "n=8", "--bytes",
                         "4*m"], "--bytes '4*m': 'm' is not bound; give --size m=... "
                                 "(bound: n)"),
    "a shape that is not whole": (["scale", "--signature", "x=[n/2],out=[n]", "--size", "n=8"],
                                  "--signature x: the shape (4.0,) is not non-negative "
                                  "integers"),
    "no runs": (["scale", "--signature", "x=[n],out=[n]", "--size", "n=8", "--runs", "0"],
                "--runs 0 / --warmup 10: give at least one run and no negative warm-up"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_mistakes_are_one_line_and_exit_2(kernels, capsys, name):
    argv, message = MISTAKES[name]
    assert cli.main(["bench", f"{kernels}:{argv[0]}", *argv[1:]]) == 2
    assert capsys.readouterr() == ("", f"error: {message.format(file=kernels)}\n")


def test_a_mistake_from_the_shell_names_the_parameter(tmp_path, kernels):
    run = bench(tmp_path, f"{kernels}:scale", "--signature", "x=[n]", "--size", "n=8")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("error: kernel 'scale': give the shape of array parameter 'out': "
                          "--signature out=[...], e.g. out=[n]\n")


def test_a_kernel_error_is_the_kernels_and_exits_1(kernels, capsys):
    # out is one longer than x: the launch over out's shape reads x[n]
    assert cli.main(["bench", f"{kernels}:scale", "--signature", "x=[n],out=[n+1]",
                     "--size", "n=8", "--runs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: kernel 'scale', parameter 'x': read out of bounds: index 8")


@pytest.mark.parametrize("text, want", [("2*m*n*k", 2 * 3 * 5 * 7), ("(m+1)//2", 2),
                                        ("-m + 2**10 % 7", -3 + 2), ("n / 2", 2.5),
                                        ("1e3 * k", 7000.0)])
def test_expressions(text, want):
    assert evaluate(text, {"m": 3, "n": 5, "k": 7}, "--flops") == want


@pytest.mark.parametrize("text", ["m.real", "abs(m)", "[m][0]", "lambda: 1", "m if m else 2",
                                  "m < 2", "'s' * 3", "True + 1", "m; m", "2 ** 65", "1 // 0",
                                  # nothing that runs long, overflows or leaves the reals
                                  "((((9 ** 64) ** 64) ** 64) ** 64)", "(10.0 ** 64) ** 64",
                                  "-" * 100000 + "1", "(" * 300 + "1" + ")" * 300, "(-8) ** 0.5",
                                  "1e308 * 10"])
def test_expressions_refuse_everything_else(text):
    with pytest.raises(UsageError, match=r"^--flops "):
        evaluate(text, {"m": 3}, "--flops")


def test_sizes_bind_in_order():
    assert parse_sizes(["m=2**10,n=m//4", "k=m+n"]) == {"m": 1024, "n": 256, "k": 1280}
    with pytest.raises(UsageError, match=r"'k' is not bound"):
        parse_sizes(["m=k"])
    with pytest.raises(UsageError, match=r"expected name=value"):
        parse_sizes(["4096"])


def test_help_shows_the_shape_syntax():
    run = subprocess.run([sys.executable, "-m", "fearless", "bench", "--help"],
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0
    assert "x=f32[n]" in run.stdout and "--compare" in run.stdout and "L2" in run.stdout


@pytest.mark.gpu
def test_on_the_gpu_with_cuda_events_and_a_flushed_l2(backend, kernels, capsys):
    n = 1 << 26     # 2 x 256 MiB per run: past the L2, so the GB/s is HBM's
    assert cli.main(["bench", f"{kernels}:scale", "--signature", "x=[n],out=[n]",
                     "--size", f"n={n}", "--bytes", "2*4*n", "--runs", "20", "--json",
                     "--compare", f"{kernels}:scale_again"]) == 0
    report = json.loads(capsys.readouterr().out)
    from fearless.runtime import device
    l2 = device.cuda_device().properties.l2_cache_size
    assert report["clock"] == "cuda_events" and report["l2_flush_bytes"] >= 2 * l2
    for r in report["kernels"]:
        # positive, and no faster than 8 TB/s (the H200's HBM peaks at 4.8; the L2 is
        # flushed before each run, but written data may still sit in it when the run ends)
        assert 0 < r["min_s"] <= r["p50_s"] <= r["p99_s"] and r["gb_per_s"] < 8000
        assert r["min_s"] >= 2 * 4 * n / 8e12
    # the same memory-bound work: within a factor of two of each other
    assert 0.5 < report["ratio"] < 2


def test_the_readme_snippet_runs_as_written(tmp_path):
    import re
    import shlex
    readme = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", readme, re.S)
                if b.startswith("fearless bench ")]
    argv = shlex.split(block.replace("\\\n", " "))
    env = {**os.environ, "FEARLESS_BACKEND": "cpu", "FEARLESS_CACHE_DIR": str(tmp_path / "c"),
           "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-m", *argv], env=env, capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    row = next(line for line in run.stdout.splitlines() if line.startswith("saxpy "))
    assert row.split()[-2] != "-" and row.split()[-1] != "-"   # GB/s and TFLOP/s
