"""The tile passes in the compile pipeline: the ``passes`` stage of tile kernels, run on the CPU
and on the GPU compile path alike, with the verifier after each pass; what the GPU cannot run is
refused before any lowering, with the same text on both paths.
"""
from __future__ import annotations

import pytest

import fearless as fl
from fearless.cli import main
from fearless.compiler import compile_tile, pipeline
from fearless.errors import CompileError
from fearless.ir import types as T
from fearless.passes import TILE_PASSES
from fearless.passes.memory_order import Order
from fearless.runtime import ahead
from tests.support import import_source
from tests.tile import tile_kernels as K

UNSUPPORTED = '''\
from fearless import f32
from fearless import tile as ft
import math

@ft.kernel
def asin_of(c: ft.Out[f32], a: ft.In[f32]):
    t = ft.load_like(a, c)
    c.store(math.asin(t))

@ft.kernel
def counts_down(c: ft.Out[f32], a: ft.In[f32]):
    t = ft.load_like(a, c)
    for k in range(3, 0, -1):
        t = t * 2.0
    c.store(t)
'''
GOLDEN = {  # the texts the Tile IR lowering gave when it refused these
    "asin_of": """\
kernel 'asin_of': math.asin has no Tile IR operation
 --> tile_refused.py:8:13
  |
8 |     c.store(math.asin(t))
  |             ^^^^^^^^^^^^
help: tile kernels support if, for over range(...), while, break, continue, return, tile \
operations and math functions with a Tile IR operation""",
    "counts_down": """\
kernel 'counts_down': tile-kernel loops need a positive constant step
  --> tile_refused.py:13:5
   |
13 |     for k in range(3, 0, -1):
   |     ^^^^^^^^^^^^^^^^^^^^^^^^^
help: write range(start, stop) or range(start, stop, k) with k > 0""",
}


@pytest.fixture
def refused(tmp_path):
    path = tmp_path / "tile_refused.py"
    path.write_text(UNSUPPORTED)
    return import_source(path, "tile_refused"), str(path)


def _args():
    return fl.zeros(64).partition(64), fl.zeros(64)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_cpu_backend_refuses_what_the_gpu_cannot_run_without_lowering_it(name, refused,
                                                                              monkeypatch):
    module, file = refused

    def lowered(*args, **kwargs):
        raise AssertionError("the cpu backend lowered the kernel to Tile IR")
    monkeypatch.setattr(pipeline, "lower_tile", lowered)
    with pytest.raises(CompileError) as info:
        getattr(module, name)(*_args())
    assert str(info.value).replace(file, "tile_refused.py") == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_gpu_compile_path_refuses_with_the_same_text(name, refused):
    module, _ = refused
    with pytest.raises(CompileError) as on_cpu:
        getattr(module, name)(*_args())
    with ahead.compile_only(["sm_90"]), pytest.raises(CompileError) as on_gpu:
        getattr(module, name)(*_args())
    assert str(on_gpu.value) == str(on_cpu.value)


OUT1, IN1 = T.TensorView(fl.f32, 1, T.Role.OUT, (128,)), T.TensorView(fl.f32, 1, T.Role.IN)


def _compile(until: str, kernel=K.store_load_store, types=(OUT1, IN1)):
    return compile_tile(kernel.captured, kernel._ir_params(types), {}, None, until)


def test_the_verifier_runs_after_the_frontend_and_each_tile_pass(monkeypatch):
    seen = []

    def verify(fn):
        seen.append(fn)
        return fn
    monkeypatch.setattr(pipeline, "verify", verify)
    _compile("passes")
    assert len(seen) == 1 + len(TILE_PASSES)


def test_a_compile_to_ir_runs_the_passes_for_the_cpu_backend():
    compiled = _compile("ir")
    orders = [op.attrs.get("order") for op in compiled.fn.walk() if op.name == "tile.store"]
    assert orders and all(o is Order.AFTER_ALL for o in orders)
    assert "order" not in compiled.ir  # the frontend's text, before the passes


def test_inspect_shows_the_passes_stage_of_a_tile_kernel(capsys):
    add = str(pipeline.__file__).replace("src/fearless/compiler/pipeline.py",
                                         "examples/tile_vector_add.py") + ":add"
    assert main(["inspect", add, "--stage", "passes", "--signature", "z=f32:1/1024"]) == 0
    out = capsys.readouterr().out
    assert "tile.store %z" in out and "order = after_all" in out
