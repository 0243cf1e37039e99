"""The kernel language's semantics, checked against Python / NumPy on the CPU and the GPU.

Every case runs one kernel on both backends (GPU ones with ``pytest -m gpu``), so the LLVM
lowering is held to the same results as the CPU interpreter. Outputs are poison-filled first.
"""
from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32, f64, i8, i32, i64, u8, u32, u64
from tests.support import import_source

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
T = TypeVar("T")
U = TypeVar("U")
pytestmark = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


def poisoned(shape, dtype):
    return fl.full(shape, np.nan if dtype.is_float else np.iinfo(dtype.numpy).max // 3, dtype)


def launch(kernel, size, *args):
    kernel[kernel.prepare(size)](*args)


# integers ------------------------------------------------------------------------------------

@fl.kernel
def int_op(op: i32, a: fl.Slice[T], b: fl.Slice[T], out: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    if i < len(out):
        x, y = a[i], b[i]
        if op == 0:
            out[i] = x // y
        elif op == 1:
            out[i] = x % y
        elif op == 2:
            out[i] = x << y
        elif op == 3:
            out[i] = x >> y
        elif op == 4:
            out[i] = min(x, y) * 3 + abs(x)
        else:
            out[i] = (max(x, y) - (x ^ y)) | (x & 12)


def _python(op, x, y, dtype):
    bits = dtype.bits

    def wrap(v):
        v &= (1 << bits) - 1
        return v - (1 << bits) if dtype.is_signed and v >> (bits - 1) else v
    if op in (0, 1) and y == 0:
        return 0  # fearless defines integer division by zero as 0 (like NumPy)
    return wrap({0: lambda: x // y, 1: lambda: x % y,
                 2: lambda: 0 if not 0 <= y < bits else x << y,
                 3: lambda: (-1 if x < 0 else 0) if not 0 <= y < bits else x >> y,
                 4: lambda: min(x, y) * 3 + abs(x),
                 5: lambda: (max(x, y) - (x ^ y)) | (x & 12)}[op]())


@pytest.mark.parametrize("dtype", [i8, i32, i64, u8, u32], ids=str)
@pytest.mark.parametrize("op", range(6))
def test_integer_ops_follow_python_and_wrap(backend, dtype, op):
    rng = np.random.default_rng(op + 10 * dtype.bits)
    info = np.iinfo(dtype.numpy)
    n = 300
    a = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True)
    b = rng.integers(max(info.min, -9), min(info.max, 9), n, endpoint=True)
    if op in (2, 3):
        b = rng.integers(-2 if dtype.is_signed else 0, dtype.bits + 3, n)
    a[:3] = [info.min, info.max, 7]
    b[:3] = [1 if op in (0, 1) else 0, 1, 0]
    a, b = a.astype(dtype.numpy), b.astype(dtype.numpy)
    out = poisoned(n, dtype)
    launch(int_op, n, op, fl.asarray(a), fl.asarray(b), out)
    assert out.numpy().tolist() == [_python(op, int(x), int(y), dtype) for x, y in zip(a, b)]


@pytest.mark.parametrize("dtype", [i64, u64], ids=str)
@pytest.mark.parametrize("op", [2, 3], ids=["shl", "shr"])
def test_a_64_bit_shift_past_32_bits_of_amount_is_past_the_width(backend, dtype, op):
    """Amounts whose low 32 bits are small (2**32 + 1) shift by the width or more: 0, or the
    sign for a signed >>. The NVPTX backend truncated them to 32 bits and shifted by the rest
    (fuzz seed 43933)."""
    info = np.iinfo(dtype.numpy)
    amounts = [2 ** 32, 2 ** 32 + 1, 2 ** 33 + 5, 2 ** 40 + 63, 2 ** 63 + 2, 1, 63, 64, 0]
    if dtype.is_signed:
        amounts = [a - 2 ** 64 if a >= 2 ** 63 else a for a in amounts] + [-(2 ** 32) + 3, -1]
    n = len(amounts)
    a = np.random.default_rng(43933).integers(max(info.min, -10 ** 6), 10 ** 6, n)
    a[0] = -5 if dtype.is_signed else 5
    a, b = a.astype(dtype.numpy), np.array(amounts).astype(dtype.numpy)
    out = poisoned(n, dtype)
    launch(int_op, n, op, fl.asarray(a), fl.asarray(b), out)
    assert out.numpy().tolist() == [_python(op, int(x), int(y), dtype) for x, y in zip(a, b)]


# floats ------------------------------------------------------------------------------------

@fl.kernel
def float_op(op: i32, a: fl.Slice[T], b: fl.Slice[T], out: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    if i < len(out):
        x, y = a[i], b[i]
        if op == 0:
            out[i] = x // y
        elif op == 1:
            out[i] = x % y
        elif op == 2:
            out[i] = min(x, y) + max(x, -y)
        elif op == 3:
            out[i] = x / y
        else:
            out[i] = abs(x) ** 0.5 + x ** 2


_FLOAT_REF = {0: np.floor_divide, 1: np.remainder, 2: lambda x, y: np.fmin(x, y) + np.fmax(x, -y),
              3: np.divide, 4: lambda x, y: np.sqrt(np.abs(x)) + x * x}


@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=str)
@pytest.mark.parametrize("op", range(5))
def test_float_ops_match_numpy(backend, dtype, op):
    rng = np.random.default_rng(op)
    n = 513
    a = rng.uniform(-50, 50, n).astype(dtype.numpy)
    b = rng.uniform(0.3, 5, n) * rng.choice([-1.0, 1.0], n)
    b = b.astype(dtype.numpy)
    out = poisoned(n, dtype)
    launch(float_op, n, op, fl.asarray(a), fl.asarray(b), out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = _FLOAT_REF[op](a64, b64)
    got = out.numpy().astype(np.float64)
    eps = {16: 2 ** -7 if dtype is bf16 else 2 ** -10, 32: 2 ** -23, 64: 2 ** -52}[dtype.bits]
    if op in (0, 1):  # floor-based: exact away from the integer boundaries of a / b
        q = a64 / b64
        away = np.abs(q - np.round(q)) > 64 * eps * np.maximum(np.abs(q), 1)
        if op == 0:
            assert np.array_equal(got[away], want[away])
        else:
            assert np.allclose(got[away], want[away], rtol=16 * eps, atol=64 * eps * 50)
    else:
        assert np.allclose(got, want, rtol=8 * eps, atol=8 * eps)


# casts ---------------------------------------------------------------------------------------

@fl.kernel
def cast_to(x: fl.Slice[T], out: fl.DisjointSlice[U]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = out.dtype(x[i])


@pytest.mark.parametrize("dst", [i8, i32, i64, u8, u32], ids=str)
def test_float_to_int_casts_truncate_and_saturate(backend, dst):
    info = np.iinfo(dst.numpy)
    x = np.array([0.0, -0.9, 0.9, 2.7, -2.7, 1e30, -1e30, np.inf, -np.inf, np.nan, 100.5,
                  float(info.max) * 2, float(info.min) - 1e6, -1.5], np.float32)
    out = poisoned(len(x), dst)
    launch(cast_to, len(x), fl.asarray(x), out)

    def sat(v):
        if math.isnan(v):
            return 0
        return int(max(info.min, min(info.max, math.trunc(v) if math.isfinite(v) else
                                     (info.max if v > 0 else info.min))))
    assert out.numpy().tolist() == [sat(float(v)) for v in x]


@pytest.mark.parametrize("src,dst", [(i64, i8), (i32, u8), (f64, f16), (f32, bf16), (u8, f32),
                                     (bf16, f16)], ids=str)
def test_other_casts_match_numpy(backend, src, dst):
    rng = np.random.default_rng(1)
    x = (rng.uniform(-300, 300, 200) if src.is_float else rng.integers(-1000, 1000, 200)
         ).astype(src.numpy)
    out = poisoned(len(x), dst)
    launch(cast_to, len(x), fl.asarray(x), out)
    want = x.astype(np.float64).astype(dst.numpy) if src.is_float or dst.is_float else \
        x.astype(dst.numpy)
    if src.is_float and dst.is_float:
        want = x.astype(dst.numpy)
    assert np.array_equal(out.numpy(), want)


# math ----------------------------------------------------------------------------------------

MATH = {"sqrt": (math.sqrt, 0.1, 100), "exp": (math.exp, -20, 20), "log": (math.log, 0.01, 1e4),
        "log2": (math.log2, 0.01, 1e4), "log10": (math.log10, 0.01, 1e4),
        "log1p": (math.log1p, -0.5, 100), "expm1": (math.expm1, -5, 5),
        "sin": (math.sin, -10, 10), "cos": (math.cos, -10, 10), "tan": (math.tan, -1.4, 1.4),
        "asin": (math.asin, -1, 1), "acos": (math.acos, -1, 1), "atan": (math.atan, -50, 50),
        "sinh": (math.sinh, -5, 5), "cosh": (math.cosh, -5, 5), "tanh": (math.tanh, -5, 5),
        "asinh": (math.asinh, -50, 50), "acosh": (math.acosh, 1, 50),
        "atanh": (math.atanh, -0.9, 0.9), "erf": (math.erf, -3, 3), "erfc": (math.erfc, -3, 3),
        "floor": (math.floor, -50, 50), "ceil": (math.ceil, -50, 50),
        "trunc": (math.trunc, -50, 50), "fabs": (math.fabs, -50, 50), "cbrt": (None, -50, 50)}


@pytest.mark.parametrize("dtype", [f32, f64], ids=str)
@pytest.mark.parametrize("name", sorted(MATH))
def test_math_functions_match_float64_reference(backend, dtype, name, tmp_path):
    ref, lo, hi = MATH[name]
    ref = ref or np.cbrt
    source = tmp_path / f"math_{name}.py"
    source.write_text("import math\nimport numpy as np\nimport fearless as fl\n"
                      "from typing import TypeVar\nT = TypeVar('T')\n"
                      f"fn = {'np.cbrt' if name == 'cbrt' else 'math.' + name}\n"
                      "@fl.kernel\n"
                      "def k(x: fl.Slice[T], out: fl.DisjointSlice[T]):\n"
                      "    i = fl.thread.index_1d()\n"
                      "    if i < len(out):\n"
                      "        out[i] = fn(x[i])\n")
    module = import_source(source, f"math_{name}")
    x = np.random.default_rng(3).uniform(lo, hi, 400).astype(dtype.numpy)
    out = poisoned(len(x), dtype)
    launch(module.k, len(x), fl.asarray(x), out)
    want = np.array([float(ref(float(v))) for v in x])
    ulp = 2.0 ** (-23 if dtype is f32 else -52)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=16 * ulp,
                               atol=16 * ulp)


# control flow, functions, variables ----------------------------------------------------------

@fl.func
def collatz_steps(v):
    steps = 0
    while v != 1:
        if steps >= 500:
            return -1
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        steps += 1
    return steps


@fl.func
def divmod_pair(a, b):
    return a // b, a % b


@fl.kernel
def control(x: fl.Slice[i64], out: fl.DisjointArray[i64, 2]):
    r, c = fl.thread.index_2d()
    if r >= out.shape[0] or c >= out.shape[1]:
        return
    v = x[r]
    if c == 0:
        out[r, c] = collatz_steps(v)
    elif c == 1:
        acc = 0
        for k in range(v % 37):
            if k % 3 == 0:
                continue
            if k > 30:
                break
            acc += k
        out[r, c] = acc
    elif c == 2:
        q, m = divmod_pair(v, 7)
        out[r, c] = q * 10 + m if v > 50 and m != 0 or v < 5 else -q
    else:
        total = 0
        for j in range(10, 0, -3):
            total = total * 2 + j
        out[r, c] = total + (1 if v > 100 else 0)


def _control_ref(v):
    def steps(v):
        s = 0
        while v != 1:
            if s >= 500:
                return -1
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        return s
    acc = 0
    for k in range(v % 37):
        if k % 3 == 0:
            continue
        if k > 30:
            break
        acc += k
    q, m = divmod(v, 7)
    total = 0
    for j in range(10, 0, -3):
        total = total * 2 + j
    return [steps(v), acc, q * 10 + m if v > 50 and m != 0 or v < 5 else -q,
            total + (1 if v > 100 else 0)]


def test_loops_branches_returns_and_inlined_functions(backend):
    x = np.random.default_rng(7).integers(1, 400, 150)
    out = poisoned((150, 4), i64)
    launch(control, (150, 4), fl.asarray(x), out)
    assert out.numpy().tolist() == [_control_ref(int(v)) for v in x]


SCALE = 3  # a module constant, frozen into the code at the first compile


@fl.kernel
def weak_scalars(a, x: fl.Slice[T], out: fl.DisjointSlice[T]):
    i = fl.thread.index_1d()
    if i < len(out):
        acc = 0                     # joins with T below, so acc has type T
        for k in range(SCALE):
            acc += x[i] * a
        out[i] = acc if x[i] > 0 else -acc


@pytest.mark.parametrize("dtype", [f32, f64, i32], ids=str)
def test_generic_kernel_with_weak_scalars_and_constants(backend, dtype):
    x = np.random.default_rng(2).integers(-50, 50, 100).astype(dtype.numpy)
    out = poisoned(100, dtype)
    launch(weak_scalars, 100, 2, fl.asarray(x), out)
    want = np.where(x > 0, 3 * 2 * x, -(3 * 2 * x)).astype(dtype.numpy)
    assert np.array_equal(out.numpy(), want)


@fl.kernel
def guarded(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    # short-circuit: x[i + 1] is never read for the last element
    if i + 1 < len(x) and x[i + 1] > x[i]:
        out[i] = 1.0
    else:
        out[i] = 0.0


def test_and_short_circuits_so_guarded_reads_stay_in_bounds(backend):
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    out = poisoned(1000, f32)
    launch(guarded, 1000, fl.asarray(x), out)
    want = np.append(x[1:] > x[:-1], False).astype(np.float32)
    assert np.array_equal(out.numpy(), want)  # and no KernelBoundsError at this sync


@fl.kernel
def fill_tail(out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = 1.5  # no guard: the threads past the end are skipped, not an error


def test_writes_past_the_end_at_the_own_index_are_skipped(backend):
    out = poisoned(1000, f32)
    fill_tail[fill_tail.prepare(1000, block=256)](out)  # 1024 threads for 1000 elements
    assert np.array_equal(out.numpy(), np.full(1000, 1.5, np.float32))


@fl.kernel
def unguarded_copy(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    out[i] = x[i] * 2.0  # no guard: exact when the launch has exactly len(x) threads


@fl.kernel
def row_index(out: fl.DisjointArray[i64, 2]):
    r, c = fl.thread.index_2d()
    out[r, c] = r * 1000 + c


def test_kernels_see_exactly_the_threads_of_their_launch(backend):
    # 5 blocks of 256: a grid that the GPU's 4-fold coarsening does not divide evenly
    x = np.random.default_rng(5).standard_normal(1280).astype(np.float32)
    out = poisoned(1280, f32)
    unguarded_copy[unguarded_copy.prepare(1280)](fl.asarray(x), out)
    assert np.array_equal(out.numpy(), x * 2)  # and no KernelBoundsError at this sync
    grid = poisoned((8 * 5, 32), i64)
    row_index[row_index.prepare((40, 32))](grid)
    assert np.array_equal(grid.numpy(), np.arange(40)[:, None] * 1000 + np.arange(32))


@fl.kernel
def shifted(x: fl.Slice[f32], out: fl.DisjointSlice[f32]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i + 1] + 1.0


def test_out_of_bounds_read_is_skipped_and_raised_at_sync(backend):
    x = np.arange(100, dtype=np.float32)
    out = poisoned(100, f32)
    launch(shifted, 100, fl.asarray(x), out)
    with pytest.raises(fl.errors.KernelBoundsError) as err:
        out.numpy()
    e = err.value
    assert (e.kernel, e.param, e.index, e.length, e.axis) == ("shifted", "x", 100, 100, 0)
    assert "x[i + 1]" in str(e)
    got = out.numpy()  # the error was raised once; the data is there
    assert np.array_equal(got, np.append(x[1:] + 1, 1.0).astype(np.float32))
