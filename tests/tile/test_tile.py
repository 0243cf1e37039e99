"""Tile kernels end to end on the CPU backend (and the GPU with ``pytest -m gpu``): values against
NumPy in float64, poisoned outputs, partial edge tiles; and every refusal of the ownership model.
"""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32, f64, i32
from fearless import tile as ft
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import dump
from fearless.compiler import compile_tile
from fearless.errors import (AliasError, ArgumentTypeError, CompileError, ContractError,
                             MovedError, SafetyError)
from fearless.ir import types as T
from tests.support import import_source
from tests.tile import tile_kernels as K

BOTH = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def rand(shape, seed):
    """Random normal f32 values (never all zero)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def source_module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return import_source(path, name)


def poisoned(shape, dtype=f32):
    return fl.full(shape, -7 if not dtype.is_float else np.nan, dtype)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_elementwise_math_broadcast_and_partial_tiles(backend):
    n = 3000  # 2 whole tiles of 1024 and a partial one
    xh, yh = rand(n, 1), rand(n, 2)
    out = poisoned(n).partition(1024)
    out, _, _, _ = K.elementwise(out, fl.asarray(xh), fl.asarray(yh), 1.5).sync()
    a, b = xh.astype(np.float64), yh.astype(np.float64)
    want = np.where(a > b, a * 1.5 - b, np.maximum(a, b) / 2)
    want = want + np.exp(np.minimum(a, 1)) - np.sqrt(np.maximum(b, 0)) + np.tanh(a)
    want = want + 1 / np.sqrt(b * b + 1) + np.log(a * a + 1) + np.abs(a) % 1.5
    np.testing.assert_allclose(out.unpartition().numpy(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_row_reductions_keepdims(backend):
    xh = rand((6, 50), 3)
    out = poisoned((6, 50)).partition((2, 64))
    (out, _) = K.rows(out, fl.asarray(xh)).sync()
    x = xh.astype(np.float64)
    # the tile is 64 wide: the zero padding past column 50 joins the sum/max/min
    padded = np.concatenate([x, np.zeros((6, 14))], axis=1)
    want = padded.sum(1, keepdims=True) + 10 * padded.max(1, keepdims=True) \
        - padded.min(1, keepdims=True) + 0 * x
    np.testing.assert_allclose(out.unpartition().numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_argmax_first_maximum(backend):
    xh = rand((8, 64), 4)
    xh[3, [5, 40]] = 100.0  # a tie: the first index wins
    out = poisoned((8, 16), i32).partition((4, 16))
    (out, _) = K.argmax_rows(out, fl.asarray(xh)).sync()
    want = np.broadcast_to(np.argmax(xh, 1)[:, None], (8, 16))
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
def test_argmax_of_unsigned_values_compares_them_unsigned(backend, dtype):
    """Values with the top bit set are the largest (a signed compare on the GPU took them for
    the smallest: fuzz seed 35858)."""
    top = np.iinfo(dtype).max
    xh = np.random.default_rng(11).integers(0, top, (8, 64), dtype=dtype, endpoint=True)
    xh[2, 9] = top  # a row whose maximum has the top bit set
    xh[5, :] = top // 2  # and one whose values all lack it, but for a tie at the top
    xh[5, [17, 30]] = top // 2 + 1
    kernel = K.argmax_rows_u8 if dtype == np.uint8 else K.argmax_rows_u32
    out = poisoned((8, 16), i32).partition((4, 16))
    (out, _) = kernel(out, fl.asarray(xh)).sync()
    want = np.broadcast_to(np.argmax(xh, 1)[:, None], (8, 16))
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


def test_argmax_of_unsigned_values_lowers_to_an_unsigned_compare():
    """Without a GPU: the Tile IR reduce of an argmax over u8 compares values unsigned."""
    kernel = K.argmax_rows_u8
    types = (T.TensorView(i32, 2, T.Role.OUT, (4, 16)), T.TensorView(fl.u8, 2, T.Role.IN))
    compiled = compile_tile(kernel.captured, kernel._ir_params(types), {}, "sm_90", "tileir")
    cmps = [line for line in dump(decode(compiled.tileir)).splitlines() if " cmpi " in line]
    assert "predicate=gt signedness=unsigned" in cmps[0], cmps


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_transpose_with_load_at_computed_tile(backend):
    xh = rand((48, 80), 5)
    out = poisoned((80, 48)).partition((32, 16))
    (out, _) = K.transpose(out, fl.asarray(xh)).sync()
    np.testing.assert_array_equal(out.unpartition().numpy(), xh.T)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_loop_carried_values_and_branches(backend):
    xh = rand(512, 6)
    out = poisoned(512).partition(128)
    (out, _, _) = K.loops(out, fl.asarray(xh), 7).sync()
    want = xh.astype(np.float64) * (0 + 2 + 4 + 6) - 3
    np.testing.assert_allclose(out.unpartition().numpy(), want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_arange_and_tile_index(backend):
    out = poisoned(200, i32).partition(64)
    (out,) = K.iota(out).sync()
    np.testing.assert_array_equal(out.unpartition().numpy(), np.arange(200))


@pytest.mark.parametrize("backend", BOTH, indirect=True)
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=lambda d: d.name)
def test_matmul_edges_not_multiples_of_the_tile(backend, dtype):
    m, n, k = 70, 50, 90
    ah = rand((m, k), 7).astype(dtype.numpy)
    bh = rand((k, n), 8).astype(dtype.numpy)
    c = poisoned((m, n), dtype).partition((32, 32))
    c, _, _ = K.matmul(c, fl.asarray(ah), fl.asarray(bh)).sync()
    a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
    # GPU f32 inputs run on TF32 (10-bit mantissa); output rounding to f16/bf16
    unit = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -11}[dtype.name]
    bound = (np.abs(a64) @ np.abs(b64)) * (2 * unit + k * 2.0 ** -23)
    got = c.unpartition().numpy().astype(np.float64)
    assert np.all(np.abs(got - a64 @ b64) <= bound + 1e-6)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_const_parameter_changes_the_k_step(backend):
    ah = rand((32, 100), 9).astype(np.float16)
    bh = rand((100, 16), 10).astype(np.float16)
    c = poisoned((32, 16), f16).partition((32, 16))
    c, _, _ = K.matmul(c, fl.asarray(ah), fl.asarray(bh), bk=64).sync()
    want = ah.astype(np.float64) @ bh.astype(np.float64)
    np.testing.assert_allclose(c.unpartition().numpy(), want, rtol=4e-3, atol=0.1)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_two_outputs_and_mixed_dtypes(backend):
    xh = rand(300, 11)
    p, q = poisoned(300).partition(128), poisoned(300).partition(128)
    p, q, _ = K.two_outputs(p, q, fl.asarray(xh)).sync()
    np.testing.assert_array_equal(p.unpartition().numpy(), xh + np.float32(1))
    np.testing.assert_array_equal(q.unpartition().numpy(), xh * np.float32(2))
    xb = rand(100, 12).astype(bf16.numpy)
    out = poisoned(100, f16).partition(64)
    out, _ = K.mixed(out, fl.asarray(xb)).sync()
    want = (xb.astype(np.float32) * np.float32(np.pi)).astype(np.float16)
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


# refusals, all before anything runs -----------------------------------------------------------

def test_a_partitioned_tensor_is_moved():
    t = fl.zeros(256)
    p = t.partition(256)
    with pytest.raises(MovedError):  # the old handle, as an input
        K.fixed_tile(poisoned(256).partition(256), t)
    with pytest.raises(MovedError):
        t.numpy()
    op = K.fixed_tile(p, fl.zeros(256))
    with pytest.raises(MovedError):  # the partition moved into the pending operation
        p.unpartition()
    with pytest.raises(MovedError):
        K.fixed_tile(p, fl.zeros(256))
    back, _ = op.sync()  # ownership comes back
    assert back is p
    np.testing.assert_array_equal(p.unpartition().numpy(), np.zeros(256, np.float32))


def test_the_same_buffer_as_out_and_in_is_an_alias_error():
    base = fl.zeros(512)
    part = base[:256]
    other = base[256:]
    with pytest.raises(AliasError):  # a live view of the same buffer blocks the partition
        part.partition(256)
    del part, other
    t = fl.zeros(256)
    p = t.partition(256)
    with pytest.raises(MovedError):  # and the moved handle cannot be the input
        K.fixed_tile(p, t)


def test_partition_shape_must_match_the_static_tile_shape():
    with pytest.raises(ContractError, match=r"disagrees with the kernel's static tile shape"):
        K.fixed_tile(poisoned(512).partition(128), fl.zeros(512))


def test_outputs_must_agree_on_the_grid():
    with pytest.raises(ContractError, match="grid"):
        K.two_outputs(poisoned(512).partition(128), poisoned(512).partition(256), fl.zeros(512))


def test_tile_extents_must_be_powers_of_two():
    with pytest.raises(ContractError, match="power of two"):
        K.elementwise(poisoned(300).partition(100), fl.zeros(300), fl.zeros(300), 1.0)


def test_argument_kinds_are_checked():
    with pytest.raises(ArgumentTypeError, match="expects a partition"):
        K.fixed_tile(fl.zeros(256), fl.zeros(256))
    with pytest.raises(ArgumentTypeError, match="read-only tensor"):
        K.fixed_tile(poisoned(256).partition(256), fl.zeros(256).partition(256))
    with pytest.raises(ArgumentTypeError, match="dtype"):
        K.fixed_tile(poisoned(256).partition(256), fl.zeros(256, f16))
    with pytest.raises(ArgumentTypeError, match="missing"):
        K.fixed_tile(poisoned(256).partition(256))


def test_failed_call_gives_the_partition_back():
    p = poisoned(256).partition(256)
    with pytest.raises(ArgumentTypeError):
        K.fixed_tile(p, fl.zeros(256, f16))
    (p, _) = K.fixed_tile(p, fl.zeros(256)).sync()  # still usable
    np.testing.assert_array_equal(p.unpartition().numpy(), np.zeros(256, np.float32))


def test_store_to_another_tile_cannot_be_written(tmp_path):
    from fearless import tile as ft
    mod = source_module(tmp_path, """
