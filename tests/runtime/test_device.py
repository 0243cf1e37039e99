"""The CUDA device (runtime/device.py): made current on each thread that uses it.

The driver keeps the current context per thread, so a launch from a thread other than the one
that made the device current needs its own ``set_current``. Checked here without a GPU (a
stand-in for cuda.core's Device counts the calls); the real launch from a worker thread is
tests/runtime/test_streams.py's gpu case.
"""
from __future__ import annotations

import threading

import pytest

from fearless.runtime import device


def test_each_thread_makes_the_device_current_once(monkeypatch):
    core = pytest.importorskip("cuda.core")
    made_current = []

    class Device:
        def __init__(self, ordinal):
            self.ordinal = ordinal

        def set_current(self):
            made_current.append(threading.get_ident())

    monkeypatch.setattr(core, "Device", Device)
    monkeypatch.setattr(device, "cuda_probe", lambda: (True, "a stand-in GPU"))
    got, alive = [], threading.Barrier(3)   # all alive at once: their idents differ

    def use_twice():
        got.append((device.cuda_device(), device.cuda_device()))
        alive.wait(timeout=10)

    workers = [threading.Thread(target=use_twice) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(made_current) == 3 and len(set(made_current)) == 3   # once on each thread
    assert all(a is b and isinstance(a, Device) for a, b in got)     # then the thread's own
