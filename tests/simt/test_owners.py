"""Threads that own several elements: computed indices proved disjoint by enumerating a block.

``analysis/owners.py`` accepts DisjointSlice and shared-memory writes at indices built from block
and thread coordinates when no two threads of a launch reach one element; these tests run the
accepted kernels on the cpu backend (race detector on) and on the GPU, check the refusals'
diagnostics, and that the host still refuses a launch that leaves output elements unwritten.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless.errors import ContractError, SafetyError
from tests.simt import owned_kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
FILE = k.__file__


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape", [(64, 96), (70, 45), (5, 3)])
def test_a_block_of_32x8_threads_owns_a_32x32_tile(backend, shape):
    a = np.random.default_rng(1).random(shape, np.float32)
    out = fl.full(shape, np.nan, fl.f32)
    rows = -(-shape[0] // k.TILE) * k.ROWS  # 8 thread rows per 32 rows of output
    k.copy_tiles[k.copy_tiles.prepare((rows, shape[1]))](fl.asarray(a), out)
    np.testing.assert_array_equal(out.numpy(), a * 2)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_loop_counter_with_constant_bounds_is_enumerated(backend):
    x = np.random.default_rng(2).random(1000, np.float32)
    out = fl.full(1000, np.nan, fl.f32)
    k.strided_owner[k.strided_owner.prepare(-(-1000 // 512) * 128)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x + 1)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_swizzled_shared_write_is_a_permutation_of_the_slots(backend):
    x = np.random.default_rng(3).random(1000, np.float32)
    out = fl.full(1000, np.nan, fl.f32)
    k.swizzled_shared[k.swizzled_shared.prepare(1000)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_guard_on_the_thread_index_leaves_one_writer_per_block(backend):
    x = np.random.default_rng(4).random(50, np.float32)
    sums = fl.full(20, np.nan, fl.f32)
    k.one_writer_per_block[k.one_writer_per_block.prepare(20 * 128)](fl.asarray(x), sums)
    np.testing.assert_array_equal(sums.numpy(), x[:20] * np.float32(3))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_unary_minus_in_an_index(backend):
    x = np.random.default_rng(5).random(40, np.float32)
    out = fl.full(40, np.nan, fl.f32)
    k.reversed_in_block[k.reversed_in_block.prepare(40)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x + np.float32(2))


def test_reading_the_own_slot_after_a_computed_write_needs_a_barrier():
    with pytest.raises(SafetyError, match="this reads another thread's slot of 's', written on "
                                          "line \\d+ with no barrier in between"):
        k.rotate_then_read_own[k.rotate_then_read_own.prepare(32)](fl.zeros(32), fl.zeros(32))


@pytest.mark.parametrize("name", ["wraps_around", "guard_overflows"])
def test_index_arithmetic_that_wraps_is_not_enumerated(name):
    kern = getattr(k, name)
    with pytest.raises(SafetyError, match="computed integer"):
        kern[kern.prepare(40)](fl.zeros(8), fl.zeros(8))


def test_a_launch_with_too_few_blocks_is_refused():
    out = fl.zeros((64, 64), fl.f32)
    with pytest.raises(ContractError, match=r"the launch writes \(32, 64\) elements of 'out' but "
                                            r"it has shape \(64, 64\)"):
        k.copy_tiles[k.copy_tiles.prepare((8, 64))](fl.zeros((64, 64), fl.f32), out)


REFUSED = {
    "rows_overlap": ("out", ("threads (y=8, x=0) and (y=0, x=0) of a block both reach "
                             "element [8, 0] (line 50)")),
    "block_index_unused": ("out", ("block_index(1) must scale exactly one index, so that each "
                                   "block owns its own range of elements")),
    "spills_into_next_block": ("out", ("index 0 leaves its block's range [0, 128) (it reaches "
                                       "128 past block_index * 128)")),
    "halves_shared": ("s", "threads 0 and 1 of a block both reach element [0] (line 72)"),
    "four_writers_per_block": ("sums", ("index 0 leaves its block's range [0, 4) (it reaches 4 "
                                        "past block_index * 4)")),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_the_colliding_threads(name):
    kern = getattr(k, name)
    param, why = REFUSED[name]
    args = [fl.zeros((64, 64) if p.ndim == 2 else 256, fl.f32) for p in kern.params]
    with pytest.raises(SafetyError) as info:
        kern[kern.prepare((64, 64) if len(args[0].shape) == 2 else 256)](*args)
    msg = str(info.value)
    assert f"parameter '{param}'" in msg and why in msg and "-->" in msg and "^" in msg


def test_without_an_exact_block_the_old_diagnostic_stands():
    with pytest.raises(SafetyError) as info:
        k.no_exact_block[k.no_exact_block.prepare(256, block=128)](fl.zeros(256), fl.zeros(256))
    msg = str(info.value)
    assert "this index is a computed integer\n" in msg and "cannot prove" not in msg

