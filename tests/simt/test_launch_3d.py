"""3-d launches: ``fl.thread.index_3d()``, ``fl.Contract(dims=3)``, ``prepare((n0, n1, n2))``.

Accepted kernels run on the cpu backend against NumPy (random inputs, outputs poisoned, shapes
that are not multiples of the block) and, with ``pytest -m gpu``, on the GPU; their PTX reads
``%ctaid.z``/``%ntid.z``/``%tid.z`` for sm_80 and sm_90. Refused forms point at the line.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless import f32
from fearless.errors import CompileError, ContractError, KernelBoundsError, SafetyError
from fearless.ir import types as T
from tests.simt import kernels_3d as k
from tests.support import BACKENDS, CROSS_ARCHS

SHAPES = [(5, 7, 37), (3, 9, 70), (37, 6, 45), (1, 1, 1)]
READ3 = T.Array(fl.f32, 3, T.Access.READ, True)
OUT3 = T.Array(fl.f32, 3, T.Access.DISJOINT, True)


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape", SHAPES)
def test_each_thread_writes_its_own_element_of_a_3d_array(backend, shape):
    x, y = _random(shape, 1), _random(shape, 2)
    out = fl.full(shape, np.nan, f32)
    launch = k.axpy3.prepare(shape)
    assert launch.block == k.BLOCK and launch.grid == tuple(
        -(-n // b) for n, b in zip(reversed(shape), k.BLOCK))
    k.axpy3[launch](np.float32(1.5), fl.asarray(x), fl.asarray(y), out)
    # the GPU fuses a * x + y into an fma (docs/semantics.md): within an ulp of the exact value
    np.testing.assert_allclose(out.numpy(), 1.5 * x.astype(np.float64) + y, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_a_contract_block_of_three_axes_reads_neighbours(backend, shape):
    x = _random(shape, 3)
    out = fl.full(shape, np.nan, f32)
    k.neighbours3[k.neighbours3.prepare(shape)](fl.asarray(x), out)
    xd = x.astype(np.float64)
    up = np.concatenate([xd[:1], xd[:-1]], axis=0)
    right = np.concatenate([xd[:, 1:], xd[:, -1:]], axis=1)
    left = np.concatenate([xd[:, :, :1], xd[:, :, :-1]], axis=2)
    np.testing.assert_allclose(out.numpy(), xd + up + 2 * right + 4 * left,
                               rtol=1e-5, atol=1e-5)


def _mirrored(x: np.ndarray) -> np.ndarray:
    """Each element replaced by that of the thread at slot 255 - t of its (32, 4, 2) block
    (x mirrored along all three axes within the block), 0 past the end."""
    bx, by, bz = k.BLOCK
    n0, n1, n2 = x.shape
    g0, g1, g2 = -(-n0 // bz), -(-n1 // by), -(-n2 // bx)
    padded = np.zeros((g0 * bz, g1 * by, g2 * bx), x.dtype)
    padded[:n0, :n1, :n2] = x
    tiles = padded.reshape(g0, bz, g1, by, g2, bx)[:, ::-1, :, ::-1, :, ::-1]
    return tiles.reshape(padded.shape)[:n0, :n1, :n2]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape", [(5, 7, 37), (4, 8, 64)])
def test_index_in_block_counts_z_and_shared_memory_is_per_block(backend, shape):
    x = _random(shape, 4)
    slots, out = fl.full(shape, np.nan, f32), fl.full(shape, np.nan, f32)
    k.mirror_in_block[k.mirror_in_block.prepare(shape)](fl.asarray(x), slots, out)
    i, j, c = np.indices(shape)
    np.testing.assert_array_equal(slots.numpy(), (i % 2) * 128 + (j % 4) * 32 + c % 32)
    np.testing.assert_array_equal(out.numpy(), _mirrored(x))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_unguarded_reads_are_checked_along_z_too(backend):
    x = _random((4, 8, 64), 5)  # a whole number of (32, 4, 2) blocks: every read is in bounds
    out = fl.full(x.shape, np.nan, f32)
    k.copy3_unguarded[k.copy3_unguarded.prepare(x.shape)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x)
    short = fl.asarray(x[:3])  # 3 planes, and the second block along z reads plane 3
    out = fl.full(short.shape, np.nan, f32)
    with pytest.raises(KernelBoundsError, match="'x'"):
        k.copy3_unguarded[k.copy3_unguarded.prepare(short.shape)](short, out)
        fl.synchronize()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_raw_launch_has_three_axes(backend):
    shape = (3, 5, 40)
    x, y = _random(shape, 6), _random(shape, 7)
    out = fl.full(shape, np.nan, f32)
    with fl.unsafe():
        k.axpy3.launch_raw((2, 5, 3), (32, 1, 1), np.float32(2.0), fl.asarray(x),
                           fl.asarray(y), out)
    np.testing.assert_allclose(out.numpy(), 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("arch", CROSS_ARCHS)
def test_the_ptx_reads_the_z_registers_and_coarsens_along_z(arch):
    text = k.axpy3.inspect("ptx", (T.Scalar(fl.f32), READ3, READ3, OUT3), arch)
    for reg in ("ctaid", "ntid", "tid", "nctaid"):
        assert f"%{reg}.z" in text
    assert "%nctaid.x" not in text and "%nctaid.y" not in text  # only z repeats logical threads
    exact = k.neighbours3.inspect("ptx", (READ3, OUT3), arch)
    assert re.search(r"\.reqntid 8, 4, 4", exact)


def test_a_1d_kernel_reads_no_z_register():
    text = k.flat.inspect("ptx", (T.Array(fl.f32, 1, T.Access.DISJOINT, True),))
    assert ".z" not in text


REFUSED = {
    "not_own": (SafetyError, "this index is a computed integer", "j + 1"),
    "not_own_exact_block": (SafetyError, "this index is a computed integer",
                            "fl.thread.block_index(0) * 32 + fl.thread.thread_in_block(0)"),
    "swapped_axes": (SafetyError, "index 0 of this DisjointArray must be the thread's d0 (z), "
                                  "but it is the thread's d1 (y)", "j"),
    "plane_of_3d": (SafetyError, "a 2-d DisjointArray needs the 2-d thread index, not the 3-d "
                                 "one", "j"),
    "block_2d_in_3d": (CompileError, "a kernel using index_3d() cannot use index_in_block_2d()",
                       "fl.thread.index_in_block_2d()"),
    "mixed": (CompileError, "the kernel uses both index_3d() and index_2d()",
              "fl.thread.index_2d()"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_forms_point_at_the_expression(name):
    error, why, expr = REFUSED[name]
    kern = getattr(k, name)
    nd = 2 if name == "plane_of_3d" else 3
    params = 1 if name in ("block_2d_in_3d", "mixed") else 2
    with pytest.raises(error) as info:
        kern[kern.prepare((4, 4, 4))](*[fl.zeros((4,) * nd, f32) for _ in range(params)])
    msg = str(info.value)
    assert msg.startswith(f"kernel '{name}'") and why in msg and "# refused" in msg
    source = next(line for line in msg.splitlines() if "# refused" in line)
    caret = next(line for line in msg.splitlines() if line.strip(" |").startswith("^"))
    start = caret.index("^")
    assert source[start:start + caret.count("^")] == expr
    assert isinstance(info.value, CompileError) and not isinstance(info.value, ContractError)


@pytest.mark.parametrize("name, size, message", [
    ("axpy3", (40, 40), "the kernel uses fl.thread.index_3d(), but the launch is 2-d"),
    ("neighbours3", (40, 40), "the contract declares a 3-d launch, but the size is 2-d"),
    ("flat", (4, 4, 4), "the kernel uses fl.thread.index_1d(), but the launch is 3-d"),
])
def test_a_launch_of_another_rank_is_a_contract_error_naming_the_kernel(name, size, message):
    with pytest.raises(ContractError) as info:
        getattr(k, name).prepare(size)
    assert info.value.kernel == name and message in str(info.value)


@pytest.mark.parametrize("block, message", [
    ((1, 1, 65), "block z = 65 exceeds the device limit 64"),
    ((32, 4, 16), "block (32, 4, 16) has 2048 threads"),
    ((32, 4), "the block must be 3 numbers"),
])
def test_a_3d_block_over_the_limits_is_refused(block, message):
    with pytest.raises(ContractError, match=re.escape(message)):
        k.axpy3.prepare((8, 8, 8), block=block)


def test_a_3d_grid_over_the_limits_is_refused():
    with pytest.raises(ContractError, match="65536 blocks along grid z, above the device limit "
                                            "65535"):
        k.axpy3.prepare((65536, 1, 1), block=(1, 1, 1))


def test_a_3d_contract_checks_its_block():
    with pytest.raises(ContractError, match=r"must be 3 positive ints \(x first\) for dims=3"):
        fl.Contract(dims=3, block=(32, 8))
    assert fl.Contract(dims=3, block=(8, 8, 4)).block == (8, 8, 4)


@pytest.mark.parametrize("grid, block, message", [
    ((2, 2, 2), 32, "more than one thread along z, but the kernel does not use "
                    "fl.thread.index_3d()"),
    (2, (32, 1, 2), "more than one thread along z"),
    ((1, 1, 1, 1), 32, "grid (1, 1, 1, 1) must have 1 to 3 axes"),
])
def test_a_raw_launch_along_z_needs_index_3d(grid, block, message):
    out = fl.full(64, np.nan, f32)
    with fl.unsafe(), pytest.raises(ContractError, match=re.escape(message)):
        k.flat.launch_raw(grid, block, out)
    assert np.isnan(out.numpy()).all()


def test_a_raw_launch_of_a_3d_kernel_keeps_the_grid_z_limit():
    out = fl.full((2, 2, 2), np.nan, f32)
    with fl.unsafe(), pytest.raises(ContractError, match="grid z = 65536 exceeds the device "
                                                         "limit 65535"):
        k.axpy3.launch_raw((1, 1, 65536), 32, np.float32(1.0), out, out, out)


def test_a_raw_launch_with_z_of_one_runs_a_1d_kernel():
    out = fl.full(64, np.nan, f32)
    with fl.unsafe():
        k.flat.launch_raw((2, 1, 1), (32, 1, 1), out)
    np.testing.assert_array_equal(out.numpy(), 1.0)