from fearless import f32
from fearless import tile as ft

@ft.kernel
def shifted(out: ft.Out[f32], x: ft.In[f32]):
    i = out.tile_index[0]
    out.store(ft.load_like(x, out), (i + 1,))
""", "shifted_store")
    with pytest.raises(SafetyError, match="stores only its own tile") as info:
        mod.shifted(poisoned(256).partition(128), fl.zeros(256))
    assert "out.store(ft.load_like(x, out), (i + 1,))" in str(info.value)
    assert ft.Out  # the public names exist


def test_compile_errors_point_at_the_line(tmp_path):
    mod = source_module(tmp_path, """
from fearless import f32
from fearless import tile as ft

@ft.kernel
def bad_shape(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load(x, (0,), (100,)))

@ft.kernel
def wrong_store(out: ft.Out[f32], x: ft.In[f32]):
    out.store(ft.load(x, (0,), (64,)))

@ft.kernel
def tile_truth(out: ft.Out[f32], x: ft.In[f32]):
    t = ft.load_like(x, out)
    if t > 0:
        out.store(t)
""", "tile_compile_errors")
    with pytest.raises(CompileError, match="not a power of two") as info:
        mod.bad_shape(poisoned(128).partition(128), fl.zeros(128))
    assert "^" in str(info.value)
    with pytest.raises(CompileError, match=r"shape \(64,\) into a partition of tile shape"):
        mod.wrong_store(poisoned(128).partition(128), fl.zeros(128))
    with pytest.raises(CompileError, match="no single truth value"):
        mod.tile_truth(poisoned(128).partition(128), fl.zeros(128))


def test_long_then_chains_run_and_graphs_claim_each_tensor_once():
    xh = rand(128, 13)
    x = fl.asarray(xh)
    op = K.loops(poisoned(128).partition(128), x, 1)
    for _ in range(3000):  # deeper than Python's recursion limit
        op = op.then(lambda r: K.loops(r[0], x, 1))
    out, _, _ = op.sync()
    np.testing.assert_array_equal(out.unpartition().numpy(), np.zeros(128, np.float32))
    op = K.loops(poisoned(128).partition(128), x, 3)
    for _ in range(500):
        op = op.then(lambda r: K.loops(r[0], x, 3))
    g = fl.graph(op)
    assert len(g._reads) == 1  # x, once, however many launches read it
    g.sync()
    out, _, _ = g.release()
    want = xh.astype(np.float64) * 2 - 1
    np.testing.assert_allclose(out.unpartition().numpy(), want, rtol=1e-6, atol=1e-6)


def test_what_the_gpu_cannot_run_is_refused_on_the_cpu_too(tmp_path):
    mod = source_module(tmp_path, """
