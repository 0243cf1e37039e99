"""backends/tileir/hints.py: the worker-warp default that keeps an sm_90 GEMM tile of 128 x 256
f32 accumulator values or more from spilling, and where the author's hints keep it out."""
from __future__ import annotations

import pytest

from fearless.backends.tileir.hints import entry_hints, largest_accumulator
from fearless.compiler import compile_tile
from fearless.dtypes import f16, f32
from fearless.ir import types as T
from fearless.kernel import params as P
from tests.tile.tile_kernels import matmul, rows

WW8 = {"num_worker_warps_per_cta": 8}


def _gemm_fn(tile, dtype=f16):
    """The IR, after the passes, of tests' matmul with Out tiles ``tile`` over ``dtype``."""
    infos = [P.ArgInfo(dtype, 2, tile_shape=tile), P.ArgInfo(dtype, 2), P.ArgInfo(dtype, 2)]
    types = P.specialise("matmul", matmul.runtime_params, infos)
    params = [(p.name, t) for p, t in zip(matmul.runtime_params, types)]
    return compile_tile(matmul.captured, params, {"bk": 64}, None, "passes").fn


@pytest.mark.parametrize("tile, acc_bytes", [((128, 256), 128 * 256 * 4),
                                             ((256, 128), 256 * 128 * 4),
                                             ((128, 128), 128 * 128 * 4), ((64, 64), 64 * 64 * 4)])
def test_the_largest_accumulator_is_the_mma_result(tile, acc_bytes):
    assert largest_accumulator(_gemm_fn(tile)) == acc_bytes


def test_a_large_accumulator_gets_eight_worker_warps_on_sm_90_only():
    big, small = _gemm_fn((128, 256)), _gemm_fn((128, 128))
    assert entry_hints(big, None, "sm_90") == {"sm_90": WW8}
    assert entry_hints(_gemm_fn((256, 128)), {}, "sm_90") == {"sm_90": WW8}
    assert entry_hints(small, None, "sm_90") == {}
    for arch in ("sm_80", "sm_100", "sm_120", None):   # not measured there: no default
        assert entry_hints(big, None, arch) == {}


def test_the_default_joins_other_hints_and_leaves_the_callers_dict_alone():
    mine = {"sm_90": {"occupancy": 1}, "sm_80": {"occupancy": 2}}
    got = entry_hints(_gemm_fn((128, 256)), mine, "sm_90")
    assert got == {"sm_90": {"occupancy": 1, **WW8}, "sm_80": {"occupancy": 2}}
    assert mine == {"sm_90": {"occupancy": 1}, "sm_80": {"occupancy": 2}}


@pytest.mark.parametrize("hints", [{"sm_90": {"num_worker_warps_per_cta": 4}},
                                   {"default": {"num_worker_warps_per_cta": 16}},
                                   {"sm_90": {"num_cta_in_cga": 2}},
                                   {"default": {"num_cta_in_cga": 2}}])
def test_the_authors_worker_warps_or_cluster_keep_the_default_out(hints):
    assert entry_hints(_gemm_fn((128, 256)), hints, "sm_90") == hints


def test_a_cluster_of_one_block_and_sm_90a_keep_the_default():
    one = {"sm_90": {"num_cta_in_cga": 1}}
    assert entry_hints(_gemm_fn((128, 256)), one, "sm_90") == \
        {"sm_90": {"num_cta_in_cga": 1, **WW8}}
    assert entry_hints(_gemm_fn((128, 256)), None, "sm_90a") == {"sm_90a": WW8}


def test_a_kernel_without_mma_gets_no_default():
    # a row-wise kernel with a 1 x 65536 f32 tile: as large as the spilling accumulator, no mma
    infos = [P.ArgInfo(f32, 2, tile_shape=(1, 65536)), P.ArgInfo(f32, 2)]
    types = P.specialise("rows", rows.runtime_params, infos)
    params = [(p.name, t) for p, t in zip(rows.runtime_params, types)]
    fn = compile_tile(rows.captured, params, {}, None, "passes").fn
    assert largest_accumulator(fn) == 0 and entry_hints(fn, None, "sm_90") == {}


def test_the_tile_ir_of_a_large_tile_carries_the_hint():
    infos = [P.ArgInfo(f16, 2, tile_shape=(128, 256), layout=T.Layout(16, (16, 16), (16, 1), True)),
             P.ArgInfo(f16, 2), P.ArgInfo(f16, 2)]
    types = P.specialise("matmul", matmul.runtime_params, infos)
    params = [(p.name, t) for p, t in zip(matmul.runtime_params, types)]
    for arch, present in (("sm_90", True), ("sm_80", False)):
        code = compile_tile(matmul.captured, params, {"bk": 64}, arch, "tileir").tileir
        assert (b"num_worker_warps_per_cta" in code) is present


def test_a_stream_k_accumulator_counts_without_an_mma():
    # the fixup launch sums 128 x 256 f32 partials with no mma: two warp groups keep it from
    # spilling (408 bytes per thread with one)
    fn = _gemm_fn((128, 128))
    fn.attrs["stream_k"] = T.Tile(f32, (128, 256))
    assert largest_accumulator(fn) == 128 * 256 * 4
    assert entry_hints(fn, None, "sm_90") == {"sm_90": WW8}
