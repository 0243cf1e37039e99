"""Tensor cores and async copies from SIMT code: values against NumPy (cpu, gpu), the PTX
fragment layouts, the instructions in the PTX (and a cubin through nvJitLink), and every
refusal of the safety rules.

The expected ldmatrix registers come from a scalar transcription of the PTX ISA's description
("Warp-level matrix load instruction: ldmatrix"), not from the cpu backend's vectorised code.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import fearless as fl
from fearless.errors import KernelBoundsError, SafetyError
from fearless.ir import types as T
from tests.simt import mma_kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
FILE = k.__file__


def text(err) -> str:
    return str(err).replace(FILE, "mma_kernels.py")


def f16_inputs(seed, dtype=np.float16):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 16)).astype(dtype)
    b = rng.standard_normal((16, 8)).astype(dtype)
    return a, b


def bound(a, b):
    """|error| allowed for an f32-accumulated product: the f32 rounding of each partial sum."""
    return np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) * 2.0 ** -22 * 16 + 1e-6


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_mma_from_packed_registers_matches_numpy(backend):
    a, b = f16_inputs(1)
    c = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    d = fl.zeros(128, fl.f32)
    k.mma_packed[k.mma_packed.prepare(32)](fl.asarray(a.ravel()), fl.asarray(b.ravel()),
                                           fl.asarray(c.ravel()), d)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_array_less(np.abs(d.numpy().reshape(16, 8) - want), bound(a, b) + 1e-5)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_async_copy_ldmatrix_and_mma_match_numpy(backend, dt):
    dtype = getattr(fl, dt).numpy
    a, b = f16_inputs(3, dtype)
    d = fl.full(128, np.nan, fl.f32)
    k.mma_shared[k.mma_shared.prepare(32)](fl.asarray(a.ravel()), fl.asarray(b.ravel()), d)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_less(np.abs(d.numpy().reshape(16, 8) - want), bound(a, b))


def ptx_ldmatrix(rows: np.ndarray, trans: bool) -> np.ndarray:
    """rows: (32, 8) u16, row l given by lane l; the (32 lanes, 4 registers) u32 result."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for m in range(4):
            mat = rows[8 * m:8 * m + 8]
            r, c = lane // 4, 2 * (lane % 4)
            lo, hi = (mat[c, r], mat[c + 1, r]) if trans else (mat[r, c], mat[r, c + 1])
            out[lane, m] = int(lo) | (int(hi) << 16)
    return out


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_follows_ptx(backend, trans):
    src = np.arange(256, dtype=np.uint16).view(np.float16)
    out = fl.zeros(128, fl.u32)
    k.ldmatrix_x4[k.ldmatrix_x4.prepare(32)](fl.asarray(src), out, trans)
    want = ptx_ldmatrix(src.view(np.uint16).reshape(32, 8), bool(trans))
    np.testing.assert_array_equal(out.numpy().reshape(32, 4), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("steps", [1, 4, 5])
def test_two_stage_pipeline_with_wait_one(backend, steps):
    a = (np.random.default_rng(steps).random(steps * 512 + 8) * 4).astype(np.float16)
    out = fl.zeros(64, fl.f32)
    k.pipelined[k.pipelined.prepare(64)](fl.asarray(a), out, steps)
    chunks = a[:steps * 512].astype(np.float64).reshape(steps, 64, 8)
    want = np.roll(chunks.sum(axis=(0, 2)), -1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)


def test_a_misaligned_source_is_reported(backend="cpu"):
    fl.set_backend("cpu")
    a, b = f16_inputs(4)
    big = np.zeros(257, np.float16)
    big[1:] = a.ravel()
    d = fl.zeros(128, fl.f32)
    view = fl.asarray(big)[1:]
    k.mma_shared[k.mma_shared.prepare(32)](view, fl.asarray(b.ravel()), d)
    with pytest.raises(KernelBoundsError, match="misaligned"):
        d.numpy()


def arr(dtype, access):
    return T.Array(dtype, 1, access, True)


READ, UNSAFE = T.Access.READ, T.Access.UNSAFE
H_IN_H_OUT = (arr(fl.f16, READ), arr(fl.f16, UNSAFE))


@pytest.mark.parametrize("kernel, types, message", [
    (k.mma_divergent, (arr(fl.f32, READ), arr(fl.f32, UNSAFE)),
     "not every lane of the warp may reach a tensor-core mma"),
    (k.read_before_wait, H_IN_H_OUT, "the async copy on line \\d+ may still be writing"),
    (k.wait_without_barrier, (arr(fl.f16, READ), arr(fl.u32, UNSAFE)),
     "ldmatrix reads other threads' slots of 's', written on line"),
    (k.copy_not_own, H_IN_H_OUT, "goes to the thread's own chunk"),
    (k.one_stage_pipeline, H_IN_H_OUT + (T.Scalar(fl.i64),), "may still be writing"),
])
def test_refused(kernel, types, message):
    with pytest.raises(SafetyError, match=message):
        kernel.inspect("passes", types)


def test_refusal_text_points_at_the_read():
    with pytest.raises(SafetyError) as info:
        k.read_before_wait.inspect("passes", H_IN_H_OUT)
    assert re.search(r"--> mma_kernels.py:\d+:\d+", text(info.value))
    assert "help: call fl.async_wait(n)" in text(info.value)


F16R = T.Array(fl.f16, 1, T.Access.READ, True)
F32U = T.Array(fl.f32, 1, T.Access.UNSAFE, True)


def test_ptx_has_the_tensor_core_and_async_copy_instructions():
    ptx = k.mma_shared.inspect("ptx", (F16R, F16R, F32U), "sm_80")
    for instr in ("cp.async.cg.shared.global", "cp.async.ca.shared.global",
                  "cp.async.commit_group", "cp.async.wait_group 0",
                  "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                  "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                  "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
        assert instr in ptx, instr
    bf = T.Array(fl.bf16, 1, T.Access.READ, True)
    assert "row.col.f32.bf16.bf16.f32" in k.mma_shared.inspect("ptx", (bf, bf, F32U), "sm_80")


def test_the_ptx_assembles_into_a_cubin():
    pytest.importorskip("cuda.bindings.nvjitlink")
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is not installed")
    assert re.match(r"cubin: \d+ bytes",
                    k.mma_shared.inspect("cubin", (F16R, F16R, F32U), "sm_90"))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_hgemm_other_shapes(backend):
    from examples import hgemm
    shape = (384, 256, 192) if backend == "cpu" else (1152, 640, 4160)
    result = hgemm.run(shape, repeat=1)
    assert 0 <= result.error_ratio <= 1


@pytest.mark.parametrize("tiles", [(128, 256, 16, 2, 4, 4), (64, 64, 32, 2, 2, 2)])
def test_hgemm_tile_configurations(tiles, backend="cpu"):
    from examples import hgemm
    fl.set_backend(backend)
    t = hgemm.Tiles(*tiles)
    result = hgemm.run((t.bm, 2 * t.bn, t.bk * (t.stages + 1)), repeat=0,
                       kern=hgemm.make_hgemm(t))
    assert 0 <= result.error_ratio <= 1


def test_hgemm_refuses_impossible_tiles():
    from examples import hgemm
    with pytest.raises(ValueError, match="bytes of shared memory > 232448"):
        hgemm.make_hgemm(hgemm.Tiles(256, 256, 64, 2, 4, 4))
    with pytest.raises(ValueError, match="bn / warps_n = 20.0 is not a multiple of 16"):
        hgemm.make_hgemm(hgemm.Tiles(128, 80, 32, 2, 4, 3))


def hgemm_ptx() -> str:
    from examples import hgemm
    h16 = T.Array(fl.f16, 2, T.Access.READ, True)
    types = (h16, h16, T.Array(fl.f16, 1, T.Access.UNSAFE, True), T.Scalar(fl.i64))
    kern = hgemm.make_hgemm(hgemm.Tiles(128, 128, 32, 2, 2, 3))  # 48 KB: a static pool
    return kern.inspect("ptx", types, "sm_90")


def test_hgemm_main_loop_has_no_index_recomputation():
    """The contract's exact block makes %ntid.x a constant and %tid.x < block (so the ldmatrix
    checks, which fail only for threads outside the block, fold away); the async copies' checked
    addresses are the plain address or the array's base, so no row * stride is recomputed (no
    64-bit multiply) per stage, and their failures are recorded after the stage's copies
    (``mma.flush_errors``), out of the copies' basic block; all stages live in one shared
    global."""
    ptx = hgemm_ptx()
    assert "%ntid" not in ptx and "%tid.y" not in ptx
    assert re.search(r"\.shared \.align 16 \.b8 __fl_shared\[49152\]", ptx)
    body = ptx[ptx.index("cp.async.wait_group 1"):ptx.rindex("cp.async.wait_group 1")]
    hot = "\n".join(line for line in body.splitlines()
                     if not line.strip().startswith(("//", "$L")))
    assert "mul.lo.s64" not in hot
    # the copies' checks are recorded behind one branch per stage, after the copies
    assert hot.count("cp.async.cg") == 16 and "atom." not in hot


def test_hgemm_refuses_shapes_off_the_tile_grid():
    from examples import hgemm
    from fearless.errors import ContractError
    fl.set_backend("cpu")
    a, b = fl.zeros((200, 64), fl.f16), fl.zeros((64, 128), fl.f16)
    c = fl.zeros(200 * 128, fl.f16)
    with pytest.raises(ContractError, match="len\\(a\\) // 128 \\* 128 == len\\(a\\)"):
        hgemm.hgemm[hgemm.hgemm.prepare(256)](a, b, c, 128)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_hgemm_reports_a_misaligned_source_after_the_stage(backend):
    """The pipeline's copies record their failures behind one branch per stage (GPU: the
    deferred path of ``mma.flush_errors``); a view of A one element in is misaligned."""
    from examples import hgemm
    rng = np.random.default_rng(3)
    flat = (rng.random(128 * 64 + 1) - 0.5).astype(np.float16)  # A starts 2 bytes in
    if backend == "cpu":
        a = fl.asarray(flat[1:].reshape(128, 64))
    else:  # a device view that keeps the offset (fl.asarray of host data copies it)
        torch = pytest.importorskip("torch")
        a = fl.asarray(torch.from_numpy(flat).cuda()[1:].view(128, 64))
    b = fl.asarray((rng.random((64, 128)) - 0.5).astype(np.float16))
    c = fl.zeros(128 * 128, fl.f16)
    hgemm.hgemm[hgemm.hgemm.prepare(hgemm.launch_threads(hgemm.DEFAULT, 128, 128))](a, b, c, 128)
    with pytest.raises(KernelBoundsError, match="misaligned"):
        c.numpy()


GOLDEN = {
    'mma_divergent': ((arr(fl.f32, READ), arr(fl.f32, UNSAFE)),
        "kernel 'mma_divergent': not every lane of the warp may reach a tensor-core mma: the condition on line 117 can differ between the lanes of a warp\n   --> mma_kernels.py:118:15\n    |\n118 |         acc = fl.mma.sync_m16n8k16((r, r, r, r), (r, r), (z, z, z, z))\n    |               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\nhelp: call it where all 32 lanes arrive (compute a neutral value in the lanes that should not take part), branch on fl.warp.index() instead"),
    'read_before_wait': (H_IN_H_OUT,
        "kernel 'read_before_wait', parameter 's': this reads 's', which the async copy on line 127 may still be writing: no fl.async_wait() completes its group before this point\n   --> mma_kernels.py:130:11\n    |\n130 |     v = s[t * 8]\n    |           ^^^^^\nhelp: call fl.async_wait(n) with n smaller than the number of fl.async_commit() calls since the copy, then fl.sync_threads() before other threads read it"),
    'copy_not_own': (H_IN_H_OUT,
        "kernel 'copy_not_own', parameter 's': an async copy into 's' goes to the thread's own chunk, and this chunk index is a computed integer\n   --> mma_kernels.py:151:22\n    |\n151 |     fl.async_copy(s, t + 1, a, t * 8)\n    |                      ^^^^^\nhelp: make the last slot index fl.thread.index_in_block() itself (the leading indices may be anything), or wrap the copy in `with fl.unsafe():`"),
    'wait_without_barrier': ((arr(fl.f16, READ), arr(fl.u32, UNSAFE)),
        "kernel 'wait_without_barrier', parameter 's': ldmatrix reads other threads' slots of 's', written on line 139 with no barrier in between\n   --> mma_kernels.py:142:28\n    |\n142 |     r = fl.mma.ldmatrix(s, t * 8, count=1)\n    |                            ^^^^^\nhelp: call fl.sync_threads() after the writes (after fl.async_wait() for async copies) and before this read"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_diagnostics(name):
    types, golden = GOLDEN[name]
    with pytest.raises(SafetyError) as info:
        getattr(k, name).inspect("passes", types)
    assert text(info.value) == golden
    assert not re.search(r"warp\.(mma|ldmatrix)|mem\.async|mma\.pack|fearless\.", golden)