from fearless import f32
from fearless import tile as ft

@ft.kernel
def counts_down(c: ft.Out[f32], a: ft.In[f32]):
    t = ft.load_like(a, c)
    for k in range(3, 0, -1):
        t = t * 2.0
    c.store(t)
""", "tile_count_down")
    with pytest.raises(CompileError, match="need a positive constant step") as info:
        mod.counts_down(poisoned(64).partition(64), fl.zeros(64))
    assert "for k in range(3, 0, -1):" in str(info.value)


def test_an_operation_dropped_without_sync_warns():
    import gc
    p = poisoned(128).partition(128)
    with pytest.warns(RuntimeWarning, match=r"dropped without \.sync\(\)"):
        op = K.loops(p, fl.zeros(128), 1)
        del op
        gc.collect()
    p.unpartition()  # ownership came back with the dropped operation


def _copy_with_latency(latency):
    @ft.kernel
    def copy(out: ft.Out[f32], x: ft.In[f32]):
        out.store(ft.load_like(x, out, latency=latency))
    return copy


def test_a_constant_none_load_hint_means_no_hint():
    # a closure None (one kernel source for tuned and untuned configurations) was refused as
    # "latency must be an integer constant"
    types = (T.TensorView(f32, 1, T.Role.OUT, (64,)), T.TensorView(f32, 1, T.Role.IN))
    plain = _copy_with_latency(None).inspect("tileir", types, arch="sm_90")
    hinted = _copy_with_latency(4).inspect("tileir", types, arch="sm_90")
    assert "latency" not in plain and "load_view_tko" in plain
    assert "optimization_hints = <sm_90 = {latency = 4}>" in hinted


@ft.kernel
def coordinates3(out: ft.Out[i32], copy: ft.Out[f32], x: ft.In[f32]):
    i, j, k = out.tile_index
    a, b, c = out.tile_shape
    rows = ft.reshape(ft.arange(a), (a, 1, 1)) + i * a
    cols = ft.reshape(ft.arange(b), (1, b, 1)) + j * b
    depth = ft.reshape(ft.arange(c), (1, 1, c)) + k * c
    out.store(rows * 1000000 + cols * 1000 + depth)
    copy.store(ft.load(x, (i, j, k), (a, b, c)) + 1.0)


@pytest.mark.parametrize("backend", BOTH, indirect=True)
def test_rank3_partitions_give_each_block_its_tile(backend):
    # a 3-d grid (x, y, z) with partial tiles on every axis: each element's global coordinates
    shape = (3, 70, 20)
    xh = rand(shape, 40)
    out, copy, _ = coordinates3(poisoned(shape, i32).partition((2, 32, 8)),
                                poisoned(shape).partition((2, 32, 8)), fl.asarray(xh)).sync()
    r, c, d = np.indices(shape)
    np.testing.assert_array_equal(out.unpartition().numpy(), r * 1000000 + c * 1000 + d)
    np.testing.assert_array_equal(copy.unpartition().numpy(), xh + np.float32(1))


@ft.kernel
def exp2_flushed(out: ft.Out, x: ft.In, flush: ft.Const[int] = 1):
    if flush:
        out.store(ft.exp2(ft.load_like(x, out), flush_to_zero=True))
    else:
        out.store(ft.exp2(ft.load_like(x, out)))


@pytest.mark.parametrize("backend", BOTH, indirect=True)
@pytest.mark.parametrize("dtype", [f32, bf16], ids=lambda d: d.name)
def test_exp2_flush_to_zero_drops_subnormal_results(backend, dtype):
    # 2**-126 is the smallest normal f32: below it the flushed exp2 gives 0, the plain one a
    # subnormal (f32) or a bf16 subnormal
    xh = np.concatenate([np.linspace(-132, -120, 25), [0.5, 3, -np.inf], rand(4, 41)])
    xh = xh.astype(np.float32)
    x = fl.asarray(xh, dtype)
    want = np.exp2(x.numpy().astype(np.float64))
    unit = 2.0 ** -8 if dtype is bf16 else 2.0 ** -21   # bf16 rounding; the GPU's ex2.approx
    for flush in (1, 0):
        out, _ = exp2_flushed(poisoned(32, dtype).partition(32), x, flush=flush).sync()
        got = out.unpartition().numpy().astype(np.float64)
        expect = np.where(want < 2.0 ** -126, 0.0, want) if flush else want
        normal = want >= 2.0 ** -126
        np.testing.assert_allclose(got[normal], expect[normal], rtol=unit, atol=0)
        if flush:
            assert (got[~normal] == 0).all()
        elif backend == "cpu":
            assert (got[~normal & (want > 2.0 ** -149)] > 0).all()


@ft.kernel
def scaled_copy(out: ft.Out, x: ft.In, scale: ft.Const[float], twice: ft.Const[int] = 0):
    y = ft.load_like(x, out) * scale
    if twice:
        y = y * scale
    out.store(y)


def test_inspect_takes_the_constants_defaults_as_a_call_does():
    """A constant left out of ``inspect`` takes its default (before, the body read it as an
    unassigned local); one without a default, or a name that is no constant, is refused."""
    types = (T.TensorView(f32, 1, T.Role.OUT, (32,)), T.TensorView(f32, 1, T.Role.IN))
    assert exp2_flushed.inspect("ir", types) == exp2_flushed.inspect("ir", types, {"flush": 1})
    assert exp2_flushed.inspect("ir", types) != exp2_flushed.inspect("ir", types, {"flush": 0})
    with pytest.raises(ArgumentTypeError, match="no default") as info:
        scaled_copy.inspect("ir", types, {"twice": 1})
    assert info.value.param == "scale"
    with pytest.raises(ArgumentTypeError, match="not an ft.Const") as info:
        scaled_copy.inspect("ir", types, {"scale": 2.0, "thrice": 1})
    assert info.value.param == "thrice"
    assert "mul" in scaled_copy.inspect("ir", types, {"scale": 2.0})


def test_exp2_flush_to_zero_lowers_to_the_ftz_form():
    types = (T.TensorView(f32, 1, T.Role.OUT, (32,)), T.TensorView(f32, 1, T.Role.IN))
    flushed = exp2_flushed.inspect("tileir", types, {"flush": 1}, arch="sm_90")
    plain = exp2_flushed.inspect("tileir", types, {"flush": 0}, arch="sm_90")
    assert "exp2 %tile flush_to_zero : tile<32xf32>" in flushed
    assert "flush_to_zero" not in plain
    types64 = (T.TensorView(f64, 1, T.Role.OUT, (32,)), T.TensorView(f64, 1, T.Role.IN))
    with pytest.raises(CompileError, match="flush_to_zero is for f32, f16 and bf16"):
        exp2_flushed.inspect("ir", types64, {"flush": 1})
