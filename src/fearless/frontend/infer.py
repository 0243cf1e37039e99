"""Typing rules of the kernel language: compile-time values, promotion, implicit conversion.

Python number literals are *weak*: they take the type of the other operand (``x * 2.0`` stays
f32 for an f32 ``x``), the rule of NumPy 2 (NEP 50) and JAX. Between typed operands:

* bool with anything -> the other type
* signed with signed, unsigned with unsigned -> the wider
* signed (s bits) with unsigned (u bits) -> signed s if s > u, else signed 2u; with u64 it is a
  CompileError (no exact common type; cast one side)
* integer with float F -> F (like Triton and JAX, so f32 code stays f32 on the GPU)
* float with float -> the wider; f16 with bf16 -> f32
* a weak float with an integer type -> f64 (Python's float); weak alone: int -> i64, float -> f64

``/`` is true division (integers go to f64 first); ``//`` and ``%`` follow Python's floor rules.
Implicit conversions (assigning a variable, storing an array element) may change width and go
from bool/int to float, but never float -> int or number -> bool: that needs an explicit cast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fearless import dtypes
from fearless.dtypes import DType, Kind, int_range
from fearless.ir import types as T
from fearless.ir.opdef import REGISTRY, Op


class TypingError(Exception):
    """A typing rule failed; the frontend turns it into a CompileError with a span."""

    def __init__(self, message: str, help: str | None = None):
        super().__init__(message)
        self.help = help


@dataclass(frozen=True)
class Const:
    """A compile-time scalar. ``dtype`` None means a weak Python number."""

    value: Any
    dtype: DType | None = None

    @property
    def weak(self) -> bool:
        return self.dtype is None

    def python_kind(self) -> str:
        if isinstance(self.value, bool):
            return "bool"
        return "int" if isinstance(self.value, int) else "float"


@dataclass(frozen=True)
class Static:
    """A compile-time Python object: a module, a stub, a dtype, a device function, a builtin."""

    obj: Any


@dataclass(frozen=True)
class TupleValue:
    items: tuple


# Weak type markers, used when unifying the types a variable is assigned over a function.
WEAK_BOOL, WEAK_INT, WEAK_FLOAT = "weak bool", "weak int", "weak float"
_WEAK_ORDER = {WEAK_BOOL: 0, WEAK_INT: 1, WEAK_FLOAT: 2}
_DEFAULT = {WEAK_BOOL: dtypes.bool_, WEAK_INT: dtypes.i64, WEAK_FLOAT: dtypes.f64}
_SIGNED = {8: dtypes.i8, 16: dtypes.i16, 32: dtypes.i32, 64: dtypes.i64}


def weak_marker(c: Const) -> str:
    return {"bool": WEAK_BOOL, "int": WEAK_INT, "float": WEAK_FLOAT}[c.python_kind()]


def promote(a: DType, b: DType) -> DType:
    """The common type of two typed operands (see the module docstring). Raises TypingError."""
    if a is b:
        return a
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if a.bits == b.bits:  # f16 with bf16
                return dtypes.f32
            return a if a.bits > b.bits else b
        return a if a.is_float else b
    if a.kind is b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.kind is Kind.INT else (b, a)
    if s.bits > u.bits:
        return s
    if u.bits < 64:
        return _SIGNED[2 * u.bits]
    raise TypingError(f"no integer type holds both {a} and {b}",
                      help="cast one operand explicitly, for example fl.i64(x)")


def promote_weak(strong: DType, marker: str) -> DType:
    """The type of a typed operand combined with a weak literal of kind ``marker``."""
    if marker == WEAK_FLOAT and not strong.is_float:
        return dtypes.f64
    if marker != WEAK_BOOL and strong.is_bool:
        return _DEFAULT[marker]
    return strong


def join(types) -> T.Type:
    """The one type a variable gets from all the types assigned to it over the function.

    Members are IR types or weak markers. ThreadIndex values joined with anything else become
    i64 (the variable then holds a plain integer). Raises TypingError.
    """
    types = list(dict.fromkeys(types))
    tids = [t for t in types if isinstance(t, T.ThreadIndex)]
    if tids and len(types) == 1:
        return tids[0]
    types = [T.INDEX if isinstance(t, T.ThreadIndex) else t for t in types]
    tiles = [t for t in types if isinstance(t, T.Tile)]
    if tiles:
        if len(types) == 1:
            return tiles[0]
        other = next(t for t in types if t != tiles[0])
        other = f"a {other} number" if isinstance(other, str) else str(other)
        raise TypingError(f"holds {tiles[0]} and {other}; a variable keeps one tile type",
                          help="start it with a tile of the final shape and dtype, for example "
                               "ft.zeros(shape, f32), and .astype() where the dtype changes")
    strong = [t for t in types if isinstance(t, T.Scalar)]
    others = [t for t in types if not isinstance(t, (T.Scalar, str))]
    if others:
        raise TypingError(f"a variable cannot hold {others[0]}")
    weak = [t for t in types if isinstance(t, str)]
    if strong:
        d = strong[0].dtype
        for t in strong[1:]:
            d = promote(d, t.dtype)
        for w in weak:
            d = promote_weak(d, w)
        return T.Scalar(d)
    return T.Scalar(_DEFAULT[max(weak, key=_WEAK_ORDER.__getitem__)])


def _a(d: DType) -> str:
    return f"{'an' if d.name[0] in 'aeiou' else 'a'} {d}"


def implicit_conversion_error(src: DType, dst: DType) -> str | None:
    """Why ``src`` may not silently become ``dst``, or None when it may."""
    if src is dst:
        return None
    if dst.is_bool and not src.is_bool:
        return f"{_a(src)} value does not silently become bool; compare it (x != 0)"
    if src.is_float and not dst.is_float:
        return (f"{_a(src)} value does not silently become {dst}; "
                f"cast it explicitly with fl.{dst.name}(x)")
    return None


def const_fits(c: Const, dst: DType) -> str | None:
    """Why the literal ``c`` cannot be a ``dst`` constant, or None."""
    v = c.value
    if dst.is_bool:
        return None if isinstance(v, bool) else f"{v!r} is not a bool"
    if dst.is_int:
        if isinstance(v, float):
            return f"{v!r} is not an integer; {dst} needs one"
        lo, hi = int_range(dst)
        return None if lo <= int(v) <= hi else f"{v} does not fit in {dst}"
    return None


def widened(old: dict, new: dict) -> dict:
    """Variable types: every key of `old` and `new`, of the join of its types in both where
    they join (the typing stage's fixpoint, once it must only widen: frontend/typing.py)."""
    out = {**old, **new}
    for key, t in old.items():
        if key in new and new[key] != t:
            try:
                out[key] = join([t, new[key]])
            except TypingError:
                pass
    return out


# Constant folding: the ops' own semantics on Python numbers ------------------------------------

_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")

# Python's ints have no bound, but a literal must end up in 64 bits: a fold past this many bits
# (``1 << 10**12`` would take the compiler minutes and gigabytes) is refused, not attempted
FOLD_BITS = 1024


def _evaluate(op: Op | str, x, y):
    """``x <op> y`` by the op's ``OpDef.eval`` on Python numbers (ints of any size, floats as
    f64). A power of two ints is Python's, the exact repeated product the language defines
    ``x ** n`` as; other powers are ``math.pow``'s."""
    if op in _PREDICATES:
        return REGISTRY[Op.CMP].eval(None, {"pred": op}, x, y)
    if op is Op.POW:
        if isinstance(x, int) and isinstance(y, int):
            return x ** y
        return REGISTRY[Op.POW].eval(None, {}, float(x), float(y))
    return REGISTRY[op].eval(None, {}, x, y)


def fold(op: Op | str, a: Const, b: Const) -> Const | None:
    """Fold ``a <op> b`` of two weak constants, ``op`` a binary Op or a comparison predicate
    ("lt", ...), by Python's numbers and the ops' semantics; None where there is no
    number to fold to (a zero divisor, a negative shift, an infinity from finite operands): the
    op then runs, typed, at run time. Raises TypingError for an integer ``<<`` or ``**`` whose
    result passes FOLD_BITS bits."""
    x, y = a.value, b.value
    if op in (Op.SHL, Op.POW) and all(isinstance(v, int) for v in (x, y)) and y > 0 and x and \
            (abs(x).bit_length() + y if op is Op.SHL else
             y * math.log2(abs(x))) > FOLD_BITS:
        raise TypingError(f"{x} {'<<' if op is Op.SHL else '**'} {y} has more than {FOLD_BITS} "
                          "bits; a literal must fit in 64 bits")
    try:
        value = _evaluate(op, x, y)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError):
        return None
    # the unfolded op's type: min(2, 1.5) a float, max(True, False) an int
    if op in (Op.MIN, Op.MAX):
        value = float(value) if any(isinstance(v, float) for v in (x, y)) else int(value)
    if isinstance(value, float) and not math.isfinite(value) and math.isfinite(float(x)) and \
            math.isfinite(float(y)):
        return None
    return Const(value)


def fold_unary(op: Op, a: Const) -> Const:
    """``-x``, ``abs(x)`` or ``~x`` of a weak constant, by the op's eval (``~True`` is False)."""
    return Const(REGISTRY[op].eval(None, {}, a.value))
