"""``ft.autotune`` around the measurement: the time bound, progress lines, ``fl.stats`` records,
the default search spaces (``ft.configs``), ``tuned.tune()`` and ``fearless tune``.

Tuning runs on the cpu backend with the ``tune`` fixture's stand-in timer (``conftest.py``)."""
from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.cli import main
from fearless.config import Config as Settings
from fearless.dtypes import f16, f32
from fearless.errors import AutotuneError
from examples.tile_gemm import matmul

BASE = importlib.import_module("fearless.kernel.base")
ROOT = Path(__file__).resolve().parents[2]


@ft.kernel
def copy_some(o: ft.Out[f32], x: ft.In[f32], skip: ft.Const[int] = 0):
    if skip == 0 or o.tile_index[0] % 2 == 0:
        o.store(ft.load_like(x, o))


@ft.kernel
def row_share(o: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, o)          # zero past the last column, which adds nothing to the sum
    o.store(t * (1.0 / ft.sum(t, 1, keepdims=True)))


def _host(values) -> fl.Tensor:
    return fl.asarray(np.array(values, np.float32))


def _settings(monkeypatch, **changes) -> None:
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, **changes))


# -- the time bound ---------------------------------------------------------------------------

FOUR = [ft.Config(tile=16, skip=1), ft.Config(tile=16), ft.Config(tile=32), ft.Config(tile=8)]


