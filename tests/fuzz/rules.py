"""The kernel language's typing rules, written again from the README and ``frontend/infer.py``.

The fuzzer types every expression it generates with these rules, independently of the compiler,
so a frontend that inserts the wrong conversion disagrees with the reference. A type is a
``DType`` (strong) or one of the weak markers below (a Python literal: it adapts to the other
operand, NumPy 2 / JAX rules).
"""
from __future__ import annotations

from fearless import dtypes
from fearless.dtypes import DType

WINT, WFLOAT, WBOOL = "weak int", "weak float", "weak bool"
WEAK = (WBOOL, WINT, WFLOAT)  # in join order
DEFAULT = {WBOOL: dtypes.bool_, WINT: dtypes.i64, WFLOAT: dtypes.f64}
SIGNED = {8: dtypes.i8, 16: dtypes.i16, 32: dtypes.i32, 64: dtypes.i64}
INTS = (dtypes.i8, dtypes.i16, dtypes.i32, dtypes.i64, dtypes.u8, dtypes.u16, dtypes.u32,
        dtypes.u64)
FLOATS = (dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.f64)
ALL = (dtypes.bool_, *INTS, *FLOATS)

BITWISE = ("and", "or", "xor", "shl", "shr")
NUMERIC = ("add", "sub", "mul", "floordiv", "mod", "min", "max")


class Invalid(Exception):
    """The language refuses this combination (the generator then picks another)."""


def is_weak(t) -> bool:
    return isinstance(t, str)


def weak_of(value) -> str:
    if isinstance(value, bool):
        return WBOOL
    return WINT if isinstance(value, int) else WFLOAT


def strong(t) -> DType:
    """The dtype a value of type ``t`` has once it is materialised on its own."""
    return DEFAULT[t] if is_weak(t) else t


def int_range(d: DType) -> tuple[int, int]:
    if d.is_bool:
        return 0, 1
    if d.is_signed:
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1


def promote(a: DType, b: DType) -> DType:
    """Two typed operands: bool < ints < floats; signed with unsigned widens; u64 with a signed
    type has no common type; f16 with bf16 is f32."""
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            return dtypes.f32 if a.bits == b.bits else (a if a.bits > b.bits else b)
        return a if a.is_float else b
    if a.is_signed == b.is_signed:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.is_signed else (b, a)
    if s.bits > u.bits:
        return s
    if u.bits == 64:
        raise Invalid(f"no common type for {a} and {b}")
    return SIGNED[2 * u.bits]


def promote_weak(d: DType, w: str) -> DType:
    """A typed operand with a weak literal: a float literal makes integers f64; a number makes
    bool i64 or f64; otherwise the typed side wins."""
    if w == WFLOAT and not d.is_float:
        return dtypes.f64
    if w != WBOOL and d.is_bool:
        return DEFAULT[w]
    return d


def common(ta, tb, op: str) -> DType:
    """The operand type of binary ``op`` on types ``ta``, ``tb`` (not both weak literals that
    fold; for those the caller folds with Python)."""
    if is_weak(ta) and is_weak(tb):
        ta = DEFAULT[ta]
    if is_weak(ta):
        ta, tb = tb, ta
    d = promote_weak(ta, tb) if is_weak(tb) else promote(ta, tb)
    if op in BITWISE and d.is_float:
        raise Invalid(f"bitwise {op} on {d}")
    if op in ("shl", "shr") and d.is_bool:
        return dtypes.i64
    if op in NUMERIC and d.is_bool:
        return dtypes.i64
    return d


def join(types) -> DType:
    """The one type of a variable (or conditional expression, or return slot) assigned values
    of ``types``, in the order the frontend sees them: strong types promote left to right, then
    each weak marker joins in; only weak markers give the widest one's default."""
    seen = list(dict.fromkeys(types))
    strongs = [t for t in seen if not is_weak(t)]
    weaks = [t for t in seen if is_weak(t)]
    if not strongs:
        return DEFAULT[max(weaks, key=WEAK.index)]
    d = strongs[0]
    for t in strongs[1:]:
        d = promote(d, t)
    for w in weaks:
        d = promote_weak(d, w)
    return d


def literal_fits(value, d: DType) -> bool:
    """Whether the weak literal ``value`` may become a constant of ``d`` (implicitly)."""
    if d.is_bool:
        return isinstance(value, bool)
    if d.is_float:
        return True
    if isinstance(value, float):
        return False
    lo, hi = int_range(d)
    return lo <= int(value) <= hi


def implicit_ok(src, dst: DType) -> bool:
    """Whether a value of type ``src`` may be assigned or stored into a ``dst`` slot: width may
    change and bool/int may become float, never float -> int or number -> bool."""
    if is_weak(src):
        return True  # the literal's value decides (literal_fits)
    if dst.is_bool:
        return src.is_bool
    return not (src.is_float and not dst.is_float)


def math_type(types) -> DType:
    """The dtype a math-module function computes in: floats keep theirs (two arguments
    promote first), anything else goes to f64."""
    if len(types) == 2:
        d = common(types[0], types[1], "math")
    else:
        d = strong(types[0])
    return d if d.is_float else dtypes.f64
