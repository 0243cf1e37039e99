"""The dtype table: one row per element type, read by every layer.

Each DType knows its NumPy dtype (bfloat16 comes from ml_dtypes, since NumPy has none), its kind
(bool, signed int, unsigned int, float), its width, and its LLVM spelling. Backends never keep a
dtype table of their own; they read these rows.

DType objects are also what users write in annotations (``fl.f32``) and call as casts inside a
kernel (``fl.f32(x)``); called on the host they return a NumPy scalar of that type.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import ml_dtypes
import numpy as np


class Kind(Enum):
    BOOL = "bool"
    INT = "int"
    UINT = "uint"
    FLOAT = "float"


@dataclass(frozen=True, eq=False)
class DType:
    """An element type. ``bits`` is the storage width; ``itemsize`` is in bytes."""

    name: str
    kind: Kind
    bits: int
    np_name: str

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self.name]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind is Kind.FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind in (Kind.INT, Kind.UINT)

    @property
    def is_signed(self) -> bool:
        return self.kind is Kind.INT

    @property
    def is_bool(self) -> bool:
        return self.kind is Kind.BOOL

    def __repr__(self) -> str:
        return f"fearless.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __call__(self, value):
        """Host-side cast to a NumPy scalar of this dtype (inside a kernel: a value cast)."""
        return self.numpy.type(value)

    def __reduce__(self):
        return (from_name, (self.name,))


bool_ = DType("bool", Kind.BOOL, 8, "bool")
i8 = DType("i8", Kind.INT, 8, "int8")
i16 = DType("i16", Kind.INT, 16, "int16")
i32 = DType("i32", Kind.INT, 32, "int32")
i64 = DType("i64", Kind.INT, 64, "int64")
u8 = DType("u8", Kind.UINT, 8, "uint8")
u16 = DType("u16", Kind.UINT, 16, "uint16")
u32 = DType("u32", Kind.UINT, 32, "uint32")
u64 = DType("u64", Kind.UINT, 64, "uint64")
f16 = DType("f16", Kind.FLOAT, 16, "float16")
bf16 = DType("bf16", Kind.FLOAT, 16, "bfloat16")
f32 = DType("f32", Kind.FLOAT, 32, "float32")
f64 = DType("f64", Kind.FLOAT, 64, "float64")

ALL: tuple[DType, ...] = (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64)
_BY_NAME = {d.name: d for d in ALL}
_NUMPY = {d.name: (np.dtype(ml_dtypes.bfloat16) if d is bf16 else np.dtype(d.np_name)) for d in ALL}
_BY_NUMPY = {_NUMPY[d.name]: d for d in ALL}


def from_name(name: str) -> DType:
    """The DType called ``name`` (``"f32"``, ``"bool"``...). Raises KeyError for an unknown name."""
    return _BY_NAME[name]


def from_numpy(dtype) -> DType:
    """The DType for a NumPy dtype (or anything ``np.dtype()`` accepts).

    Raises TypeError for dtypes fearless does not support (complex, strings, objects...).
    """
    try:
        d = np.dtype(dtype)
        if not d.isnative:
            raise TypeError(f"dtype {d!r} has non-native byte order; convert first, for example "
                            f"a.astype(a.dtype.newbyteorder('='))")
        return _BY_NUMPY[d]
    except (KeyError, ValueError):
        raise TypeError(f"dtype {dtype!r} is not supported; supported: "
                        + ", ".join(d.name for d in ALL)) from None


def of_python_scalar(value) -> DType:
    """The default dtype of a host scalar: bool -> bool, int -> i64, float -> f64, NumPy -> its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, np.generic):
        return from_numpy(value.dtype)
    if isinstance(value, int):
        return i64
    if isinstance(value, float):
        return f64
    raise TypeError(f"{type(value).__name__} is not a scalar fearless can pass to a kernel")


def coerce(value):
    """Turn a user's dtype spec (a DType, a NumPy dtype, ``float``, ``"f32"``...) into a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if value is float:
        return f64
    if value is int:
        return i64
    if value is bool:
        return bool_
    return from_numpy(value)


def int_range(d: DType) -> tuple[int, int]:
    """The smallest and largest value of the integer dtype ``d``."""
    info = np.iinfo(d.numpy)
    return int(info.min), int(info.max)


def round_to(value, d: DType) -> float:
    """The float of dtype ``d`` nearest the Python int or float ``value``: one rounding of the
    exact value, ties to even, subnormals kept, ±inf past the largest finite; NaN and ±inf stay.

    Going through NumPy would round twice for some inputs (a huge int through f64, f64 through
    f32 for bfloat16 in ml_dtypes), so compile-time constants are rounded here, exactly.
    Raises ValueError when ``d`` is not a float type.
    """
    if not d.is_float:
        raise ValueError(f"round_to needs a float dtype, not {d}")
    if isinstance(value, float) and not math.isfinite(value):
        return value
    exact = Fraction(value)
    if exact == 0:
        return math.copysign(0.0, float(value))
    info = ml_dtypes.finfo(d.numpy)
    magnitude = abs(exact)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1  # now 2**exponent <= |value| < 2**(exponent + 1)
    quantum = Fraction(2) ** (max(exponent, info.minexp) - info.nmant)
    rounded = round(exact / quantum) * quantum  # round() of a Fraction: ties to even
    if abs(rounded) > Fraction(float(info.max)):
        return math.copysign(math.inf, rounded)
    return float(rounded)
