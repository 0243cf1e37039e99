"""Elementwise arithmetic: constants, binary and unary arithmetic, comparisons, casts, select.

Operands are scalars or, in tile kernels, tiles of one static shape (the op applies to every
element; a tile constant is a splat). Binary ops need operands of one type (the frontend inserts ``arith.cast`` by the promotion
rules first). Integer division and modulo follow Python (floor) semantics; ``arith.div`` is true
division and only takes floats; ``arith.shr`` is arithmetic for signed and logical for unsigned.
"""
from __future__ import annotations

from fearless.ir.opdef import all_of, define, like_first
from fearless.dtypes import bool_, cast, int_range
from fearless.ir.types import BOOL, Scalar, Tile

BINARY = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max",
          "and", "or", "xor", "shl", "shr")
UNARY = ("neg", "not", "abs")
PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
_INT_ONLY = {"shl", "shr"}
_INT_OR_BOOL = {"and", "or", "xor"}
_NUMERIC = {"add", "sub", "mul", "floordiv", "mod", "min", "max"}


def _scalar_operands(op):
    for v in op.operands:
        if not isinstance(v.type, (Scalar, Tile)):
            return f"operand of type {v.type} is neither a scalar nor a tile"
    return None


def bool_like(t) -> Scalar | Tile:
    """The bool type of ``t``'s shape: BOOL for a scalar, a bool tile for a tile."""
    return Tile(bool_, t.shape) if isinstance(t, Tile) else BOOL


def _same_shape(a, b) -> bool:
    return getattr(a, "shape", None) == getattr(b, "shape", None)


def _binary_types(name):
    def check(op):
        a, b = op.operands
        if a.type != b.type:  # the result's type is the rule's (_same)
            return f"operand types differ: {a.type}, {b.type}"
        d = a.type.dtype
        if name in _INT_ONLY and not d.is_int:
            return f"needs integers, got {d}"
        if name in _INT_OR_BOOL and d.is_float:
            return f"needs integers or bools, got {d}"
        if name == "div" and not d.is_float:
            return f"true division needs floats, got {d}"
        if name in _NUMERIC and d.is_bool:
            return f"needs numbers, got {d}"
        return None
    return check


for _name in BINARY:
    define(f"arith.{_name}", f"elementwise {_name} of two scalars of one type",
           all_of(_scalar_operands, _binary_types(_name)), result=like_first, operands=2, results=1)


def _unary_types(name):
    def check(op):
        (a,) = op.operands
        if name in ("neg", "abs") and a.type.dtype.is_bool:
            return f"{name} needs a number"
        if name == "not" and a.type.dtype.is_float:
            return "bitwise/logical not needs an integer or bool"
        return None
    return check


for _name in UNARY:
    define(f"arith.{_name}", f"{_name} of a scalar",
           all_of(_scalar_operands, _unary_types(_name)), result=like_first, operands=1, results=1)


def _cmp(op):
    a, b = op.operands
    if a.type != b.type:
        return f"compares different types {a.type} and {b.type}"
    if op.attrs.get("pred") not in PREDICATES:
        return f"unknown predicate {op.attrs.get('pred')!r}"
    return None


define("arith.cmp", "compare two scalars of one type; attr pred in eq/ne/lt/le/gt/ge",
       all_of(_scalar_operands, _cmp), result=lambda ts, attrs: [bool_like(ts[0])],
       operands=2, results=1)


def _constant(op):
    t = op.result.type
    if not isinstance(t, (Scalar, Tile)):
        return "constant must be a scalar or a (splat) tile"
    value, d = op.attrs.get("value"), t.dtype
    python_type = bool if d.is_bool else int if d.is_int else float
    if type(value) is not python_type:
        return f"constant value {value!r} of a {d} constant is not a Python {python_type.__name__}"
    if d.is_int:
        lo, hi = int_range(d)
        return None if lo <= value <= hi else f"constant {value} does not fit {d}"
    if d.is_float and value == value and float(cast(value, d)) != value:
        return f"constant {value!r} is not a {d} value (round it once: dtypes.cast)"
    return None


define("arith.constant", "a scalar or splat-tile constant; attr value: the Python bool, int or "
       "float of the dtype (in range, exactly representable), which every backend emits as is",
       _constant, operands=0, results=1)

define("arith.cast", "convert a scalar or tile to the result's element type (numeric conversion)",
       all_of(_scalar_operands,
              lambda op: None if type(op.result.type) is type(op.operands[0].type)
              and _same_shape(op.result.type, op.operands[0].type) else "result changes shape"),
       operands=1, results=1)


def _select(op):
    c, a, b = op.operands
    if c.type != bool_like(a.type):
        return "condition must be bool (of the choices' shape)"
    if a.type != b.type:
        return "both choices need one type"
    return None


define("arith.select", "cond ? a : b, evaluating both",
       all_of(_scalar_operands, _select),
       result=lambda ts, attrs: [ts[1]], operands=3, results=1)
