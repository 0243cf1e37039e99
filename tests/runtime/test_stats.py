"""``fl.stats``: compiles (cold, disk, memory), launches, refused calls by error type, kernel
errors, graph replays and device memory; off and untouched by default; JSON and Prometheus
exports; ``fearless stats SCRIPT``; ``fl.profile()``'s launch times (the wall clock on the cpu
backend, CUDA events on the GPU)."""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import cli
from fearless import tile as ft
from fearless.dtypes import f32
from fearless.errors import AliasError, KernelBoundsError
from fearless import observe
from fearless.runtime import dispatch, memory, pack, tile_launch

BASE = importlib.import_module("fearless.kernel.base")
ROOT = Path(__file__).resolve().parents[2]


@fl.kernel
def twice(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = 2.0 * x[i + 1]          # reads one past its own element


@ft.kernel
def plus_one(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load_like(x, out) + 1.0)


@fl.kernel
def copy(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i]


@pytest.fixture
def counting(monkeypatch, tmp_path, stats_on):
    """fl.stats on, from zero, with a fresh disk cache; off again afterwards."""
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG,
                                                           cache_dir=tmp_path / "cache"))
    return stats_on


MODULES = (pack, dispatch, tile_launch, memory)


def test_off_by_default_the_launch_paths_have_no_observer():
    assert not fl.stats.on and not fl.stats()["enabled"]
    assert all(m.OBSERVER is None for m in MODULES)
    fl.stats.enable()
    try:
        assert all(m.OBSERVER is not None for m in MODULES)
    finally:
        fl.stats.disable()
    assert all(m.OBSERVER is None for m in MODULES)
    fl.stats.reset()


def test_it_composes_with_another_tool_that_wraps_the_launchers(counting):
    """fearless.models.launches.counting() swaps the launch functions in and out; stats
    counts through it and leaves it intact, in either order."""
    from fearless.models.launches import counting as launch_names
    x = fl.asarray(np.arange(9, dtype=np.float32))
    with launch_names() as names:
        twice[twice.prepare(8)](x, fl.empty(8, f32))
        fl.stats.disable()
    fl.stats.enable()
    twice[twice.prepare(8)](x, fl.empty(8, f32))
    assert names == ["twice"] and fl.stats()["kernels"]["twice"]["launches"] == 2


def test_launches_compiles_and_errors(counting):
    twice._compiled.clear()   # compiled afresh into this test's empty disk cache
    twice._entries.clear()
    x = fl.asarray(np.arange(9, dtype=np.float32))
    out = fl.empty(8, f32)
    for _ in range(3):
        twice[twice.prepare(8)](x[:9], out)
    with pytest.raises(AliasError):
        twice[twice.prepare(8)](x[:9], x[:8])
    with pytest.raises(KernelBoundsError):   # 8 threads read x[1..8]: x[8] is past 8 elements
        twice[twice.prepare(8)](x[:8], out)
        fl.synchronize()
    snap = fl.stats()
    k = snap["kernels"]["twice"]
    assert k["launches"] == 4
    assert k["refused"] == {"AliasError": 1} and k["kernel_errors"] == {"KernelBoundsError": 1}
    # the cpu compile (CI also compiles each kernel for GPUs: FEARLESS_CROSS_COMPILE)
    (label, c), = ((s, c) for s, c in k["compiles"].items() if s.endswith("for cpu"))
    assert label.startswith("(array<f32, 1d, read>")
    assert (c["cold"], c["disk"]) == (1, 0) and c["cold_s"] > 0
    assert c["memory"] >= 3          # the later calls' slow paths found it compiled
    assert snap["memory"] is None    # the cpu backend


def test_a_disk_hit_and_a_tile_kernel(counting):
    x = fl.asarray(np.arange(64, dtype=np.float32))
    for _ in range(2):
        o, _ = plus_one(fl.empty(64, f32).partition(16), x).sync()
    plus_one._compiled.clear()
    plus_one._entries.clear()
    plus_one(fl.empty(64, f32).partition(16), x).sync()
    k = fl.stats()["kernels"]["plus_one"]
    assert k["launches"] == 3
    (c,) = (c for s, c in k["compiles"].items() if s.endswith("for cpu"))
    assert (c["cold"], c["disk"]) == (1, 1) and c["disk_s"] >= 0


