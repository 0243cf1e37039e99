"""OpDef.eval, the one definition of each scalar op, and its three users.

The CPU backend runs it on arrays (fixed width: integers wrap), the frontend folds weak literals
and ``analysis/owners.py`` enumerates indices with it on Python numbers (no width). The two
domains must agree wherever a fixed-width result is the exact one wrapped; where Python has no
number (a zero divisor, a negative shift) the callers leave the value to run time.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fearless import dtypes
from fearless.analysis.owners import Model, Unproven
from fearless.backends.cpu import ops as cpu_ops
from fearless.frontend.infer import Const, fold, fold_unary
from fearless.ir.opdef import REGISTRY, Op
from fearless.ir.ops.arith import ARITH
from fearless.ir.ops.math import MATH

INTS = [dtypes.i8, dtypes.i16, dtypes.i32, dtypes.i64, dtypes.u8, dtypes.u16, dtypes.u32,
        dtypes.u64]
INT_BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX, Op.AND, Op.OR, Op.XOR,
              Op.SHL, Op.SHR]
FLOAT_BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX]
PREDS = ["eq", "ne", "lt", "le", "gt", "ge"]
_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, -2.5, 7.0, 1e-310, 5e-324, 1e308, -1e308, math.inf,
           -math.inf, math.nan]


def _eval(op):
    return REGISTRY[op].eval


def _wrap(value: int, d) -> int:
    lo, hi = dtypes.int_range(d)
    return (value - lo) % (hi - lo + 1) + lo


def _int_pairs(d, n=400):
    info = np.iinfo(d.numpy)
    edges = [v for v in (info.min, info.min + 1, -9, -1, 0, 1, 2, 3, 7, d.bits - 1, d.bits,
                         info.max - 1, info.max) if info.min <= v <= info.max]
    rng = np.random.default_rng(d.bits)
    a, b = (list(t) for t in zip(*itertools.product(edges, edges)))
    a += rng.integers(info.min, info.max, n, endpoint=True, dtype=d.numpy).tolist()
    b += rng.integers(max(info.min, -70), min(info.max, 70), n, endpoint=True).tolist()
    return np.array(a, d.numpy), np.array(b, d.numpy)


def test_the_scalar_ops_have_an_eval_and_the_cpu_backend_runs_exactly_those():
    scalar = ARITH | set(MATH)
    assert {n for n, d in REGISTRY.items() if d.eval is not None} == scalar
    assert set(cpu_ops.SCALAR) == scalar - {Op.CONSTANT}


@pytest.mark.parametrize("d", INTS, ids=str)
@pytest.mark.parametrize("name", INT_BINARY, ids=lambda op: op.base)
def test_python_ints_give_the_fixed_width_result_before_it_wraps(name, d):
    a, b = _int_pairs(d)
    ev = _eval(name)
    fixed = ev(d, {}, a, b).tolist()
    for x, y, got in zip(a.tolist(), b.tolist(), fixed):
        if name in (Op.SHL, Op.SHR) and not 0 <= y < d.bits:
            # the width decides: 0, or the sign of a signed >> (a negative amount is a huge
            # unsigned one); Python's shift has no width (and refuses a negative amount)
            assert got == (-1 if name is Op.SHR and x < 0 else 0), (name, x, y, got)
            continue
        try:
            exact = ev(None, {}, x, y)
        except ZeroDivisionError:  # Python has no quotient; the fixed width gives 0
            assert got == 0, (name, x, y)
            continue
        assert got == _wrap(exact, d), (name, x, y, got, exact)


@pytest.mark.parametrize("d", INTS, ids=str)
@pytest.mark.parametrize("name", [Op.NEG, Op.ABS, Op.NOT], ids=lambda op: op.base)
def test_python_ints_give_the_fixed_width_unary_result_before_it_wraps(name, d):
    a, _ = _int_pairs(d)
    fixed = _eval(name)(d, {}, a).tolist()
    for x, got in zip(a.tolist(), fixed):
        assert got == _wrap(_eval(name)(None, {}, x), d), (name, x, got)


def _same_float(x, y) -> bool:
    return (x != x and y != y) or (x == y and math.copysign(1, x) == math.copysign(1, y))


@pytest.mark.parametrize("name", FLOAT_BINARY + PREDS, ids=str)
def test_python_floats_give_the_f64_result_where_python_has_one(name):
    """Python's float operators are IEEE f64 and CPython's float_divmod, which NumPy's follow:
    so folding ``1.0 // 0.1`` or ``-5.0 % math.inf`` gives what the kernel computes."""
    a, b = (np.array(t) for t in zip(*itertools.product(_FLOATS, _FLOATS)))
    if name in PREDS:
        ev, attrs = REGISTRY[Op.CMP].eval, {"pred": name}
    else:
        ev, attrs = _eval(name), {}
    with np.errstate(all="ignore"):
        fixed = ev(dtypes.bool_ if name in PREDS else dtypes.f64, attrs, a, b).tolist()
    for x, y, got in zip(a.tolist(), b.tolist(), fixed):
        try:
            exact = ev(None, attrs, x, y)
        except ZeroDivisionError:
            continue  # a zero divisor: not folded, computed at run time
        assert _same_float(got, exact), (name, x, y, got, exact)


