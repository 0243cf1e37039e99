"""Typed emission helpers between the AST visitor and the IR Builder.

Every expression the frontend evaluates becomes a *frontend value*: an IR ``Value`` (scalars,
ThreadIndex proofs, array parameters), a ``Const`` (folded at compile time), a ``Static`` Python
object or a ``TupleValue``. ``Emitter`` applies the typing rules of ``infer`` to such values and
emits the IR ops, inserting casts where promotion asks for them.
"""
from __future__ import annotations

from fearless import dtypes
from fearless.dtypes import DType
from fearless.frontend.infer import (Const, Static, TupleValue, TypingError, const_fits, fold,
                                     fold_unary, implicit_conversion_error, promote, promote_weak,
                                     weak_marker)
from fearless.ir import types as T
from fearless.ir.core import Builder, Value
from fearless.ir.opdef import REGISTRY, Op
from fearless.ir.ops.arith import INT_ONLY, INT_OR_BOOL, NUMERIC

_MAX_UNROLLED_POWER = 16


def describe(fv) -> str:
    if isinstance(fv, Value):
        return str(fv.type)
    if isinstance(fv, Const):
        return f"the constant {fv.value!r}"
    if isinstance(fv, TupleValue):
        return "a tuple"
    obj = fv.obj
    name = getattr(obj, "__name__", None)
    if name and callable(obj):  # functions, numpy's dispatchers and ufuncs, builtins, classes
        module = getattr(obj, "__module__", None) or type(obj).__module__ or ""
        module = "numpy" if module.startswith("numpy") else module
        return f"{name}()" if module == "builtins" else f"{module}.{name}"
    return f"{type(obj).__name__} {name or ''}".strip()


def constant_value(value, dtype: DType):
    """The attribute of an ``arith.constant`` of ``dtype`` for a Python number, converted by the
    rules of a cast (``dtypes.cast``): a bool, an int in range, or a float already rounded to
    ``dtype`` once, so that no backend rounds it again."""
    return dtypes.cast(value, dtype).item()


