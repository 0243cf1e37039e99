"""Helpers shared by several test modules."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fearless import dtypes
from fearless.backends.tileir import tileiras
from fearless.runtime import ahead, device

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


def exact_ints(shape, seed: int, dt: dtypes.DType = dtypes.f32, lo: int = -4,
               hi: int = 4) -> np.ndarray:
    """Integers in [lo, hi] as ``dt`` (never all zero). Sums and products that stay within
    +-2048 are exact in every float dtype but bf16, so any order of the operations (or an FMA)
    gives the same bits on both backends."""
    a = np.random.default_rng(seed).integers(lo, hi, size=shape, endpoint=True)
    a.flat[0] = hi
    return a.astype(dt.numpy)


CROSS_ARCHS = ("sm_80", "sm_90")


def launch_tile(kernel, out, *args, **constants) -> np.ndarray:
    """The values of Partition ``out`` after the tile kernel call ``kernel(out, *args)`` on the
    test's backend. On the cpu backend the same call is first compiled for sm_80 and sm_90 when
    tileiras is installed (as FEARLESS_CROSS_COMPILE does; nothing runs), so that a kernel the
    cpu runs is known to compile for the GPU too."""
    if device.current_backend() == "cpu" and tileiras.find() is not None:
        with ahead.compile_only(CROSS_ARCHS) as made:
            out, *args = kernel(out, *args, **constants).sync()
        assert sorted(m[3] for m in made) == list(CROSS_ARCHS)
    out, *_ = kernel(out, *args, **constants).sync()
    return out.unpartition().numpy()


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


def matmul_tile_loads(schedule, tile: tuple) -> list:
    """The ``load_view_tko`` ops, in every region, of the tile suite's f16 ``matmul`` (bk 64)
    compiled for sm_90 with Out tiles ``tile`` under ``schedule`` (an ``ir.types.Persistent``),
    decoded from its Tile IR bytecode."""
    from fearless.backends.tileir.reader import decode
    from fearless.compiler import compile_tile
    from fearless.dtypes import f16
    from fearless.ir import types as T
    from fearless.kernel import params as P
    from tests.tile.tile_kernels import matmul
    layout = T.Layout(16, (16, 16), (16, 1), True)
    infos = [P.ArgInfo(f16, 2, tile_shape=tile, layout=layout, schedule=schedule),
             P.ArgInfo(f16, 2, layout=layout), P.ArgInfo(f16, 2, layout=layout)]
    types = P.specialise("matmul", matmul.runtime_params, infos)
    compiled = compile_tile(matmul.captured, matmul._ir_params(types), {"bk": 64}, "sm_90",
                            "tileir")
    (fn,) = decode(compiled.tileir).functions

    def walk(block):
        for op in block.ops:
            yield op
            for region in op.regions:
                yield from walk(region)
    return [op for op in walk(fn.body) if op.name == "load_view_tko"]