def test_folding_literals_is_the_ops_eval_on_python_numbers():
    value = lambda op, x, y: fold(op, Const(x), Const(y)).value  # noqa: E731
    assert (value(Op.FLOORDIV, -7, 2), value(Op.MOD, -7, 2), value(Op.MOD, 7, -2)) == (-4, 1, -1)
    assert value(Op.SHL, 1, 70) == 1 << 70 and value(Op.SHR, -8, 1) == -4  # no width
    assert value("lt", (1 << 53) + 1, 2.0 ** 53) is False  # Python's exact comparison
    assert value(Op.FLOORDIV, 1.0, 0.1) == 9.0  # CPython's float_divmod, as the kernel
    assert value(Op.POW, 3, 40) == 3 ** 40 and value(Op.POW, 2, -1) == 0.5  # Python's int power
    assert value(Op.POW, 2.0, 0.5) == math.sqrt(2.0)  # math.pow's eval: C's pow
    for op, x, y in [(Op.FLOORDIV, 7, 0), (Op.MOD, 7, 0), (Op.DIV, 1, 0), (Op.SHL, 1, -1),
                     (Op.MUL, 1e308, 10.0), (Op.POW, -8.0, 1 / 3), (Op.POW, 0, -1)]:
        assert fold(op, Const(x), Const(y)) is None, op  # no number: computed at run time
    # min/max fold by the op's minimumNumber/maximumNumber, which Python's min/max are not
    # (they depend on the order of a NaN or of two zeros)
    assert value(Op.MIN, math.nan, 1.0) == 1.0 and value(Op.MAX, 2.0, math.nan) == 2.0
    assert math.copysign(1, value(Op.MIN, 0.0, -0.0)) == -1
    assert math.copysign(1, value(Op.MAX, -0.0, 0.0)) == 1
    assert value(Op.MIN, 2, 1.5) == 1.5 and type(value(Op.MAX, True, False)) is int
    assert fold_unary(Op.NOT, Const(True)).value is False
    assert fold_unary(Op.NOT, Const(5)).value == -6
    assert fold_unary(Op.NEG, Const(True)).value == -1


def _atom(op, *parts, dtype="i64"):
    return (op, tuple(("const", p) for p in parts), dtype)


def test_the_proofs_evaluate_index_arithmetic_by_the_ops_eval():
    """Exact i64 values, as the kernel computes them; none where the kernel's value is not the
    exact one (a zero divisor, a shift past the width) and a refusal past i64."""
    model = Model(None, (4,))
    at = lambda atom: model._eval(atom, (0, 0), {})  # noqa: E731
    assert at(_atom(Op.SHR, -8, 1)) == -4  # an arithmetic shift (was left unknown)
    assert (at(_atom(Op.FLOORDIV, -7, 2)), at(_atom(Op.MOD, -7, 2))) == (-4, 1)
    assert at(_atom(Op.NEG, 5)) == -5 and at(_atom(Op.MAX, -3, 2)) == 2
    for atom in (_atom(Op.FLOORDIV, 7, 0), _atom(Op.SHL, 1, 64), _atom(Op.SHL, 1, -1),
                 _atom(Op.ADD, 1, 2, dtype="i32")):  # only i64 index arithmetic is evaluated
        assert at(atom) is None, atom
    with pytest.raises(Unproven, match="overflow 64 bits"):
        at(_atom(Op.SHL, 1, 63))
