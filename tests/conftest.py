"""Shared test setup: a backend per test, and GPU tests that skip cleanly without a GPU.

Plain tests run on the cpu backend (so CI and a GPU machine test the same thing); tests marked
``gpu`` run on the cuda backend and are skipped when no usable GPU is present. The cpu backend's
race detector is on, as it is by default (``FEARLESS_RACECHECK=0`` in the environment turns it
off); the JIT cache is a fresh folder per session and slow compiles print no progress line, unless
the environment sets ``FEARLESS_CACHE_DIR`` / ``FEARLESS_PROGRESS``. With
``FEARLESS_CROSS_COMPILE=sm_80,sm_90`` (as ``.ci/run`` sets) every kernel a test launches on the
cpu backend is also compiled for those GPUs, and a failure fails that test. ``tune``: autotuning
(``ft.autotune``, ``fl.autotune``) on the cpu backend with a stand-in timer.
"""
from __future__ import annotations

import atexit
import dataclasses
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("FEARLESS_PROGRESS", "0")  # compile times vary: keep stderr deterministic
if "FEARLESS_CACHE_DIR" not in os.environ:  # a session's own JIT cache: no hits from old runs
    os.environ["FEARLESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fearless-tests-")
    atexit.register(shutil.rmtree, os.environ["FEARLESS_CACHE_DIR"], ignore_errors=True)

from fearless.config import CONFIG  # noqa: E402 (after the environment is set)
from fearless.runtime import device  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `import examples.<name>` from a source checkout


def pytest_report_header(config):
    archs = ", ".join(CONFIG.cross_compile) or "none (FEARLESS_CROSS_COMPILE)"
    return f"fearless: cpu-backend kernels also compile for: {archs}"


@pytest.fixture(autouse=True)
def backend(request):
    """cpu for plain tests; cuda for ``gpu`` tests, skipped when no usable GPU is present."""
    gpu = request.node.get_closest_marker("gpu") is not None
    if gpu and not device.cuda_probe()[0]:
        pytest.skip(f"needs an NVIDIA GPU: {device.cuda_probe()[1]}")
    previous = device.current_backend()
    device.set_backend("cuda" if gpu else "cpu")
    yield "cuda" if gpu else "cpu"
    device.set_backend(previous)


@pytest.fixture
def tune(monkeypatch, tmp_path):
    """Tuning on the cpu backend, a fresh disk cache, and a timer that runs each candidate's
    work once and gives it the next of ``fake.times`` (one per config that survives its trial,
    in order); ``timed`` counts the configs timed."""
    driver = importlib.import_module("fearless.autotuning.driver")
    base = importlib.import_module("fearless.kernel.base")
    timing = importlib.import_module("fearless.runtime.timing")
    monkeypatch.setattr(driver, "_tunes_on_cpu", lambda: True)
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(
        base.CONFIG, cache_dir=tmp_path / "cache", progress=False))
    timed = []

    def fake(candidates, rounds=5, before=None):
        out = []
        for prepare in candidates:
            prepare()()
            timed.append(len(timed))
            out.append(fake.times.pop(0))
        return out

    fake.times = []
    monkeypatch.setattr(timing, "interleaved_seconds", fake)
    return fake, timed


@pytest.fixture
def stats_on():
    """fl.stats on, from zero; off and reset again afterwards."""
    import fearless as fl
    fl.stats.reset()
    fl.stats.enable()
    yield fl.stats
    fl.stats.disable()
    fl.stats.reset()
