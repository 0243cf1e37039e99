"""Every example on every backend: CPU always, the GPU with ``pytest -m gpu``.

Each example checks its own result against a NumPy float64 reference and raises on a miss; the
outputs are poison-filled (NaN or an impossible integer) so unwritten elements show.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from examples import NAMES
from tests.support import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", NAMES)
def test_example(name, backend, tmp_path):
    module = importlib.import_module(f"examples.{name}")
    kwargs = {"out_png": str(tmp_path / "edges.png")} if name == "image_filter" else {}
    result = module.run(**kwargs)
    assert result.backend == backend
    assert 0 <= result.error_ratio <= 1
    if name == "image_filter":
        Image = pytest.importorskip("PIL.Image", reason="writing the PNG needs the demo extra")
        png = np.asarray(Image.open(tmp_path / "edges.png"))
        assert png.ndim == 2 and png.max() == 255  # scaled edges of the real photograph
