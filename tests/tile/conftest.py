"""The tile tests' shared fixture: ``tune``, autotuning on the cpu backend with a stand-in timer."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

tuning = importlib.import_module("fearless.autotuning.driver")
timing = importlib.import_module("fearless.runtime.timing")
BASE = importlib.import_module("fearless.kernel.base")


@pytest.fixture
def tune(monkeypatch, tmp_path):
    """Tuning on the cpu backend, a fresh disk cache, and a timer that runs the candidate's
    work and returns the next of ``fake.times`` (one per config that survives, in order);
    ``timed`` counts the timings."""
    monkeypatch.setattr(tuning, "_tunes_on_cpu", lambda: True)
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(
        BASE.CONFIG, cache_dir=tmp_path / "cache", progress=False))
    timed = []

    def fake(enqueue, reps=5):
        enqueue()
        timed.append(len(timed))
        return fake.times.pop(0)

    fake.times = []
    monkeypatch.setattr(timing, "replay_seconds", fake)
    return fake, timed
