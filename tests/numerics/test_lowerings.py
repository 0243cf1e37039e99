"""The GPU lowerings held to the CPU backend without a GPU.

* SIMT: each scalar op's LLVM rule runs on this machine (tests/numerics/host_llvm.py) and must
  give the CPU backend's bits, edge cases included (zero divisors, INT_MIN, shifts past the
  width, NaN, signed zeros, infinities, halfway points).
* The PTX holds the instructions docs/semantics.md promises (IEEE division and square root, no
  flush-to-zero, saturating conversions, min/max with -0.0 < +0.0, contraction to fma).
* Tile IR: the guards that make undefined Tile IR operations defined are in the bytecode.
"""
from __future__ import annotations

import itertools
import math
import re
from typing import TypeVar

import numpy as np
import pytest

import fearless as fl
from fearless import dtypes
from fearless import tile as ft
from fearless.backends.cpu import ops as cpu
from fearless.ir import types as T
from fearless.ir.core import Operation, Value
from tests.numerics.host_llvm import compiled

INTS = [dtypes.i8, dtypes.i16, dtypes.i32, dtypes.i64, dtypes.u8, dtypes.u32, dtypes.u64]
FLOATS = [dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.f64]
ALL = [dtypes.bool_] + INTS + FLOATS
T_ = TypeVar("T_")
U_ = TypeVar("U_")
_FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0.1, -7.0, 1e-40, -1e-310, 5e-324, 65504.0,
                65520.0, 2.0 ** 31, -(2.0 ** 31), 2.0 ** 63, 2.0 ** 64, 1e30, -1e30, 3.4e38, 1e300,
                math.inf, -math.inf, math.nan, 1 + 2 ** -8 + 2 ** -30, 16777217.0, 127.5, -128.5]