def test_the_time_bound_skips_the_configs_left_and_the_best_measured_wins(tune):
    fake, timed = tune
    fake.times = [3.0]
    tuned = ft.autotune(FOUR, max_seconds=1e-3)(copy_some)
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    o, _ = tuned(fl.full(64, -1.0, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    r = tuned.report
    # config 0 is dropped, so config 1 is measured past the bound: at least one always is
    assert r[0].dropped.startswith("leaves 32 of the 64") and r[1].seconds == 3.0
    assert [c.skipped for c in r[2:]] == ["the time bound of 0.001 s was spent"] * 2
    assert [c.seconds for c in r[2:]] == [None, None] and len(timed) == 1
    assert (r.winner, r.budget, r.key) == (1, 1e-3, "o=f32(64,), x=f32(64,)") and r.seconds > 1e-3
    assert list(tuned._winners.values()) == [[1]]     # skipped configs are not ranked
    o, _ = tuned(fl.full(64, -1.0, f32), _host(x)).sync()
    assert o.tile_shape == (16,) and len(timed) == 1
    assert "  config 2 Config(tile=32): skipped: the time bound" in str(r)


def test_the_environment_bound_applies_when_it_is_the_smaller(tune, monkeypatch):
    fake, timed = tune
    _settings(monkeypatch, autotune_seconds=1e-3)
    fake.times = [3.0]
    tuned = ft.autotune(FOUR, max_seconds=3600)(copy_some)
    tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert tuned.report.budget == 1e-3 and sum(c.skipped is not None for c in tuned.report) == 2
    fake.times = [3.0, 2.0, 1.0]
    _settings(monkeypatch, autotune_seconds=3600.0)
    roomy = ft.autotune(FOUR[1:] + FOUR[:1], max_seconds=1800)(copy_some)
    roomy(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert roomy.report.budget == 1800 and [c.seconds for c in roomy.report] == [3.0, 2.0, 1.0,
                                                                                 None]
    assert roomy.report.winner == 2 and not any(c.skipped for c in roomy.report)


def test_the_settings_are_read_from_the_environment():
    env = Settings.from_env({"FEARLESS_AUTOTUNE_SECONDS": "2.5",
                             "FEARLESS_AUTOTUNE_PROGRESS": "1"})
    assert (env.autotune_seconds, env.autotune_progress) == (2.5, True)
    env = Settings.from_env({"FEARLESS_AUTOTUNE_PROGRESS": "0"})
    assert (env.autotune_seconds, env.autotune_progress) == (None, False)
    assert Settings.from_env({}).autotune_progress is None
    for bad in ("0", "-3", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match=f"FEARLESS_AUTOTUNE_SECONDS='{bad}': expected a "
                                             f"number of seconds > 0"):
            Settings.from_env({"FEARLESS_AUTOTUNE_SECONDS": bad})


def _tuning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("fearless: tun")]


def test_progress_lines_on_request_the_summary_alone_off_a_terminal(tune, monkeypatch, capsys,
                                                                    tmp_path):
    fake, _ = tune
    configs = [ft.Config(tile=16, skip=1), ft.Config(tile=16), ft.Config(tile=32)]
    summary = (r"fearless: tuned 'copy_some' over 3 configs in \d+\.\d s: config 2 "
               r"Config\(tile=32\) \(1\.0 us\); 1 dropped \(see \.report\)")
    for setting, want in ((True, 3), (None, 0), (False, None)):
        _settings(monkeypatch, progress=True, autotune_progress=setting,
                  cache_dir=tmp_path / str(setting))     # no ranking from the round before
        fake.times = [2e-6, 1e-6]
        ft.autotune(configs)(copy_some)(fl.empty(64, f32), _host(np.arange(64))).sync()
        lines = _tuning_lines(capsys.readouterr().err)
        if want is None:       # FEARLESS_AUTOTUNE_PROGRESS=0: nothing at all
            assert lines == []
            continue
        assert len(lines) == want + 1 and re.fullmatch(summary, lines[-1]), lines
        if want:
            assert lines[:3] == [
                "fearless: tuning 'copy_some' 1/3: config 0 Config(tile=16, skip=1): dropped "
                "(leaves 32 of the 64 elements of 'o' unwritten)",
                "fearless: tuning 'copy_some' 2/3: config 1 Config(tile=16): 2.0 us",
                "fearless: tuning 'copy_some' 3/3: config 2 Config(tile=32): 1.0 us"]


# -- fl.stats ---------------------------------------------------------------------------------

def test_fl_stats_records_each_tuning(tune, stats_on):
    fake, _ = tune
    fake.times = [1.0]
    tuned = ft.autotune(FOUR[:3], max_seconds=1e-3)(copy_some)
    for _ in range(2):      # the second call uses the ranking: no new record
        tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    records = fl.stats()["kernels"]["copy_some"]["autotune"]
    assert records == [{"key": "o=f32(64,), x=f32(64,)", "winner": "config 1 Config(tile=16)",
                        "seconds": tuned.report.seconds, "tried": 2, "dropped": 1,
                        "skipped": 1}]
    assert 'fearless_autotunes_total{kernel="copy_some"} 1' in fl.stats.prometheus()
    from fearless.cli import stats_table
    assert re.search(r"^tuned copy_some for o=f32\(64,\), x=f32\(64,\): config 1 "
                     r"Config\(tile=16\) in \d+\.\d s \(2 tried, 1 dropped, 1 skipped\)$",
                     stats_table(fl.stats()), re.M)


# -- the default search spaces ------------------------------------------------------------------

def test_the_gemm_space_is_the_documented_one():
    space = ft.configs.gemm()
    tiles = [(64, 64), (128, 64), (64, 128), (128, 128), (128, 256), (256, 128)]
    assert [c.tile for c in space] == [t for t in tiles for _ in (1, 2)]
    for c in space:
        occ = c.hints["sm_80"]["occupancy"]
        assert c.hints == {"sm_80": {"occupancy": occ}, "sm_90": {"occupancy": occ}}
        assert c.consts == {}
    assert [c.hints["sm_90"]["occupancy"] for c in space] == [1, 2] * 6
    with_k = ft.configs.gemm(k_tile="bk")
    assert len(with_k) == 24 and [c.consts for c in with_k[:4]] == [{"bk": 32}, {"bk": 64}] * 2
    assert with_k[0].tile == with_k[3].tile == (64, 64) and with_k[4].tile == (128, 64)
    small = ft.configs.gemm(k_tile="kt", k_values=(16,), occupancy=(1,))
    assert [(c.tile, c.consts) for c in small] == [(t, {"kt": 16}) for t in tiles]
    with pytest.raises(AutotuneError, match="occupancy is empty"):
        ft.configs.gemm(occupancy=())
    with pytest.raises(AutotuneError, match="k_values is empty"):
        ft.configs.gemm(k_tile="bk", k_values=[])
    assert all(c.schedule is None for c in space)
    both = ft.configs.gemm(occupancy=(1,), schedules=(None, ft.persistent()))
    assert [(c.tile, c.schedule) for c in both] == [
        (t, s) for t in tiles for s in (None, ft.persistent())]
    with pytest.raises(AutotuneError, match="schedules is empty"):
        ft.configs.gemm(schedules=())


def test_the_rowwise_space_and_the_default_by_kernel():
    assert ft.configs.rowwise() == [
        ft.Config(tile=(1, None), hints={"sm_80": {"occupancy": k}, "sm_90": {"occupancy": k}})
        for k in (1, 2, 4)]
    assert ft.autotune(key=("a", "b"))(matmul).configs == ft.configs.gemm()   # calls ft.mma
    assert ft.autotune()(row_share).configs == ft.configs.rowwise()
    with pytest.raises(AutotuneError, match="config 0 sets 'bk', which is not an ft.Const"):
        ft.autotune(ft.configs.gemm(k_tile="bk"))(row_share)


def test_a_rowwise_tile_covers_the_row(tune):
    fake, timed = tune
    fake.times = [3.0, 1.0, 2.0]
    tuned = ft.autotune(ft.configs.rowwise())(row_share)
    x = np.random.default_rng(4).uniform(0.5, 2.0, (5, 20)).astype(np.float32)
    o, _ = tuned(fl.full((5, 20), np.nan, f32), fl.asarray(x)).sync()
    assert o.tile_shape == (1, 32) and tuned.report.winner == 1 and len(timed) == 3
    want = x.astype(np.float64) / x.astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(o.unpartition().numpy(), want, rtol=1e-6)


def test_configs_that_do_not_fit_the_rank_are_left_out_with_the_reason(tune):
    fake, _ = tune
    fake.times = [1.0]
    tuned = ft.autotune(ft.configs.rowwise(occupancy=(1,)) + [ft.Config(tile=32)])(copy_some)
    x = np.arange(64, dtype=np.float32)
    o, _ = tuned(fl.full(64, np.nan, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    assert tuned.report[0].dropped == ("its tile (1, None) does not fit 'o' of shape (64,): one "
                                       "extent per axis")
    assert tuned.report[1].seconds == 1.0 and tuned.report.winner == 1
    gemm_only = ft.autotune(ft.configs.gemm(occupancy=(1,)))(copy_some)
    out = fl.empty(64, f32)
    with pytest.raises(AutotuneError, match=r"no config fits these arguments:\n  config 0 "
                                            r"Config\(tile=\(64, 64\), hints="):
        gemm_only(out, _host(x))
    assert out.numpy().shape == (64,)     # not moved


def test_the_gemm_space_runs_a_gemm(tune):
    fake, _ = tune
    fake.times = [2.0, 1.0]
    configs = ft.configs.gemm(k_tile="bk", k_values=(32,), occupancy=(1,))[:2]
    tuned = ft.autotune(configs, key=("a", "b"))(matmul)
    rng = np.random.default_rng(8)
    a = rng.integers(-2, 3, (128, 96)).astype(np.float16)   # exact in f16 and f32 sums
    b = rng.integers(-2, 3, (96, 64)).astype(np.float16)
    c, _, _ = tuned(fl.full((128, 64), np.nan, f32), fl.asarray(a), fl.asarray(b)).sync()
    assert c.tile_shape == (128, 64) and [x.seconds for x in tuned.report] == [2.0, 1.0]
    np.testing.assert_array_equal(c.unpartition().numpy(),
                                  a.astype(np.float32) @ b.astype(np.float32))


# -- tuning ahead of time ----------------------------------------------------------------------

def test_tune_runs_nothing_on_its_arguments_and_calls_find_the_ranking(tune):
    fake, timed = tune
    fake.times = [2.0, 1.0]
    configs = [ft.Config(tile=16), ft.Config(tile=32)]
    out, x = fl.full(64, -7.0, f32), _host(np.arange(64))
    report = ft.autotune(configs)(copy_some).tune(out, x)
    assert [c.seconds for c in report] == [2.0, 1.0] and report.winner == 1
    np.testing.assert_array_equal(out.numpy(), np.full(64, -7.0))   # not written, not moved
    again = ft.autotune(configs)(copy_some)       # a new process would read the disk so
    o, _ = again(fl.empty(64, f32), x).sync()
    assert len(timed) == 2 and o.tile_shape == (32,)
    fake.times = [1.0, 2.0]                       # tune() measures again, ranking or not
    assert again.tune(fl.empty(64, f32), x).winner == 0
    o, _ = again(fl.empty(64, f32), x).sync()
    assert len(timed) == 4 and o.tile_shape == (16,)


def test_tune_on_the_cpu_backend_says_it_does_not_tune():
    tuned = ft.autotune([ft.Config(tile=16)])(copy_some)
    with pytest.raises(AutotuneError, match="the cpu backend does not tune; nothing was tuned"):
        tuned.tune(fl.empty(64, f32), _host(np.arange(64)))


SCRIPT = '''\
import fearless as fl
from fearless import tile as ft


@ft.autotune([ft.Config(tile=16), ft.Config(tile=32)], key=("x",))
@ft.kernel
def scaled(o: ft.Out, x: ft.In, factor: fl.f32):
    o.store(ft.load_like(x, o) * factor)


@ft.kernel
def plain(o: ft.Out[fl.f32], x: ft.In[fl.f32]):
    o.store(ft.load_like(x, o))


@ft.autotune([ft.Config(tile=16, step=1), ft.Config(tile=32, step=1)])
@ft.kernel
def shifted(o: ft.Out[fl.f32], x: ft.In[fl.f32], step: ft.Const[int] = 1,
            add: ft.Const[bool] = False, off: ft.Const[int] = 0):
    o.store(ft.load_like(x, o) + (off if add else 0) * step)
'''


@pytest.fixture
def script(tmp_path) -> str:
    path = tmp_path / "tuned_kernels.py"
    path.write_text(SCRIPT)
    yield str(path)
    sys.modules.pop("tuned_kernels", None)


@pytest.mark.parametrize("shapes", [
    ["--signature", "o=f16[2*n],x=f16[2*n]", "--size", "n=32"],  # as fearless bench writes them
    ["--shape", "o=64,x=64", "--signature", "o=f16,x=f16"],       # the older form
], ids=["signature", "shape"])
def test_fearless_tune_stores_the_ranking_its_calls_read(tune, script, capsys, shapes):
    fake, timed = tune
    fake.times = [2.0, 1.0]
    assert main(["tune", f"{script}:scaled", *shapes, "--scalar", "factor=2.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kernel 'scaled': tuned x=f16(64,) in ")
    assert "* config 1 Config(tile=32): 1000000.0 us" in out.splitlines()
    scaled = sys.modules["tuned_kernels"].scaled
    fresh = ft.autotune(scaled.configs, key=("x",))(scaled.kernel)    # reads the disk
    x = np.random.default_rng(1).standard_normal(64).astype(np.float16)
    o, _, _ = fresh(fl.empty(64, f16), fl.asarray(x), 2.5).sync()
    assert len(timed) == 2 and o.tile_shape == (32,)
    np.testing.assert_array_equal(o.unpartition().numpy(), x * np.float16(2.5))


def test_fearless_tune_takes_the_callers_constants(tune, script, capsys):
    """``--const`` gives the ft.Consts no config sets (a bool as 0 or 1); the call with those
    values finds the ranking; a constant the configs set is refused."""
    fake, timed = tune
    fake.times = [2.0, 1.0]
    assert main(["tune", f"{script}:shifted", "--shape", "o=64,x=64",
                 "--const", "add=1,off=3"]) == 0
    assert "tuned o=f32(64,), x=f32(64,), add=True, off=3 in " in capsys.readouterr().out
    shifted = sys.modules["tuned_kernels"].shifted
    fresh = ft.autotune(shifted.configs)(shifted.kernel)    # reads the disk
    x = np.arange(64, dtype=np.float32)
    o, _ = fresh(fl.empty(64, f32), fl.asarray(x), add=True, off=3).sync()
    assert len(timed) == 2 and o.tile_shape == (32,)
    np.testing.assert_array_equal(o.unpartition().numpy(), x + 3)
    assert main(["tune", f"{script}:shifted", "--shape", "o=64,x=64", "--const", "step=2"]) == 2
    assert capsys.readouterr().err == ("error: --const step: the configs of 'shifted' set it; "
                                       "give only the constants no config sets (add, off)\n")


@pytest.mark.parametrize("argv, message", [
    (["{s}:plain", "--shape", "o=64,x=64"],
     "'plain' in {s} is a TileKernel, not an ft.autotune kernel; its ft.autotune kernels: "
     "scaled, shifted; wrap it in @ft.autotune(configs=[ft.Config(...), ...]) (or with no "
     "configs, the "
     "default space)"),
    (["{s}:scaled", "--shape", "o=64,x=64"], "give --scalar factor=VALUE for kernel 'scaled'"),
    (["{s}:scaled", "--shape", "o=64", "--scalar", "factor=1"],
     "give the shape of 'x' for kernel 'scaled': --signature x=[...] (such as x=[4096,4096])"),
    (["{s}:scaled", "--signature", "o=[n],x=[n]", "--size", "n=0", "--scalar", "factor=1"],
     "--signature o: the shape (0,) is not positive integers"),
    (["{s}:scaled", "--signature", "o=[n],x=[m]", "--size", "n=64", "--scalar", "factor=1"],
     "--signature x: the extent 'm': 'm' is not bound; give --size m=... (bound: n)"),
    (["{s}:scaled", "--signature", "o=f16[64],x=f16[64]", "--shape", "x=64",
      "--scalar", "factor=1"],
     "'x' has a shape in --signature and in --shape: give one"),
    (["{s}:scaled", "--shape", "o=64,x=6x"],
     "--shape 'x=6x': expected name=extents joined by x, such as a=4096x4096"),
    (["{s}:scaled", "--shape", "o=64,q=64"],
     "--shape names 'q', which is not a parameter of 'scaled' (those are: o, x, factor)"),
    (["{s}:scaled", "--shape", "o=64,x=64", "--scalar", "factor=big"],
     "--scalar 'factor=big': 'big' is not a number"),
    (["{s}:scaled", "--shape", "o=64,x=64", "--scalar", "factor=1", "--signature",
      "o=f32,x=f32:2"],
     "--signature gives 'x' rank 2, its shape rank 1"),
    (["{s}:scaled", "--shape", "o=64,x=64", "--scalar", "factor=1"],
     "parameter 'o' is generic; give --signature o=f32"),
])
def test_fearless_tune_mistakes_exit_2(script, capsys, argv, message):
    assert main(["tune", *(a.format(s=script) for a in argv)]) == 2
    assert capsys.readouterr() == ("", f"error: {message.format(s=script)}\n")


def test_fearless_tune_on_the_cpu_backend_exits_1_saying_so(script, tmp_path):
    env = dict(os.environ, FEARLESS_BACKEND="cpu", FEARLESS_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "fearless", "tune", f"{script}:scaled",
                           "--shape", "o=64,x=64", "--signature", "o=f32,x=f32",
                           "--scalar", "factor=2"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == ("error: kernel 'scaled': the cpu backend does not tune; nothing was "
                           "tuned\nhelp: tune on the GPU machine that will run the kernel\n")


# -- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_the_default_rowwise_space_and_a_bound_on_the_gpu(backend, tmp_path, monkeypatch):
    _settings(monkeypatch, cache_dir=tmp_path / "cache")
    tuned = ft.autotune(max_seconds=600)(row_share)
    assert tuned.configs == ft.configs.rowwise()
    x = np.random.default_rng(5).uniform(0.5, 2.0, (256, 1000)).astype(np.float32)
    o, _ = tuned(fl.full((256, 1000), np.nan, f32), fl.asarray(x)).sync()
    assert o.tile_shape == (1, 1024)
    want = x.astype(np.float64) / x.astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(o.unpartition().numpy(), want, rtol=1e-5)
    assert all(c.seconds is not None and c.seconds > 0 for c in tuned.report)
    assert tuned.report.seconds > 0 and tuned.report.winner is not None
    tight = ft.autotune(ft.configs.rowwise(), max_seconds=1e-6, key=("x",))(row_share)
    tight(fl.empty((256, 1000), f32), fl.asarray(x)).sync()
    assert [c.skipped is not None for c in tight.report] == [False, True, True]


@pytest.mark.gpu
def test_the_gemm_space_with_a_k_step_on_the_gpu(backend, tmp_path, monkeypatch):
    _settings(monkeypatch, cache_dir=tmp_path / "cache")
    tuned = ft.autotune(ft.configs.gemm(k_tile="bk"), key=("a", "b"))(matmul)
    rng = np.random.default_rng(9)
    a = rng.integers(-2, 3, (512, 512)).astype(np.float16)
    b = rng.integers(-2, 3, (512, 512)).astype(np.float16)
    c, _, _ = tuned(fl.full((512, 512), np.nan, f32), fl.asarray(a), fl.asarray(b)).sync()
    np.testing.assert_array_equal(c.unpartition().numpy(),
                                  a.astype(np.float32) @ b.astype(np.float32))
    assert all(c.seconds is not None or c.dropped for c in tuned.report)
    assert all(c.seconds is not None for c in tuned.report if c.config.tile == (128, 128)), \
        str(tuned.report)
