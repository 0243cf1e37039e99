"""Float sums of tiles on both backends: f16/bf16 accumulate in f32 by default and round once;
``acc_dtype`` keeps the 16-bit accumulator. Bounds derived from the accumulator's unit roundoff
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2: any order of
n - 1 additions errs by at most gamma(n - 1) * sum(|x|), gamma(k) = k u / (1 - k u))."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32
from fearless.backends.tileir import tileiras
from fearless.backends.tileir.reader import decode
from fearless.backends.tileir.tir import dump
from fearless.compiler import compile_tile
from fearless.errors import CompileError
from fearless.ir import types as T
from tests.support import BACKENDS, import_source, on_cpu
from tests.tile import tile_kernels as K

UNIT = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24}
ROWS, N = 32, 1024


def gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


def _data(dtype, n=N):
    """Values in [0, 1): row sums near n / 2 (for n = 1024, f16 holds 3 fraction bits there
    and bf16 none)."""
    return np.random.default_rng(7).random((ROWS, n)).astype(dtype.numpy)


def _sums(kernel, xh, dtype):
    out = fl.full((ROWS, 1), np.nan, dtype).partition((8, 1))
    out, _ = kernel(out, fl.asarray(xh), n=xh.shape[1]).sync()
    return out.unpartition().numpy()[:, 0].astype(np.float64)


def _exact(xh):
    x = xh.astype(np.float64)  # f16/bf16 -> f64 is exact, and so is this sum of 1024 of them
    return x.sum(1), np.abs(x).sum(1)


def f32_sum_bound(xh, dtype):
    """Of the f32 sum rounded once to ``dtype``: |r - S| <= u |S32| + gamma sum|x|, with
    |S32| <= |S| + gamma sum|x|."""
    s, a = _exact(xh)
    g = gamma(xh.shape[1] - 1, UNIT["f32"])
    return UNIT[dtype.name] * (np.abs(s) + g * a) + g * a


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dtype", [f16, bf16], ids=lambda d: d.name)
def test_16_bit_sums_accumulate_in_f32_and_round_once(backend, dtype):
    xh = _data(dtype)
    got = _sums(K.row_sum, xh, dtype)
    s, _ = _exact(xh)
    bound = f32_sum_bound(xh, dtype)
    assert np.all(np.abs(got - s) <= bound)
    if backend == "cuda":  # both round an f32 sum once: each within the bound
        assert np.all(np.abs(got - on_cpu(lambda: _sums(K.row_sum, xh, dtype))) <= 2 * bound)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dtype", [f16, bf16], ids=lambda d: d.name)
def test_acc_dtype_keeps_the_16_bit_accumulator(backend, dtype):
    n = 64  # small enough that the any-order bound says something for bf16 (63 u = 0.25)
    xh = _data(dtype, n)
    got = _sums(K.row_sum_own_dtype, xh, dtype)
    s, a = _exact(xh)
    u = UNIT[dtype.name]
    # the CPU adds in a balanced tree: every element goes through log2(n) roundings; the GPU's
    # order is tileiras's: any order of n - 1 additions
    bound = gamma(int(np.log2(n)) if backend == "cpu" else n - 1, u) * a
    assert np.all(np.abs(got - s) <= bound)
    if backend == "cpu":  # it is the 16-bit accumulator: some rows miss by more than f32 could
        assert np.any(np.abs(got - s) > f32_sum_bound(xh, dtype))
    else:  # the GPU's order is tileiras's, so only the bounds hold there (and the tileiras
        # test below checks that the reduce adds 16-bit tiles)
        cpu = on_cpu(lambda: _sums(K.row_sum_own_dtype, xh, dtype))
        assert np.all(np.abs(got - cpu) <= bound + gamma(int(np.log2(n)), u) * a)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("kernel", [K.row_sum, K.row_sum_own_dtype], ids=["f32_acc", "own_acc"])
@pytest.mark.parametrize("dtype", [f16, f32], ids=lambda d: d.name)
def test_a_sum_is_minus_zero_only_when_every_addend_is(backend, kernel, dtype):
    # IEEE 754: -0.0 + -0.0 == -0.0 and -0.0 + +0.0 == +0.0 in any order, so a zero sum's sign
    # is defined; a reduction started from +0.0 made it +0.0 (fuzz seed 13567: 1 // sum gave
    # +inf on one backend and -inf on the other)
    n = 64
    xh = np.full((ROWS, n), -0.0, dtype.numpy)
    xh[np.arange(1, ROWS, 2), np.arange(ROWS // 2)] = 0.0  # odd rows: one +0.0 among the -0.0s
    xh[2::4, 5], xh[2::4, 9] = 3.0, -3.0  # and some rows cancel exactly (to +0.0 in RN)
    got = _sums(kernel, xh, dtype)
    want_minus = np.zeros(ROWS, bool)
    want_minus[0::4] = True  # rows 0, 4, ...: all -0.0 (rows 2, 6, ... cancel; odd rows +0.0)
    assert np.all(got == 0)
    assert list(np.signbit(got)) == list(want_minus)


def test_the_cpu_rounds_every_partial_sum_of_a_16_bit_accumulator():
    xh = np.zeros((ROWS, N), np.float16)
    xh[:, 0] = 2048.0
    xh[:, 1:] = 1.0  # 2048 + 1 rounds back to 2048 in f16 (spacing 2), but 1 + 1 is exact
    got = _sums(K.row_sum_own_dtype, xh, f16)
    # the balanced tree adds element k to element k + 512, then halves: the one 2048 + 1 at
    # the first level is lost (2049 -> 2048, ties to even), every other partial sum is exact
    np.testing.assert_array_equal(got, np.full(ROWS, 2048.0 + 1022.0))
    np.testing.assert_array_equal(_sums(K.row_sum, xh, f16), np.full(ROWS, 3072.0))


def test_acc_dtype_must_be_the_tile_dtype_or_a_wider_float(tmp_path):
    path = tmp_path / "bad_acc.py"
    path.write_text('''
from fearless import bf16, f32
from fearless import tile as ft

@ft.kernel
def narrow(out: ft.Out, x: ft.In):
    out.store(ft.sum(ft.load_like(x, out), 1, keepdims=True, acc_dtype=bf16))

@ft.kernel
def ints(out: ft.Out, x: ft.In):
    out.store(ft.sum(ft.load_like(x, out), 1, keepdims=True, acc_dtype=f32))
''')
    mod = import_source(path, "bad_acc")
    with pytest.raises(CompileError, match="acc_dtype bf16 cannot accumulate a sum of f16") as e:
        mod.narrow(fl.zeros((4, 1), f16).partition((4, 1)), fl.zeros((4, 1), f16))
    assert "acc_dtype=bf16" in str(e.value)
    with pytest.raises(CompileError, match="acc_dtype applies to sums of float tiles, not i32"):
        mod.ints(fl.zeros((4, 1), fl.i32).partition((4, 1)), fl.zeros((4, 1), fl.i32))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_minus_float_inf_is_a_constant(backend):
    xh = np.random.default_rng(8).standard_normal((16, 64)).astype(np.float32)
    out = fl.full((16, 1), np.nan, f32).partition((8, 1))
    out, _ = K.masked_row_max(out, fl.asarray(xh)).sync()
    keep = np.arange(64) % 3 != 0
    np.testing.assert_array_equal(out.unpartition().numpy()[:, 0], xh[:, keep].max(1))



def _nan_columns(dtype):
    """16 x 32: column 0 all NaN, columns 1-3 partly NaN, the rest numbers (+-inf among them)."""
    x = np.random.default_rng(9).standard_normal((16, 32)) * 100
    x[:, 0] = np.nan
    x[::2, 1], x[1:, 2], x[:15, 3] = np.nan, np.nan, np.nan
    x[4, 5], x[7, 6] = np.inf, -np.inf
    return x.astype(dtype.numpy)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", [f16, f32, fl.f64], ids=lambda d: d.name)
def test_a_max_or_min_ignores_nans_and_is_nan_only_of_nans(backend, kind, dtype):
    """maximumNumber/minimumNumber (docs/semantics.md): a NaN element is ignored, and only a
    column of NaNs gives NaN. Fuzz seed 29398: the GPU's reduce started from -inf (+inf for
    min), which a column of NaNs gave back, so ``x > ft.max(t, 1)`` was True where the CPU's
    NaN made it False."""
    xh = _nan_columns(dtype)
    kernel = K.col_max if kind == "max" else K.col_min
    out, _ = kernel(fl.full(32, 7.0, dtype).partition(16), fl.asarray(xh)).sync()
    want = (np.fmax if kind == "max" else np.fmin).reduce(xh, axis=0)
    got = out.unpartition().numpy()
    assert np.isnan(got[0]) and not np.isnan(got[1:]).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_a_float_max_or_min_reduces_from_nan(kind):
    """Without a GPU: the Tile IR reduce of a float max/min starts from NaN, the identity of
    maxf/minf (which ignore a NaN operand); -inf/+inf is not one for a column of NaNs."""
    kernel = K.col_max if kind == "max" else K.col_min
    types = (T.TensorView(f32, 1, T.Role.OUT, (16,)), _in(f32))
    compiled = compile_tile(kernel.captured, kernel._ir_params(types), {}, "sm_90", "tileir")
    (reduce,) = [line for line in dump(decode(compiled.tileir)).splitlines() if " reduce " in line]
    assert "identities=[Scalar(elem=f32, value=nan)]" in reduce

def test_float_of_a_string_that_is_not_a_number_is_refused(tmp_path):
    path = tmp_path / "bad_float.py"
    path.write_text('''
from fearless import f32
from fearless import tile as ft

@ft.kernel
def fill(out: ft.Out[f32]):
    out.store(ft.full(out.tile_shape, float("lots"), f32))
''')
    mod = import_source(path, "bad_float")
    with pytest.raises(CompileError, match="float\\(\\) of 'lots' is not a number") as e:
        mod.fill(fl.zeros(64).partition(64))
    assert 'float("lots")' in str(e.value)


def _out(dtype, n=1):
    return T.TensorView(dtype, 2, T.Role.OUT, (8, n))


def _in(dtype):
    return T.TensorView(dtype, 2, T.Role.IN)


COMPILED = {  # name: (kernel, IR parameter types, constants)
    "row_sum_f16": (K.row_sum, (_out(f16), _in(f16)), {"n": 1024}),
    "row_sum_bf16": (K.row_sum, (_out(bf16), _in(bf16)), {"n": 1024}),
    "row_sum_own_dtype_f16": (K.row_sum_own_dtype, (_out(f16), _in(f16)), {"n": 64}),
    "row_sum_own_dtype_bf16": (K.row_sum_own_dtype, (_out(bf16), _in(bf16)), {"n": 64}),
    "masked_row_max": (K.masked_row_max, (_out(f32), _in(f32)), {"n": 64}),
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(COMPILED))
def test_tileiras_compiles_the_reductions(name, arch):
    tc = tileiras.find()
    if tc is None:
        pytest.skip("tileiras is not installed (pip install 'fearless[tile]')")
    kernel, types, constants = COMPILED[name]
    compiled = compile_tile(kernel.captured, kernel._ir_params(types), constants, arch, "tileir")
    text = tc.disasm(compiled.tileir)
    if name.startswith("row_sum_own"):  # the 16-bit accumulator: the reduce adds 16-bit tiles
        assert "tile<8x64xf16>" in text or "tile<8x64xbf16>" in text
        assert "-> tile<8xf32>" not in text
    elif name.startswith("row_sum"):  # widened to f32, reduced, rounded once
        assert "-> tile<8xf32>" in text and "ftof" in text
    assert tc.compile(compiled.tileir, arch, kernel=kernel.name)[:4] == b"\x7fELF"
