"""``fl.stats``: compiles (cold, disk, memory), launches, refused calls by error type, kernel
errors, graph replays and device memory; off and untouched by default; JSON and Prometheus
exports; ``fearless stats SCRIPT``."""
from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import fearless as fl
from fearless import cli
from fearless import tile as ft
from fearless.dtypes import f32
from fearless.errors import AliasError, KernelBoundsError
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


@pytest.fixture
def counting(monkeypatch, tmp_path):
    """fl.stats on, from zero, with a fresh disk cache; off again afterwards."""
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG,
                                                           cache_dir=tmp_path / "cache"))
    fl.stats.reset()
    fl.stats.enable()
    yield fl.stats
    fl.stats.disable()
    fl.stats.reset()


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
