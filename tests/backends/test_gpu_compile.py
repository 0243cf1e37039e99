"""Kernels the cpu backend ran while the GPU compile path crashed on them (issue 9, item 3).

Each case runs on the cpu backend against an independent NumPy (or plain Python) reference, has
its LLVM lowering run on this machine's CPU against the same reference (the values the GPU code
computes, before the NVPTX backend: ``tests/numerics/host_llvm.py``), compiles through LLVM ->
PTX -> cubin (nvJitLink, no GPU) for sm_80 and sm_90, and, with ``pytest -m gpu``, runs on the
GPU, which must agree with the cpu backend exactly.
Crash classes: a bool cast to an 8-bit integer stayed an ``i1`` ("Operands must be the same
type, got (i8, i1)", "cannot store i1 to i8*", a select's assertion, invalid LLVM IR; and,
where the types happened to meet, silently wrong values: i1 sums wrap, an i1 sign-extends); float
constants that were not values of their dtype (``float too large to pack with e format``, bf16
constants rounded twice); ``fl.i8(300)`` of a literal, ``min``/``max`` of two literals and
``int(inf)`` failing inside the frontend; ``int()``/``float()`` of a literal typed as a strong
i64/f64 instead of a Python number; ``np.where`` with a constant condition losing NumPy's
promoted result type.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

import fearless as fl
from fearless import dtypes
from fearless.errors import CompileError
from fearless.ir import types as T
from tests.numerics import host_llvm
from tests.support import import_source, random_array

N = 1000  # several blocks, and a partial last one


@fl.kernel
def bool_and_into_i8(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.i8]):
    i = fl.thread.index_1d()
    if i < len(out):
        v: fl.i8 = (x[i] <= 6.0) and (x[i] > 1.0)
        out[i] = v


@fl.kernel
def bool_cast_times_i8(x: fl.Slice[fl.f32], y: fl.Slice[fl.i8], out: fl.DisjointSlice[fl.i8]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = fl.i8(x[i] > 0.0) * y[i]


@fl.kernel
def bool_cast_selected(x: fl.Slice[fl.f32], y: fl.Slice[fl.u8], out: fl.DisjointSlice[fl.u8]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = np.where(x[i] > 1.0, fl.u8(x[i] < 3.0), y[i])


@fl.kernel
def bools_added_as_u8(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.i32]):
    i = fl.thread.index_1d()
    if i < len(out):  # computed in i1 before the fix: 1 + 1 wrapped to 0
        out[i] = fl.i32(fl.u8(x[i] > 0.0) + fl.u8(x[i] > -1.0)) * 64 + 1


@fl.kernel
def bool_through_i8_to_f32(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):  # an i1 taken for a signed i8 converted True to -1.0 before the fix
        out[i] = fl.f32(fl.i8(x[i] > 0.0))


@fl.kernel
def huge_int_against_f16(x: fl.Slice[fl.f16], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = fl.f32(1099511627776 >= x[i])  # the literal is an f16: inf


@fl.kernel
def bf16_times_overflowing_literal(x: fl.Slice[fl.bf16], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = fl.f32(x[i] * 1e39)  # 1e39 is past bf16's largest finite value: inf


@fl.kernel
def bf16_times_literal_above_a_tie(x: fl.Slice[fl.bf16], out: fl.DisjointSlice[fl.bf16]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * 1.0039062500000002  # just above 1 + 2**-8, halfway between bf16s


@fl.kernel
def typed_constants_cast(x: fl.Slice[fl.i32], out: fl.DisjointSlice[fl.i32]):
    i = fl.thread.index_1d()
    if i < len(out):
        # folded by the rules of a cast (docs/semantics.md): integers wrap, floats saturate
        wrapped = fl.i32(fl.i8(300)) + fl.i32(fl.u8(-1)) + fl.i32(fl.i8(fl.i16(300)))
        saturated = fl.i32(fl.i8(fl.f32(1e10))) + fl.i32(fl.i16(-1e10))
        nan = fl.i32(fl.i32(math.nan)) + fl.i32(fl.f64(math.nan))  # NaN -> 0
        out[i] = x[i] + wrapped * 1000 + saturated * 10 + nan


@fl.kernel
def minmax_of_literals(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] * min(2, 3) + max(1.5, 0.5) + min(2, 1.5)


@fl.kernel
def where_with_constant_condition(y: fl.Slice[fl.u8], out: fl.DisjointSlice[fl.f64]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = np.where(True, y[i], 2.5) * 3  # f64, as NumPy's: no u8 wrap-around


@fl.kernel
def python_casts_of_literals(x: fl.Slice[fl.i8], h: fl.Slice[fl.f16],
                             out: fl.DisjointSlice[fl.f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        # int() and float() of a literal give Python numbers: weak, so i8 and f16 arithmetic
        out[i] = fl.f32(x[i] + int(100.7)) + fl.f32(h[i] * float(3))


def _saturating(v: float, bits: int) -> int:
    """A float cast to a signed integer of ``bits``: truncated, saturated, NaN -> 0."""
    return 0 if v != v else max(-2 ** (bits - 1), min(2 ** (bits - 1) - 1, int(v)))


@dataclass
class Case:
    kernel: fl.Kernel
    inputs: tuple       # dtypes of the input arrays
    out: dtypes.DType
    reference: Callable  # NumPy arrays in -> NumPy array out


CASES = {
    "bool_and_into_i8": Case(bool_and_into_i8, (fl.f32,), fl.i8,
                             lambda x: ((x <= 6.0) & (x > 1.0)).astype(np.int8)),
    "bool_cast_times_i8": Case(bool_cast_times_i8, (fl.f32, fl.i8), fl.i8,
                               lambda x, y: np.where(x > 0.0, y, np.int8(0))),
    "bool_cast_selected": Case(bool_cast_selected, (fl.f32, fl.u8), fl.u8,
                               lambda x, y: np.where(x > 1.0, (x < 3.0).astype(np.uint8), y)),
    "bools_added_as_u8": Case(
        bools_added_as_u8, (fl.f32,), fl.i32,
        lambda x: ((x > 0).astype(np.uint8) + (x > -1).astype(np.uint8)).astype(np.int32) * 64
        + 1),
    "bool_through_i8_to_f32": Case(bool_through_i8_to_f32, (fl.f32,), fl.f32,
                                   lambda x: (x > 0).astype(np.int8).astype(np.float32)),
    "huge_int_against_f16": Case(huge_int_against_f16, (fl.f16,), fl.f32,
                                 lambda x: (1099511627776 >= x).astype(np.float32)),
    "bf16_times_overflowing_literal": Case(
        bf16_times_overflowing_literal, (fl.bf16,), fl.f32,
        lambda x: np.float32(math.inf) * np.sign(x.astype(np.float32))),
    # the product of two 8-bit significands is exact in f32, so one rounding to bf16 is exact
    "bf16_times_literal_above_a_tie": Case(
        bf16_times_literal_above_a_tie, (fl.bf16,), fl.bf16,
        lambda x: (x.astype(np.float32) * np.float32(1 + 2 ** -7)).astype(ml_dtypes.bfloat16)),
    "typed_constants_cast": Case(
        typed_constants_cast, (fl.i32,), fl.i32,
        lambda x: x + (2 * ((300 + 128) % 256 - 128) + (-1) % 256) * 1000
        + (_saturating(1e10, 8) + _saturating(-1e10, 16)) * 10),
    "minmax_of_literals": Case(minmax_of_literals, (fl.f32,), fl.f32,
                               lambda x: x * np.float32(2) + np.float32(1.5) + np.float32(1.5)),
    "python_casts_of_literals": Case(
        python_casts_of_literals, (fl.i8, fl.f16), fl.f32,
        lambda x, h: (x + int(100.7)).astype(np.float32) + (h * float(3)).astype(np.float32)),
    "where_with_constant_condition": Case(where_with_constant_condition, (fl.u8,), fl.f64,
                                          lambda y: np.where(True, y, 2.5) * 3),
}


def _inputs(case: Case) -> list[np.ndarray]:
    return [random_array(d, N, seed=k) for k, d in enumerate(case.inputs)]


def _types(case: Case) -> tuple:
    return (*(T.Array(d, 1, T.Access.READ, True) for d in case.inputs),
            T.Array(case.out, 1, T.Access.DISJOINT, True))


def _run(case: Case, hosts) -> np.ndarray:
    out = fl.asarray(np.full(N, 99 if not case.out.is_float else np.nan, case.out.numpy))
    case.kernel[case.kernel.prepare(N)](*(fl.asarray(h) for h in hosts), out)
    return out.numpy()


@pytest.mark.parametrize("name", CASES)
def test_cpu_backend_matches_numpy(name):
    case = CASES[name]
    hosts = _inputs(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow to inf is the point
        want = np.asarray(case.reference(*hosts)).astype(case.out.numpy)
    got = _run(case, hosts)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", CASES)
def test_the_llvm_lowering_run_on_this_cpu_matches_numpy(name):
    case = CASES[name]
    hosts = _inputs(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.asarray(case.reference(*hosts)).astype(case.out.numpy)
    out = np.full(N, 99 if not case.out.is_float else np.nan, case.out.numpy)
    try:
        host_llvm.run_kernel(case.kernel, _types(case), [*hosts, out], N)
    except host_llvm.Unsupported as exc:
        pytest.skip(str(exc))
    np.testing.assert_array_equal(out, want)


def _nvjitlink():
    from fearless.runtime.module import nvjitlink_version
    if nvjitlink_version() == "unavailable":
        pytest.skip("nvJitLink is not installed")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", CASES)
def test_compiles_through_ptx_to_a_cubin(name, arch):
    _nvjitlink()
    case = CASES[name]
    ptx = case.kernel.inspect("ptx", _types(case), arch)
    assert f".target {arch}" in ptx and f".entry {case.kernel.name}" in ptx
    assert case.kernel.inspect("cubin", _types(case), arch).startswith("cubin: ")


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_gpu_matches_the_cpu_backend(name):
    case = CASES[name]
    hosts = _inputs(case)
    got = _run(case, hosts)
    fl.set_backend("cpu")
    try:
        want = _run(case, hosts)
    finally:
        fl.set_backend("cuda")
    np.testing.assert_array_equal(got, want)


LITERAL_ERRORS = {  # Python raises for these too
    "int(math.inf)": r"int\(inf\) has no value",
    "int(-math.inf)": r"int\(-inf\) has no value",
    "int(math.nan)": r"int\(nan\) has no value",
}


@pytest.mark.parametrize("expr", LITERAL_ERRORS)
def test_int_of_a_non_finite_literal_is_a_compile_error(expr, tmp_path):
    path = tmp_path / "literal_cast.py"
    path.write_text("import math\nimport fearless as fl\n\n\n@fl.kernel\n"
                    "def k(out: fl.DisjointSlice[fl.f32]):\n"
                    "    i = fl.thread.index_1d()\n"
                    f"    out[i] = fl.f32({expr})\n")
    k = import_source(path, "literal_cast").k
    with pytest.raises(CompileError, match=LITERAL_ERRORS[expr]) as info:
        k[k.prepare(4)](fl.zeros(4))
    assert "literal_cast.py:8" in str(info.value) and "^" in str(info.value)