def sample(d: dtypes.DType, rng, n: int = 300) -> np.ndarray:
    """Edge values of ``d`` first, then random ones (never all zero)."""
    if d.is_bool:
        return np.array([False, True] + list(rng.random(n) < 0.5))
    if d.is_int:
        info = np.iinfo(d.numpy)
        edges = [v for v in (info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 3, 7, 8, d.bits - 1,
                             d.bits, d.bits + 1, 100, info.max - 1, info.max)
                 if info.min <= v <= info.max]
        wide = rng.integers(info.min, info.max, n // 2, dtype=d.numpy, endpoint=True)
        small = rng.integers(max(info.min, -40), min(info.max, 40), n - n // 2, endpoint=True)
        return np.concatenate([np.array(edges, d.numpy), wide, small.astype(d.numpy)])
    x = np.concatenate([_FLOAT_EDGES, rng.standard_normal(n // 2) * 10,
                        rng.standard_normal(n - n // 2) * 10.0 ** rng.integers(-8, 9, n - n // 2)])
    return dtypes.convert(x, d)


def pairs(d: dtypes.DType, rng):
    x = sample(d, rng)
    edges = x[:len(_FLOAT_EDGES) if d.is_float else 17]
    a, b = zip(*itertools.product(edges, edges))
    return (np.concatenate([np.array(a, x.dtype), x]),
            np.concatenate([np.array(b, x.dtype), rng.permutation(x)]))


def cpu_rule(name, operands, result, attrs, *arrays):
    op = Operation(name, [Value(T.Scalar(d)) for d in operands], [T.Scalar(result)], dict(attrs))
    return np.asarray(cpu.evaluate(op, *[np.asarray(a) for a in arrays])).astype(result.numpy)


def check(name, operands, result, attrs=(), rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    if len(operands) == 2:
        args = pairs(operands[0], rng)
    else:
        args = (sample(operands[0], rng),)
    got = compiled(name, tuple(operands), result, tuple(attrs))(*args)
    want = cpu_rule(name, operands, result, attrs, *args)
    bad = _differences(got, want)
    assert not bad.size, (f"{name} {[str(d) for d in operands]} -> {result}: lowering gives "
                          f"{got.flat[bad[0]]!r}, cpu {want.flat[bad[0]]!r} for "
                          f"{[a.flat[bad[0]] for a in args]!r} ({bad.size} differ)")


def _differences(got, want):
    if want.dtype.kind == "b":
        return np.flatnonzero(got != want)
    width = f"u{want.dtype.itemsize}"
    same = got.view(width) == want.view(width)
    if want.dtype.kind == "f" or want.dtype == dtypes.bf16.numpy:
        same |= np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return np.flatnonzero(~same)


@pytest.mark.parametrize("d", INTS, ids=str)
@pytest.mark.parametrize("name", ["floordiv", "mod", "shl", "shr", "min", "max", "add", "sub",
                                  "mul"])
def test_integer_ops_lower_to_the_cpu_semantics(name, d):
    check(f"arith.{name}", (d, d), d)


@pytest.mark.parametrize("d", INTS + FLOATS, ids=str)
@pytest.mark.parametrize("name", ["neg", "abs"])
def test_negation_and_abs_wrap_and_keep_signs(name, d):
    check(f"arith.{name}", (d,), d)


@pytest.mark.parametrize("d", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["floordiv", "mod", "min", "max", "add", "sub", "mul", "div"])
def test_float_ops_lower_to_the_cpu_semantics(name, d):
    check(f"arith.{name}", (d, d), d)


@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_rint_lowers_to_the_cpu_semantics(d):
    check("math.rint", (d,), d)  # llvm.roundeven: exact, ties to even, signs kept


@pytest.mark.parametrize("d", FLOATS, ids=str)
@pytest.mark.parametrize("pred", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_float_comparisons_with_nan(pred, d):
    check("arith.cmp", (d, d), dtypes.bool_, (("pred", pred),))


@pytest.mark.parametrize("src,dst", [(s, t) for s in ALL for t in ALL
                                     if s is not t and not t.is_bool], ids=str)
def test_casts_lower_to_the_cpu_semantics(src, dst):
    check("arith.cast", (src,), dst, rng_seed=src.bits + 3 * dst.bits)


# PTX: the instructions docs/semantics.md promises ---------------------------------------------

@fl.kernel
def convert(x: fl.Slice[T_], out: fl.DisjointSlice[U_]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = out.dtype(x[i])


@fl.kernel
def arith_mix(a: fl.Slice[T_], b: fl.Slice[T_], out: fl.DisjointArray[T_, 2]):
    r, c = fl.thread.index_2d()
    if r < out.shape[0] and c < out.shape[1]:
        x, y = a[r], b[r]
        if c == 0:
            out[r, c] = x // y
        elif c == 1:
            out[r, c] = x % y
        elif c == 2:
            out[r, c] = min(x, y) + max(y, x)
        elif c == 3:
            out[r, c] = x / y + math.sqrt(abs(y))
        else:
            out[r, c] = x * y + out.dtype(1.5)


def _types(*specs):
    access = {"r": T.Access.READ, "w": T.Access.DISJOINT}
    return tuple(T.Array(d, ndim, access[a], True) for d, ndim, a in specs)


def ptx(kernel, types, arch):
    return kernel.inspect("ptx", types, arch)


@fl.kernel
def shift_by(x: fl.Slice[T_], n: fl.Slice[T_], out: fl.DisjointSlice[T_]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] << n[i]


@pytest.mark.parametrize("d", [dtypes.i64, dtypes.u64], ids=str)
def test_a_64_bit_shift_amount_is_saturated_before_ptx_truncates_it(d):
    """PTX's shl.b64 takes a 32-bit amount: the amount is clamped to 63 (min.u64) before the
    conversion, so 2**32 + 1 is not a shift by 1 (fuzz seed 43933)."""
    text = ptx(shift_by, _types((d, 1, "r"), (d, 1, "r"), (d, 1, "w")), "sm_90")
    amounts = re.findall(r"shl\.b64\s+%rd\d+, %rd\d+, (%r\d+);", text)  # unrolled: several
    clamped = set(re.findall(r"min\.u64\s+(%rd\d+), %rd\d+, 63;", text))
    assert amounts, text
    for reg in amounts:
        (source,) = re.findall(rf"cvt\.u32\.u64\s+{reg}, (%rd\d+);", text)
        assert source in clamped, text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("src", [dtypes.i32, dtypes.i64, dtypes.u64], ids=str)
def test_wide_integers_to_bf16_round_once_in_ptx(src, arch):
    # LLVM's own sequence on sm_80 is cvt.rn.f32.s64 then cvt.rn.bf16.f32: two roundings
    text = ptx(convert, _types((src, 1, "r"), (dtypes.bf16, 1, "w")), arch)
    assert re.search(r"clz\.b(32|64)", text)  # the magnitude rounded to odd at 24 bits
    assert "cvt.rn.bf16.f32" in text


def test_float_arithmetic_is_ieee_without_flush_to_zero_and_contracts_to_fma():
    types = _types((dtypes.f32, 1, "r"), (dtypes.f32, 1, "r"), (dtypes.f32, 2, "w"))
    llvm = arith_mix.inspect("llvm", types, "sm_90")
    assert "frem" not in llvm and "__nv_fmodf" in llvm  # % and // use libdevice's exact fmod
    assert "llvm.maximumnum.f32" in llvm  # min too, as the max of the negations (below)
    text = ptx(arith_mix, types, "sm_90")
    assert "max.f32" in text  # maximumNumber: -0.0 < +0.0, NaN ignored
    assert "div.rn.f32" in text and "sqrt.rn.f32" in text
    assert "fma.rn.f32" in text  # x * y + 1.5: one rounding (docs/semantics.md, contraction)
    assert not re.search(r"\b(add|sub|mul|div|sqrt|fma)(\.rn)?\.ftz", text)


@pytest.mark.parametrize("src,dst", [(dtypes.f64, dtypes.i64), (dtypes.f32, dtypes.i32),
                                     (dtypes.f64, dtypes.u64)], ids=str)
def test_float_to_int_saturates_and_sends_nan_to_zero_in_ptx(src, dst):
    # cvt.rzi saturates, but a NaN f64 -> 64-bit integer gives INT_MIN on the GPU: guarded
    text = ptx(convert, _types((src, 1, "r"), (dst, 1, "w")), "sm_90")
    assert f"cvt.rzi.{'s' if dst.is_signed else 'u'}{dst.bits}.f{src.bits}" in text
    assert "selp" in text and ("setp.nan" in text or not dst.is_signed)


@fl.kernel
def clamp_to_unit(x: fl.Slice[T_], out: fl.DisjointSlice[T_]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = max(min(x[i], 1.0), 0.0)


@pytest.mark.parametrize("d", [dtypes.f16, dtypes.bf16, dtypes.f32], ids=str)
def test_float_min_is_the_max_of_the_negations_in_ptx(d):
    """ptxas (CUDA 13.0 to 13.5) turns PTX min(x, 1.0) then max(_, 0.0) into one .SAT
    instruction, which gives 0 for a NaN x where min gives 1.0 and then max 1.0 (fuzz seed
    58110): a float min is -max(-a, -b) instead, which ptxas does not fold (the negations are
    free operand modifiers). The values: test_float_ops_lower_to_the_cpu_semantics[min]."""
    text = ptx(clamp_to_unit, _types((d, 1, "r"), (d, 1, "w")), "sm_90")
    assert not re.search(r"\bmin(\.NaN)?\.(f16|bf16|f32)\b", text), text
    assert re.search(rf"\bneg\.{d.name}\b", text) and re.search(rf"\bmax\.{d.name}\b", text)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_no_saturating_instruction_clamps_to_0_1_in_sass(arch):
    """The SASS of the clamp: .SAT (NaN -> 0) was what ptxas made of PTX min then max."""
    from fearless.runtime import disasm
    if disasm.find() is None:
        pytest.skip("needs nvdisasm or cuobjdump (pip install nvidia-cuda-nvdisasm)")
    for d in (dtypes.f16, dtypes.f32):
        sass = clamp_to_unit.inspect("sass", _types((d, 1, "r"), (d, 1, "w")), arch)
        assert "MNMX" in sass and ".SAT" not in sass, sass


# Tile IR: guards around the operations Tile IR leaves undefined -------------------------------

@ft.kernel
def tile_mix(out: ft.Out[T_], x: ft.In[T_], y: ft.In[T_]):
    a, b = ft.load_like(x, out), ft.load_like(y, out)
    out.store(a // b + a % b)


@ft.kernel
def tile_shift(out: ft.Out[T_], x: ft.In[T_], y: ft.In[T_]):
    out.store(ft.load_like(x, out) << ft.load_like(y, out))


@ft.kernel
def tile_convert(out: ft.Out[U_], x: ft.In[T_]):
    out.store(ft.load_like(x, out).astype(out.dtype))


def tile_ops(kernel, **signature) -> list[str]:
    """The names of the Tile IR operations ``kernel`` lowers to, read back from its bytecode."""
    from fearless.backends.tileir.lower import lower_tile
    from fearless.backends.tileir.reader import decode
    from fearless.targets import param_types, parse_signature as _parse_signature
    sig = _parse_signature(",".join(f"{k}={v}" for k, v in signature.items()))
    fn = kernel.compile_for(param_types(kernel, sig), {}, "cpu").fn
    names = []

    def walk(block):
        for op in block.ops:
            names.append(op.name)
            for region in op.regions:
                walk(region)
    for function in decode(lower_tile(fn, (13, 4))).functions:
        walk(function.body)
    return names


def test_tile_integer_division_guards_zero_and_minus_one():
    names = tile_ops(tile_mix, out="i32:1/64", x="i32:1", y="i32:1")
    assert {"divi", "remi"} <= set(names)
    assert names.count("select") >= 6  # divisor 1 where it is 0 or -1; the results chosen after


def test_tile_float_floor_division_is_pythons():
    names = tile_ops(tile_mix, out="f32:1/64", x="f32:1", y="f32:1")
    assert {"remf", "floor", "bitcast"} <= set(names)  # exact fmod, snapped quotient, signed 0


def test_tile_shifts_past_the_width_are_guarded():
    names = tile_ops(tile_shift, out="i32:1/64", x="i32:1", y="i32:1")
    assert names.count("select") == 2 and "cmpi" in names


def test_tile_float_to_int_is_guarded_and_int_to_bf16_rounds_once():
    names = tile_ops(tile_convert, out="i64:1/64", x="f64:1")
    assert names.count("cmpf") == 3 and names.count("select") == 3 and "ftoi" in names
    names = tile_ops(tile_convert, out="bf16:1/64", x="i32:1")
    assert names.count("itof") == 2 and "shli" in names  # rounded to odd at 24 bits first


@ft.kernel
def tile_clamp(out: ft.Out[T_], x: ft.In[T_]):
    out.store(ft.maximum(ft.minimum(ft.load_like(x, out), 1.0), 0.0))


def test_tile_float_min_is_the_max_of_the_negations():
    """tileiras hands ptxas a min then max too (the .SAT fold above): no minf."""
    names = tile_ops(tile_clamp, out="f32:1/64", x="f32:1")
    assert "minf" not in names and names.count("maxf") == 2 and names.count("negf") == 3


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_guarded_tile_kernels_compile_with_tileiras(arch):
    from fearless.backends.tileir import tileiras
    if tileiras.find() is None:
        pytest.skip("tileiras is not installed")
    from fearless.targets import param_types, parse_signature as _parse_signature
    for kernel, sig in ((tile_mix, "out=i64:1/64,x=i64:1,y=i64:1"),
                        (tile_mix, "out=f16:1/64,x=f16:1,y=f16:1"),
                        (tile_shift, "out=u8:1/64,x=u8:1,y=u8:1"),
                        (tile_convert, "out=bf16:1/64,x=u64:1"),
                        (tile_convert, "out=u32:1/64,x=f32:1")):
        text = kernel.inspect("cubin", param_types(kernel, _parse_signature(sig)), {},
                              arch)
        assert text.startswith("cubin:"), text
