"""Frontend details: typing rules, spans of nested functions, frozen constants."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import dtypes as D
from fearless.errors import CompileError
from fearless.frontend.infer import (WEAK_FLOAT, WEAK_INT, TypingError, join, promote,
                                     promote_weak)
from fearless.ir import types as T


def test_promotion_table():
    assert promote(D.i32, D.i64) is D.i64
    assert promote(D.u8, D.i8) is D.i16
    assert promote(D.u32, D.i64) is D.i64
    assert promote(D.i32, D.f32) is D.f32
    assert promote(D.f16, D.bf16) is D.f32
    assert promote(D.bool_, D.u8) is D.u8
    with pytest.raises(TypingError):
        promote(D.u64, D.i8)
    assert promote_weak(D.f16, WEAK_FLOAT) is D.f16
    assert promote_weak(D.i32, WEAK_FLOAT) is D.f64
    assert promote_weak(D.u8, WEAK_INT) is D.u8


def test_variable_types_join_over_the_function():
    assert join([WEAK_INT, T.Scalar(D.f32)]) == T.Scalar(D.f32)
    assert join([T.ThreadIndex(1, 0)]) == T.ThreadIndex(1, 0)
    assert join([T.ThreadIndex(1, 0), WEAK_INT]) == T.INDEX  # a reassigned index is a plain int
    assert join([WEAK_INT]) == T.INDEX and join([WEAK_FLOAT]) == T.Scalar(D.f64)


def test_spans_point_into_nested_definitions():
    @fl.kernel
    def nested(out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        out[i + 0] = 1.0

    with pytest.raises(CompileError) as info:
        nested[nested.prepare(4)](fl.zeros(4))
    span = info.value.span
    assert span.filename == __file__
    assert span.text.strip() == "out[i + 0] = 1.0"
    assert span.text[span.col:span.end_col] == "i + 0"


LIMIT = 5


def test_globals_are_frozen_at_the_first_compile():
    global LIMIT

    @fl.kernel
    def clamp(out: fl.DisjointSlice[fl.i64]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = min(i, LIMIT)

    out = fl.zeros(8, fl.i64)
    clamp[clamp.prepare(8)](out)
    assert out.numpy().tolist() == [0, 1, 2, 3, 4, 5, 5, 5]
    LIMIT = 2
    clamp[clamp.prepare(8)](out)  # same specialisation: the compiled code keeps 5
    assert out.numpy().tolist() == [0, 1, 2, 3, 4, 5, 5, 5]
    LIMIT = 5


def test_device_functions_are_not_callable_on_the_host():
    @fl.func
    def twice(v):
        return 2 * v

    with pytest.raises(CompileError, match="only inside a kernel"):
        twice(3)
    with pytest.raises(CompileError, match="inside a @fearless.kernel"):
        fl.thread.index_1d()


def test_explicit_casts_and_annotated_locals():
    @fl.kernel
    def casts(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.i32]):
        i = fl.thread.index_1d()
        if i < len(out):
            acc: fl.f64 = 0
            acc += x[i]
            out[i] = fl.i32(acc * 10) + int(x[i])

    x = np.array([1.25, -2.5, 3.75], np.float32)
    out = fl.zeros(3, fl.i32)
    casts[casts.prepare(3)](fl.asarray(x), out)
    assert out.numpy().tolist() == [12 + 1, -25 - 2, 37 + 3]


def test_a_literal_that_does_not_fit_its_partner_is_refused():
    @fl.kernel
    def wide(x: fl.Slice[fl.i8], out: fl.DisjointSlice[fl.i8]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = x[i] * 2 + 300

    with pytest.raises(CompileError, match="300 does not fit in i8"):
        wide[wide.prepare(2)](fl.zeros(2, fl.i8), fl.zeros(2, fl.i8))


def test_comparing_with_a_literal_outside_the_type_is_exact():
    @fl.kernel
    def big(x: fl.Slice[fl.u8], out: fl.DisjointSlice[fl.bool_]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = x[i] < 300 and x[i] > -1

    out = fl.zeros(3, fl.bool_)
    big[big.prepare(3)](fl.asarray(np.array([0, 7, 255], np.uint8)), out)
    assert out.numpy().tolist() == [True, True, True]


def test_the_math_functions_kernels_call_come_from_the_ops_user_names():
    """``math.<fn>`` and NumPy's spelling of it reach op ``math.<fn>`` (OpDef.user_names), for
    every math op the two modules have (each has one at least); rsqrt is ft.rsqrt only."""
    import math as pymath

    from fearless.frontend.intrinsics import _MATH_BY_OBJECT
    from fearless.ir.opdef import Op
    from fearless.ir.ops import math as math_ops
    for op in math_ops.UNARY + math_ops.BINARY + math_ops.PREDICATES:
        if op is Op.RSQRT:
            assert op not in _MATH_BY_OBJECT.values()
            continue
        assert op in _MATH_BY_OBJECT.values()
        if hasattr(pymath, op.base):
            assert _MATH_BY_OBJECT[id(getattr(pymath, op.base))] is op
    numpy_spellings = {np.arcsin: Op.ASIN, np.arccosh: Op.ACOSH, np.power: Op.POW,
                       np.arctan2: Op.ATAN2, np.fabs: Op.FABS, np.isfinite: Op.ISFINITE,
                       np.rint: Op.RINT}
    for ufunc, op in numpy_spellings.items():
        assert _MATH_BY_OBJECT[id(ufunc)] is op


def test_ldexp_takes_an_integer_exponent_saturated_to_i32():
    """``math.ldexp(x, n)``: any integer (a literal, i64, u64, bool) becomes the op's i32
    operand, clamped (every exponent past i32 gives the same 0 or inf); a float is refused at
    the call, as Python refuses it."""
    import math

    @fl.kernel
    def scaled(x: fl.Slice[fl.f32], n: fl.Slice[fl.u64], m: fl.Slice[fl.i64],
               out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = math.ldexp(x[i], n[i]) + math.ldexp(x[i], m[i]) + math.ldexp(1.5, True)

    x = fl.asarray(np.array([1.0, 3.0, -2.0], np.float32))
    n = fl.asarray(np.array([0, 2, 2 ** 64 - 1], np.uint64))
    m = fl.asarray(np.array([1, -2 ** 62, -1], np.int64))
    out = fl.full(3, np.nan, fl.f32)
    scaled[scaled.prepare(3)](x, n, m, out)
    assert out.numpy().tolist() == [1.0 + 2.0 + 3.0, 12.0 + 0.0 + 3.0, -np.inf]
    ir = scaled.inspect("ir", (T.Array(D.f32, 1, T.Access.READ, True),
                               T.Array(D.u64, 1, T.Access.READ, True),
                               T.Array(D.i64, 1, T.Access.READ, True),
                               T.Array(D.f32, 1, T.Access.DISJOINT, True)))
    assert ir.count("math.ldexp") == 3 and "i32" in ir

    @fl.kernel
    def fractional(x: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = math.ldexp(x[i], x[i])

    with pytest.raises(CompileError) as info:
        fractional[fractional.prepare(3)](x, out)
    assert info.value.reason == "argument 2 of math.ldexp() must be an integer, not f32"
    assert info.value.help == "convert it with int(...)"
    assert "math.ldexp(x[i], x[i])" in str(info.value)


def test_fearless_math_holds_what_python_and_numpy_lack():
    """``fl.math.erfinv`` reaches op math.erfinv through the op's user names (the ops of the
    other math functions are reached from ``math`` and NumPy, so fl.math has no copies)."""
    import math

    from fearless.frontend.intrinsics import _MATH_BY_OBJECT
    from fearless.ir.opdef import Op
    assert _MATH_BY_OBJECT[id(fl.math.erfinv)] is Op.ERFINV
    for name in vars(fl.math):
        assert not hasattr(math, name) and not hasattr(np, name) or name.startswith("_") or \
            name == "annotations", name
