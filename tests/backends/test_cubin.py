"""backends/cubin.py: a kernel's stack frame read from its cubin, and the PerformanceWarning of
a tile kernel that spills (an f16 GEMM tile of 128 x 256 with one consumer warp group: 6% of
cuBLAS on the H200), and fearless's default hint that keeps such a tile from spilling."""
from __future__ import annotations

import dataclasses
import importlib
import warnings

import pytest

from fearless.backends.cubin import frame_bytes
from fearless.backends.tileir import tileiras
from fearless.dtypes import f16, f32
from fearless.errors import PerformanceWarning
from fearless.ir import types as T
from fearless.kernel import params as P
from fearless import tile as ft
from tests.tile.tile_kernels import matmul


def test_bytes_that_are_not_a_cubin_have_no_frame():
    assert frame_bytes(b"") == 0
    assert frame_bytes(b"\x7fELF" + bytes(60)) == 0      # a header with no sections
    assert frame_bytes(b"PK\x03\x04 not an elf at all") == 0


def _compile_gemm(tile, monkeypatch, tmp_path, schedule=None, hints=None):
    """(the sm_90 compile of tests' f16 matmul with Out tiles ``tile`` and entry ``hints``, the
    messages of its spill warnings), compiled afresh into an empty disk cache."""
    if tileiras.find() is None:
        pytest.skip("no tileiras installed")
    base = importlib.import_module("fearless.kernel.base")
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, cache_dir=tmp_path))
    layout = T.Layout(16, (16, 16), (16, 1), True)
    infos = [P.ArgInfo(f16, 2, tile_shape=tile, layout=layout, schedule=schedule),
             P.ArgInfo(f16, 2, layout=layout), P.ArgInfo(f16, 2, layout=layout)]
    kernel = ft.kernel(matmul.fn, hints=hints) if hints else matmul
    types = P.specialise("matmul", kernel.runtime_params, infos)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = kernel.compile_for(types, {"bk": 64}, "cuda", "sm_90", fresh=True)
    return compiled, [str(w.message) for w in caught if issubclass(w.category, PerformanceWarning)
                      and "spills" in str(w.message)]


# 128 x 256 spills with one consumer warp group (the hint at 4); fearless's default gives it two
@pytest.mark.parametrize("tile, hints, spills", [
    ((128, 128), None, False), ((128, 256), None, False), ((256, 128), None, False),
    ((128, 256), {"sm_90": {"num_worker_warps_per_cta": 4}}, True)])
def test_a_gemm_tile_that_spills_is_named_at_compile(tile, hints, spills, monkeypatch, tmp_path):
    compiled, named = _compile_gemm(tile, monkeypatch, tmp_path, hints=hints)
    assert compiled.info.mma      # an ft.mma kernel: tile_launch.idle_sm_advice weighs it
    assert (frame_bytes(compiled.cubin) > 0) is spills
    assert bool(named) is spills
    if spills:
        assert "'num_worker_warps_per_cta': 8" in named[0] and f"{tile}" in named[0]


@pytest.mark.parametrize("tile", [(128, 128), (128, 256)])
def test_no_launch_of_a_stream_k_gemm_spills(tile, monkeypatch, tmp_path):
    # compiled as one launch with an atomic count, the accumulator spilled (816 bytes per thread
    # at 128 x 128, 1.1-13.7x slower than persistent on the H200); each launch alone does not
    for phase in (1, 2, 3):
        compiled, named = _compile_gemm(tile, monkeypatch, tmp_path,
                                        T.Persistent("grouped", 8, stream_k=True, phase=phase))
        # the pieces and fixup launches take the workspace: the partial sums' pointer and slot
        # count, as parameter 3; the whole waves' launch does not
        if phase == 1:
            assert compiled.info.stream_k == () and compiled.info.abi.slots[-1].param < 3
        else:
            assert compiled.info.stream_k == (f32, tile)
            assert [(slot.kind, slot.param) for slot in compiled.info.abi.slots[-2:]] == \
                [("ptr", 3), ("extent", 3)]
        assert frame_bytes(compiled.cubin) == 0 and named == [], (phase, named)


def test_spill_advice_names_the_worker_warps_only_where_the_kernels_hints_kept_them_out():
    from types import SimpleNamespace
    from fearless.compiler import pipeline
    from fearless.ir.opdef import Op

    def state(arch, acc=None, hints=None):
        ops = [] if acc is None else [SimpleNamespace(name=Op.TILE_MMA, results=[
            SimpleNamespace(type=T.Tile(f32, acc))])]
        fn = SimpleNamespace(attrs={}, walk=lambda: iter(ops))
        return SimpleNamespace(arch=arch, hints=hints or {}, out=SimpleNamespace(
            fn=fn, info=SimpleNamespace(mma=acc is not None)))

    four = {"sm_90": {"num_worker_warps_per_cta": 4}}
    cluster = {"default": {"num_cta_in_cga": 2}}
    for s in (state("sm_90", (128, 256), four), state("sm_90a", (256, 128), cluster)):
        assert "num_worker_warps_per_cta" in pipeline._spill_advice(s, [(128, 256)])
    # no hint kept the default out (a 256 x 256 tile spills even with it), a small
    # accumulator, other archs, no mma, a cluster of one
    for s in (state("sm_90", (256, 256)), state("sm_90", (128, 128), four),
              state("sm_80", (128, 256), four), state("sm_100", (256, 128), four),
              state("sm_90", None, four),
              state("sm_90", (128, 256), {"sm_90": {"num_cta_in_cga": 1}})):
        advice = pipeline._spill_advice(s, [(128, 256)])
        assert "num_worker_warps_per_cta" not in advice and "occupancy" in advice
