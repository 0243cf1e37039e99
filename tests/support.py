"""Helpers shared by several test modules."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fearless import dtypes
from fearless.runtime import device

# Both backends, for ``@pytest.mark.parametrize("backend", BACKENDS, indirect=True)``: the cuda
# case is marked ``gpu``, so conftest's ``backend`` fixture runs it on the GPU (or skips it).
BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def random_array(dt: dtypes.DType, shape, seed: int = 0) -> np.ndarray:
    """Random values of ``dt`` (never all zeros): small ints, normals for floats."""
    rng = np.random.default_rng(seed)
    if dt.is_bool:
        a = rng.random(shape) < 0.5
    elif dt.is_int:
        info = np.iinfo(dt.numpy)
        a = rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True)
    else:
        a = rng.standard_normal(shape) * 10
    a = np.asarray(a).astype(dt.numpy)
    if a.size and not a.any():
        a.flat[0] = 1
    return a


def on_cpu(run):
    """``run()`` on the CPU backend, whatever the test's backend (a GPU test's CPU reference)."""
    previous = device.current_backend()
    device.set_backend("cpu")
    try:
        return run()
    finally:
        device.set_backend(previous)


def import_source(path: Path, name: str):
    """Import the Python file ``path`` as module ``name`` (kernels need a real source file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
