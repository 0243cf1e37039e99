"""Shared test setup: a backend per test, and GPU tests that skip cleanly without a GPU.

Plain tests run on the cpu backend (so CI and a GPU machine test the same thing); tests marked
``gpu`` run on the cuda backend and are skipped when no usable GPU is present. The cpu backend's
race detector is on, as it is by default (``FEARLESS_RACECHECK=0`` in the environment turns it
off).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fearless.runtime import device

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `import examples.<name>` from a source checkout


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
