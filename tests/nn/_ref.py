"""Helpers of the fearless.nn tests: dtypes and their unit roundoff, rounding from float64 (the
references emulate each rounding step a function documents), random inputs, and a call that is
also compiled for sm_80 and sm_90 before it runs on the cpu backend."""
from __future__ import annotations

import numpy as np
import pytest

from fearless import dtypes
from fearless.backends.tileir import tileiras
from fearless.nn import _common
from fearless.runtime import ahead, device

FLOATS = [pytest.param(dtypes.f16, id="f16"), pytest.param(dtypes.bf16, id="bf16"),
          pytest.param(dtypes.f32, id="f32")]
CROSS_ARCHS = ("sm_80", "sm_90")

# unit roundoff: half the distance from 1 to the next float
UNIT = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24}


def cases(main: list, extra: list) -> list:
    """Parameter sets ``(dtype, *case)``: every dtype with each ``main`` case, and bf16 (the
    models' dtype) alone with the ``extra`` ones: each distinct shape is a compile for sm_80 and
    sm_90, which the suite's time pays for."""
    out = [pytest.param(p.values[0], *m, id=_id(p.id, m)) for p in FLOATS for m in main]
    return out + [pytest.param(dtypes.bf16, *m, id=_id("bf16", m)) for m in extra]


def _id(dt: str, case: tuple) -> str:
    """``bf16-3x200-neox``: shapes joined by x, other values as they print."""
    def one(v):
        if isinstance(v, tuple):
            return "x".join(map(str, v))
        return getattr(v, "__name__", str(v))
    return "-".join([dt, *map(one, case)])


def unit(dt: dtypes.DType) -> float:
    return UNIT[dt.name]


def tiny(dt: dtypes.DType) -> float:
    """The spacing of ``dt``'s subnormals: a rounding's absolute error bound near zero is half."""
    return {"f16": 2.0 ** -24, "bf16": 2.0 ** -133, "f32": 2.0 ** -149}[dt.name]


def rnd(a, dt: dtypes.DType) -> np.ndarray:
    """``a`` rounded once to ``dt`` (from float64: the exact value of most 16-bit operations)."""
    return dtypes.convert(np.asarray(a, np.float64), dt)


def f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def rand(dt: dtypes.DType, shape, seed: int, scale: float = 1.0, shift: float = 0.0):
    """Normal random values of ``dt`` (rounded from float64), never all zeros."""
    a = np.random.default_rng(seed).standard_normal(shape) * scale + shift
    return rnd(a, dt)


def call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with poisoned outputs (NaN, or the most negative integer); on the
    cpu backend every kernel it launches is first compiled for sm_80 and sm_90 (nothing runs
    then), so each kernel a test runs is known to compile for the GPU too."""
    with _common.poisoned_outputs():
        if device.current_backend() == "cpu" and tileiras.find() is not None:
            with ahead.compile_only(CROSS_ARCHS) as made:
                fn(*args, **kwargs)
            assert {m[3] for m in made} == set(CROSS_ARCHS)
        return fn(*args, **kwargs)


def host(t) -> np.ndarray:
    """A result (fearless Tensor or torch tensor) as a NumPy array."""
    if _common.is_torch(t):
        import torch
        return (t.float() if t.dtype == torch.bfloat16 else t).cpu().numpy()
    return t.numpy()