def test_graph_replays_are_not_launches(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    out = fl.empty(8, f32)
    with fl.capture() as graph:
        twice[twice.prepare(8)](x, out)
    for _ in range(5):
        graph.replay()
    graph.sync()
    snap = fl.stats()
    assert snap["graphs"]["replays"] == 6 and snap["kernels"]["twice"]["launches"] == 0


def test_quiet_work_and_errors_without_a_kernel_are_not_counted(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    with fl.stats.quiet():
        twice[twice.prepare(8)](x, fl.empty(8, f32))
        with pytest.raises(AliasError):
            twice[twice.prepare(8)](x[:9], x[:8])
    with pytest.raises(fl.errors.MovedError):
        p = fl.empty(8, f32)
        p.partition(8)
        p.numpy()     # names no kernel
    k = fl.stats()["kernels"]
    assert set(k) <= {"twice"} and all(v["launches"] == 0 and not v["refused"]
                                       for v in k.values())


def test_json_and_prometheus(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    twice[twice.prepare(8)](x, fl.empty(8, f32))
    assert json.loads(fl.stats.json()) == json.loads(json.dumps(fl.stats()))
    text = fl.stats.prometheus()
    assert 'fearless_launches_total{kernel="twice"} 1' in text.splitlines()
    for line in text.splitlines():   # every sample: name{labels} value
        assert line.startswith("# ") or re.fullmatch(
            r'[a-z_]+(\{([a-z]+="([^"\\]|\\.)*",?)*\})? [0-9.e+-]+', line), line


def test_the_command_line_prints_the_counts_of_a_script_that_exits(tmp_path, capsys):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nimport numpy as np\nimport fearless as fl\n"
                      "from tests.runtime.test_stats import twice\n"
                      "x = fl.asarray(np.arange(9, dtype=np.float32))\n"
                      "twice[twice.prepare(8)](x, fl.empty(8, fl.f32))\nsys.exit(3)\n")
    assert cli.main(["stats", str(script)]) == 3
    assert re.search(r"^twice\s+1\s", capsys.readouterr().out, re.M)
    fl.stats.reset()


def test_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEARLESS_EXAMPLE_SIZES", "small")
    assert cli.main(["stats", str(ROOT / "examples/saxpy.py"), "--format", "json"]) == 0
    out = capsys.readouterr().out
    snap = json.loads(out[out.index("{"):])
    assert snap["kernels"]["saxpy"]["launches"] > 0 and not fl.stats.on
    assert cli.main(["stats", str(ROOT / "examples/saxpy.py")]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^saxpy\s+\d+", table, re.M) and "graph replays: 0" in table
    fl.stats.reset()


# profiling ------------------------------------------------------------------------------------

def test_percentiles_are_nearest_rank():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 99, 100, 101, 1000):
        values = sorted(rng.standard_normal(n))
        for p in (1, 25, 50, 90, 99, 100):
            # NumPy's inverted_cdf is the nearest-rank definition (Hyndman and Fan, type 1)
            assert observe.percentile(values, p) == np.percentile(values, p,
                                                                  method="inverted_cdf")


def test_a_long_run_keeps_a_bounded_sample_and_exact_totals(monkeypatch):
    monkeypatch.setattr(observe, "KEEP", 64)
    times = observe._Times()
    values = np.random.default_rng(3).uniform(1e-6, 1e-3, 5000)
    for v in values:
        times.add(float(v))
    t = times.summary("host_wall")
    assert len(times.kept) == 64 and t["count"] == 5000
    assert t["min_s"] == values.min() and t["max_s"] == values.max()
    assert t["total_s"] == pytest.approx(values.sum(), rel=1e-12)
    assert set(times.kept) <= set(values.tolist())
    # a uniform sample of a uniform distribution: its median is near the middle
    assert 2.5e-4 < t["p50_s"] < 7.5e-4 and t["p50_s"] <= t["p99_s"] <= t["max_s"]


def test_profile_times_each_cpu_launch_with_the_wall_clock(counting):
    fl.stats.disable()
    x = fl.asarray(np.arange(9, dtype=np.float32))
    twice[twice.prepare(8)](x, fl.empty(8, f32))           # compiled before the timing
    outside = fl.stats()["kernels"]
    assert "twice" not in outside or outside["twice"]["device_time"] is None
    t0 = time.perf_counter()
    with fl.profile() as stats:
        assert stats is fl.stats and fl.stats.on and fl.stats()["profiling"]
        for _ in range(7):
            twice[twice.prepare(8)](x, fl.empty(8, f32))
        plus_one(fl.empty(64, f32).partition(16), fl.asarray(np.zeros(64, np.float32))).sync()
    wall = time.perf_counter() - t0
    assert not fl.stats.on and not fl.stats.profiling   # as before the block
    snap = fl.stats()
    t = snap["kernels"]["twice"]["device_time"]
    assert t["clock"] == "host_wall" and t["count"] == 7 == snap["kernels"]["twice"]["launches"]
    assert 0 < t["min_s"] <= t["p50_s"] <= t["p99_s"] <= t["max_s"] <= t["total_s"] < wall
    assert t["total_s"] >= 7 * t["min_s"]
    assert snap["kernels"]["plus_one"]["device_time"]["count"] == 1
    twice[twice.prepare(8)](x, fl.empty(8, f32))           # after the block: not timed
    assert fl.stats()["kernels"]["twice"]["device_time"]["count"] == 7


def test_counting_without_profiling_times_nothing(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    twice[twice.prepare(8)](x, fl.empty(8, f32))
    k = fl.stats()["kernels"]["twice"]
    assert k["launches"] == 1 and k["device_time"] is None and not fl.stats()["profiling"]
    assert "fearless_kernel_seconds" not in fl.stats.prometheus()


def test_quiet_and_captured_launches_are_not_timed(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    with fl.profile():
        twice[twice.prepare(8)](x, fl.empty(8, f32))
        with fl.stats.quiet():
            twice[twice.prepare(8)](x, fl.empty(8, f32))
        out = fl.empty(8, f32)
        with fl.capture() as graph:
            twice[twice.prepare(8)](x, out)
        graph.replay()
        graph.sync()
    assert fl.stats.on   # the fixture's counting stays on after the block
    assert fl.stats()["kernels"]["twice"]["device_time"]["count"] == 1


def test_the_exports_carry_the_launch_times(counting):
    x = fl.asarray(np.arange(9, dtype=np.float32))
    with fl.profile():
        for _ in range(3):
            twice[twice.prepare(8)](x, fl.empty(8, f32))
    snap = json.loads(fl.stats.json())
    t = snap["kernels"]["twice"]["device_time"]
    assert t["count"] == 3 and t["clock"] == "host_wall"
    lines = fl.stats.prometheus().splitlines()
    assert "# TYPE fearless_kernel_seconds summary" in lines
    labels = 'kernel="twice",clock="host_wall"'
    for q, key in (("0", "min_s"), ("0.5", "p50_s"), ("0.99", "p99_s"), ("1", "max_s")):
        assert f'fearless_kernel_seconds{{{labels},quantile="{q}"}} {t[key]}' in lines
    assert f"fearless_kernel_seconds_count{{{labels}}} 3" in lines
    assert f"fearless_kernel_seconds_sum{{{labels}}} {t['total_s']}" in lines
    for line in lines:
        assert line.startswith("# ") or re.fullmatch(
            r'[a-z_]+(\{([a-z]+="([^"\\]|\\.)*",?)*\})? [0-9.e+-]+', line), line


def test_fearless_profile_in_the_environment_times_from_the_first_launch(tmp_path):
    script = ("import json, numpy as np, fearless as fl\n"
              "from tests.runtime.test_stats import twice\n"
              "x = fl.asarray(np.arange(9, dtype=np.float32))\n"
              "for _ in range(4):\n"
              "    twice[twice.prepare(8)](x, fl.empty(8, fl.f32))\n"
              "print(json.dumps(fl.stats()['kernels']['twice']['device_time']))\n")
    env = {**os.environ, "FEARLESS_PROFILE": "1", "FEARLESS_BACKEND": "cpu",
           "FEARLESS_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    t = json.loads(run.stdout.splitlines()[-1])
    assert t["count"] == 4 and t["clock"] == "host_wall" and t["p50_s"] > 0


def test_the_command_line_profiles(tmp_path, capsys):
    script = tmp_path / "timed.py"
    script.write_text("import numpy as np\nimport fearless as fl\n"
                      "from tests.runtime.test_stats import twice\n"
                      "x = fl.asarray(np.arange(9, dtype=np.float32))\n"
                      "for _ in range(3):\n"
                      "    twice[twice.prepare(8)](x, fl.empty(8, fl.f32))\n")
    assert cli.main(["stats", str(script), "--profile", "--format", "json"]) == 0
    out = capsys.readouterr().out
    snap = json.loads(out[out.index("{"):])
    assert snap["kernels"]["twice"]["device_time"]["count"] == 3
    assert cli.main(["stats", str(script), "--profile"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^twice\s+3\s.*\s\d+\.\d\d\s+\d+\.\d\d\s+-$", table, re.M), table
    assert "launch times: host_wall" in table
    fl.stats.reset()


@pytest.mark.gpu
def test_device_memory_is_counted(backend, counting):
    # None until this counting sees a device allocation
    before = (fl.stats()["memory"] or {"current": 0})["current"]
    t = fl.empty((1 << 20,), f32)
    mem = fl.stats()["memory"]
    assert mem["current"] - before == 4 << 20 and mem["peak"] >= mem["current"]
    del t
    import gc
    gc.collect()
    assert fl.stats()["memory"]["current"] == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


@pytest.mark.gpu
def test_profile_times_gpu_launches_with_cuda_events(backend, counting):
    n = 1 << 26                  # 256 MiB per array, far past an H200's 50 MiB of L2
    x = fl.asarray(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    out = fl.empty(n, f32)
    launch = copy.prepare(n)
    copy[launch](x, out)         # compiled and warm, counted, not timed
    fl.synchronize()
    walls = []
    with fl.profile():
        for _ in range(20):
            t0 = time.perf_counter()
            copy[launch](x, out)
            fl.synchronize()
            walls.append(time.perf_counter() - t0)
        for _ in range(30):      # back to back: the events resolve when the stats are read
            copy[launch](x, out)
    k = fl.stats()["kernels"]["copy"]
    t = k["device_time"]
    assert t["clock"] == "cuda_events" and t["count"] == 50 and k["launches"] == 51
    # the floor: 2 x 256 MiB at no more than 8 TB/s (the H200's HBM peaks at 4.8; the L2
    # may hold up to 50 MiB of the traffic between runs)
    assert t["min_s"] >= 2 * 4 * n / 8e12
    # the ceiling: the host's wall clock around a launch and its synchronisation
    assert t["min_s"] <= t["p50_s"] <= statistics.median(walls)
    assert t["p99_s"] <= t["max_s"] <= t["total_s"] <= 50 * max(walls)
    np.testing.assert_array_equal(out.numpy(), x.numpy())


@pytest.mark.gpu
def test_gpu_tile_launches_are_timed_and_captured_ones_are_not(backend, counting):
    x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
    part = fl.empty(1 << 16, f32).partition(1024)
    part, _ = plus_one(part, x).sync()   # compiled, not timed
    other = fl.empty(1 << 16, f32).partition(1024)
    with fl.profile():
        for _ in range(5):
            part, _ = plus_one(part, x).sync()
        with fl.capture() as graph:
            plus_one(other, x).enqueue()
        for _ in range(3):
            graph.replay()
        graph.sync()
    t = fl.stats()["kernels"]["plus_one"]["device_time"]
    assert t["clock"] == "cuda_events" and t["count"] == 5 and 0 < t["min_s"] <= t["max_s"]
    np.testing.assert_array_equal(part.unpartition().numpy(), x.numpy() + 1)


@pytest.mark.gpu
def test_another_thread_reads_the_times_and_the_device_memory(backend, counting):
    x = fl.asarray(np.arange(1 << 20, dtype=np.float32))
    out = fl.empty(1 << 20, f32)
    with fl.profile():
        for _ in range(10):
            copy[copy.prepare(1 << 20)](x, out)
    got = {}
    reader = threading.Thread(target=lambda: got.update(fl.stats()))  # a metrics thread
    reader.start()
    reader.join()
    assert got["kernels"]["copy"]["device_time"]["count"] == 10
    mem = got["memory"]
    assert 0 < mem["device_free"] < mem["device_total"] and mem["device_total"] >= 1 << 30
    assert mem["current"] >= 2 * 4 << 20
    lines = fl.stats.prometheus().splitlines()
    assert any(line.startswith("fearless_device_memory_free_bytes ") for line in lines)
    assert f"fearless_device_memory_total_bytes {mem['device_total']}" in lines