class Emitter:
    """Emits typed scalar arithmetic into ``builder``; raises TypingError on a rule violation."""

    def __init__(self, builder: Builder):
        self.b = builder

    # values ---------------------------------------------------------------------------------

    def constant(self, value, dtype: DType) -> Value:
        value = constant_value(value, dtype)
        return self.b.create(Op.CONSTANT, [], [T.Scalar(dtype)], {"value": value}).result

    def dtype_of(self, fv):
        """The DType of a scalar operand, or a weak marker for a weak Const."""
        if isinstance(fv, Const):
            return weak_marker(fv) if fv.weak else fv.dtype
        if isinstance(fv, Value):
            if isinstance(fv.type, T.ThreadIndex):
                return dtypes.i64
            if isinstance(fv.type, T.Scalar):
                return fv.type.dtype
        raise TypingError(f"expected a number, got {describe(fv)}")

    def scalar(self, fv, dtype: DType | None = None) -> Value:
        """``fv`` as an IR scalar Value, cast to ``dtype`` when given (an explicit cast)."""
        if isinstance(fv, Const):
            target = dtype or fv.dtype or dtypes.of_python_scalar(fv.value)
            if fv.weak and target.is_int and isinstance(fv.value, int):
                why = const_fits(fv, target)
                if why:  # NumPy 2 (NEP 50) refuses a Python int its partner's type cannot hold
                    raise TypingError(why, help="cast the other operand to a wider type, "
                                                "for example fl.i64(x)")
            return self.constant(fv.value, target)  # by a cast's rules
        if isinstance(fv, Value) and isinstance(fv.type, T.ThreadIndex):
            fv = self.b.create(Op.SIMT_INDEX_VALUE, [fv]).result
        if not (isinstance(fv, Value) and isinstance(fv.type, T.Scalar)):
            raise TypingError(f"expected a number, got {describe(fv)}")
        return fv if dtype is None else self.cast(fv, dtype)

    def cast(self, v: Value, dtype: DType) -> Value:
        if v.type.dtype is dtype:
            return v
        if dtype.is_bool:  # Python's bool(x): x != 0
            zero = self.constant(0, v.type.dtype)
            return self.b.create(Op.CMP, [v, zero], attrs={"pred": "ne"}).result
        return self.b.create(Op.CAST, [v], [T.Scalar(dtype)]).result

    def implicit(self, fv, target: T.Type, what: str) -> Value:
        """``fv`` converted for assignment to ``what`` of type ``target`` (implicit rules)."""
        if isinstance(target, T.ThreadIndex):
            if isinstance(fv, Value) and fv.type == target:
                return fv
            raise TypingError(f"{what} holds a ThreadIndex; it cannot be given {describe(fv)}")
        if isinstance(fv, Const):
            why = const_fits(fv, target.dtype) if fv.weak else implicit_conversion_error(
                fv.dtype, target.dtype)
            if why:
                raise TypingError(f"cannot assign {fv.value!r} to {what} ({target}): {why}")
            return self.constant(fv.value, target.dtype)
        v = self.scalar(fv)
        why = implicit_conversion_error(v.type.dtype, target.dtype)
        if why:
            raise TypingError(f"cannot assign to {what} ({target}): {why}")
        return self.cast(v, target.dtype)

    def truth(self, fv):
        """Python truthiness: a Const bool, or an IR bool Value."""
        if isinstance(fv, Const):
            return Const(bool(fv.value))
        if isinstance(fv, Static) and fv.obj is None:
            return Const(False)
        v = self.scalar(fv)
        return self.cast(v, dtypes.bool_)

    # arithmetic -----------------------------------------------------------------------------

    def common(self, a, b, op: Op) -> DType:
        """The operand type of op ``op`` on ``a`` and ``b`` (weak literals adapt)."""
        ta, tb = self.dtype_of(a), self.dtype_of(b)
        if isinstance(ta, str) and isinstance(tb, str):  # two weak constants that did not fold
            ta = dtypes.of_python_scalar(a.value)
        if isinstance(ta, str):
            ta, tb = tb, ta
        d = promote_weak(ta, tb) if isinstance(tb, str) else promote(ta, tb)
        if op in INT_ONLY | INT_OR_BOOL and d.is_float:
            raise TypingError(f"bitwise operator needs integers or bools, not {d}")
        if op in INT_ONLY and d.is_bool:
            d = dtypes.i64
        if op in NUMERIC and d.is_bool:
            d = dtypes.i64  # Python: True + True == 2
        return d

    def binary(self, op: Op, a, b):
        """``a <op> b`` for a binary op of ``arith`` (ops.arith.BINARY) or ``Op.POW``."""
        if isinstance(a, Const) and isinstance(b, Const) and a.weak and b.weak:
            folded = fold(op, a, b)
            if folded is not None:
                return folded
        if op is Op.POW:
            return self.power(a, b)
        d = self.common(a, b, op)
        if op is Op.DIV and not d.is_float:
            d = dtypes.f64
        va, vb = self.scalar(a, d), self.scalar(b, d)
        return self.b.create(op, [va, vb]).result

    def power(self, a, b):
        if isinstance(b, Const) and isinstance(b.value, int) and not isinstance(b.value, bool) \
                and 0 <= b.value <= _MAX_UNROLLED_POWER:
            d = self.common(a, b, Op.MUL)
            base = self.scalar(a, d)
            result = self.constant(1, d)
            for _ in range(b.value):  # x**n by repeated products: exact for integers
                result = self.b.create(Op.MUL, [result, base]).result
            return result
        d = self.common(a, b, Op.POW)
        if not d.is_float:
            raise TypingError("an integer power needs a constant exponent between 0 and 16",
                              help="convert the base to a float for a general power")
        return self.math(Op.POW, [a, b])

    def compare(self, pred: str, a, b):
        if isinstance(a, Const) and isinstance(b, Const) and a.weak and b.weak:
            return fold(pred, a, b)
        d = self.common(a, b, Op.CMP)
        for c in (a, b):  # x_u8 < 300 compares exactly (as NumPy 2 does) in a wider type
            if isinstance(c, Const) and c.weak and d.is_int and isinstance(c.value, int) \
                    and const_fits(c, d):
                d = promote(d, dtypes.i64)
        va, vb = self.scalar(a, d), self.scalar(b, d)
        return self.b.create(Op.CMP, [va, vb], attrs={"pred": pred}).result

    def unary(self, op: Op, a):
        """``op`` of ``a`` for ``Op.NEG``, ``Op.ABS`` and ``Op.NOT`` (``~``)."""
        if isinstance(a, Const) and a.weak:
            if op is Op.NOT and isinstance(a.value, float):
                raise TypingError(f"~ needs an integer or bool, not the float {a.value!r}")
            return fold_unary(op, a)
        v = self.scalar(a)
        if op in (Op.NEG, Op.ABS) and v.type.dtype.is_bool:
            v = self.cast(v, dtypes.i64)
        if op is Op.NOT and v.type.dtype.is_float:
            raise TypingError(f"~ needs an integer or bool, not {v.type.dtype}")
        return self.b.create(op, [v]).result

    def select(self, cond: Value, a, b):
        d = self.common(a, b, Op.SELECT)
        va, vb = self.scalar(a, d), self.scalar(b, d)
        return self.b.create(Op.SELECT, [cond, va, vb]).result

    def math(self, fn: Op, args: list, attrs: dict | None = None):
        """Math function ``fn``: its float operands in one float type (integers go to f64, a weak
        literal takes the other's type), an "i32" operand saturated to i32
        (``OpDef.operand_kinds``)."""
        kinds = REGISTRY[fn].operand_kinds or ("float",) * len(args)
        floats = [a for a, k in zip(args, kinds) if k == "float"]
        if len(floats) == 2:
            d = self.common(floats[0], floats[1], fn)
        else:
            d = self.dtype_of(floats[0])
            d = dtypes.f64 if isinstance(d, str) else d
        if not d.is_float:
            d = dtypes.f64
        values = [self.scalar(a, d) if k == "float" else self.saturated_i32(a, fn, i)
                  for i, (a, k) in enumerate(zip(args, kinds))]
        return self.b.create(fn, values, attrs=attrs).result

    def saturated_i32(self, fv, fn: Op, position: int):
        """The integer argument ``fv`` (a bool, any integer type, a literal) of math function
        ``fn`` as i32, clamped to its range; TypingError for anything else."""
        d = self.dtype_of(fv)
        if isinstance(fv, Const) and not isinstance(fv.value, int) or \
                not isinstance(fv, Const) and d.is_float:
            users = REGISTRY[fn].user_names
            name = ".".join(users[0]) if users else fn.base
            raise TypingError(f"argument {position + 1} of {name}() must be an integer, not "
                              f"{describe(fv)}", help="convert it with int(...)")
        if isinstance(fv, Const):
            return self.constant(min(max(fv.value, -2 ** 31), 2 ** 31 - 1), dtypes.i32)
        if d.bits > 32 or d.bits == 32 and not d.is_signed:
            if d.is_signed:
                fv = self.binary(Op.MAX, fv, Const(-2 ** 31))
            fv = self.binary(Op.MIN, fv, Const(2 ** 31 - 1))
        return self.cast(fv, dtypes.i32)
