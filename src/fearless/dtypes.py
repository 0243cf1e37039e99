"""The dtype table: one row per element type, read by every layer.

Each DType knows its NumPy dtype (bfloat16 comes from ml_dtypes, since NumPy has none), its kind
(bool, signed int, unsigned int, float), its width, and its LLVM spelling. Backends never keep a
dtype table of their own; they read these rows.

DType objects are also what users write in annotations (``fl.f32``) and call as casts inside a
kernel (``fl.f32(x)``); called on the host they return a NumPy scalar of that type.

``convert`` and ``cast`` are the language's one numeric conversion (docs/semantics.md): every
backend's casts, constants, scalar arguments and host-side dtype conversions go through them or
are tested against them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union

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
    itemsize: int = field(init=False, repr=False)  # read on every launch: a plain attribute

    def __post_init__(self):
        object.__setattr__(self, "itemsize", max(1, self.bits // 8))

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self.name]

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
        """Host-side cast to a NumPy scalar of this dtype, by the rules of a cast inside a kernel
        (``cast``): integers wrap, floats round once to nearest even, float -> int saturates."""
        return cast(value, self)

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


# What ``coerce`` takes: a DType, a name ("f32"), a Python or NumPy type (``float``,
# ``np.float32``; also how a type checker sees ``fl.f32``, see fearless.simt.views), a NumPy dtype.
DTypeLike = Union[DType, str, type, np.dtype]


def coerce(value: DTypeLike) -> DType:
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


# Conversions ---------------------------------------------------------------------------------
# NumPy's own casts round once to nearest even except into bf16: ml_dtypes converts f64 and wide
# integers to bf16 through f32, two roundings, so a value just above a bf16 halfway point can round
# down. Rounding the f32 step to odd instead (truncate, then set the last bit if anything was
# dropped) makes the second rounding exact, since f32 keeps more than 8 + 1 bits of bf16's
# significand (S. Boldo, G. Melquiond, "Emulation of FMA and correctly rounded sums: proved
# algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).

def convert(values, dst: DType) -> np.ndarray:
    """``values`` (a NumPy array or scalar of a fearless dtype) converted to ``dst``, elementwise.

    The rules of a cast inside a kernel, on every backend (docs/semantics.md):
    * to bool: ``x != 0`` (NaN is True);
    * integer -> integer: two's complement wrap-around;
    * float -> integer: truncate toward zero, saturate at the type's limits, NaN -> 0;
    * -> float: rounded once, to nearest with ties to even; past the largest finite value +-inf.
    Returns an array of ``dst.numpy`` of the same shape.
    """
    a = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(_convert(a, a.dtype, dst))  # 0-d NumPy arithmetic gives scalars


def _convert(a: np.ndarray, src: np.dtype, dst: DType):
    if dst.is_bool:
        return a != 0
    if dst.is_int:
        return _float_to_int(a, dst) if _is_float(src) else a.astype(dst.numpy)
    if dst is not bf16 or src == _NUMPY["bf16"]:
        return a.astype(dst.numpy)
    if src.kind in "iu" and src.itemsize == 8:
        return _f64_to_bf16(_wide_int_to_f64_odd(a))
    if _is_float(src) and src.itemsize == 8 or src.kind in "iu" and src.itemsize == 4:
        return _f64_to_bf16(a.astype(np.float64))
    return a.astype(np.float32).astype(dst.numpy)  # exact in f32, then one rounding


def cast(value, dst: DType) -> np.generic:
    """One host value (a Python or NumPy number; Python ints of any size) as a NumPy scalar of
    ``dst``, by the rules of ``convert``."""
    if type(value) is float and dst.is_float and dst is not bf16 and abs(value) <= _LARGEST[dst]:
        # the launch path's common case: NumPy's own f64 -> f16/f32/f64 rounds once (bf16 does
        # not: ml_dtypes goes through f32); larger values (and NaN) take the path below, which
        # turns an overflow to +-inf without NumPy's warning
        return dst.numpy.type(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
        if dst.is_bool:
            return np.bool_(value != 0)
        if dst.is_int:  # wrap, as an integer conversion does
            value &= (1 << dst.bits) - 1
            if dst.is_signed and value >> (dst.bits - 1):
                value -= 1 << dst.bits
            return dst.numpy.type(value)
        if dst is f64:
            value = np.float64(_int_to_float(value))
        else:  # rounded to odd at 53 bits, so the one rounding to dst below stays exact
            value = np.float64(_int_to_float(_odd_to_bits(value, 53)))
    elif isinstance(value, int) and not isinstance(value, bool):
        value = np.int64(value) if value < 2**63 else np.uint64(value)
    return convert(np.asarray(value), dst)[()]


_LARGEST = {f16: 65504.0, f32: float(np.finfo(np.float32).max), f64: float("inf")}


def float_bits(value, dst: DType) -> int:
    """The IEEE bit pattern of ``value`` rounded once to float type ``dst`` (``cast``)."""
    return int(np.asarray(cast(value, dst)).view(f"u{dst.itemsize}"))


def _is_float(d: np.dtype) -> bool:
    return d.kind == "f" or d == _NUMPY["bf16"]


def _float_to_int(a: np.ndarray, dst: DType) -> np.ndarray:
    info = np.iinfo(dst.numpy)
    x = a.astype(np.float64)
    # float(info.max) rounds up to 2**bits where it is not exact: x >= it is out of range
    hi, lo, nan = x >= float(info.max), x <= float(info.min), np.isnan(x)
    out = np.trunc(np.where(hi | lo | nan, 0.0, x)).astype(dst.numpy)
    out = np.where(hi, np.asarray(info.max, dst.numpy), out)
    return np.where(lo, np.asarray(info.min, dst.numpy), out)


def _f64_to_bf16(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    back = f.astype(np.float64)
    inexact = (back != x) & ~np.isnan(x)
    bits = f.view(np.uint32) - (inexact & (np.abs(back) > np.abs(x))).astype(np.uint32)
    bits |= inexact.astype(np.uint32)  # truncated toward zero, then the sticky last bit
    return bits.view(np.float32).astype(_NUMPY["bf16"])


def _wide_int_to_f64_odd(a: np.ndarray) -> np.ndarray:
    """64-bit integers as f64, rounded to odd (exact when they fit 53 bits)."""
    negative = a < 0
    mag = a.view(np.uint64)
    if a.dtype.kind == "i":
        mag = np.where(negative, ~mag + np.uint64(1), mag)  # |INT_MIN| = 2**63 stays exact
    # the bit length, or one more when the f64 rounding carried into the next power of two
    length = np.frexp(mag.astype(np.float64))[1]
    shift = np.maximum(length - 53, 0).astype(np.uint64)
    dropped = mag & ((np.uint64(1) << shift) - np.uint64(1))
    kept = (mag >> shift) | (dropped != 0).astype(np.uint64)
    out = np.ldexp(kept.astype(np.float64), shift.astype(np.int64))
    return np.where(negative, -out, out)


def _odd_to_bits(value: int, bits: int) -> int:
    """``value`` rounded to odd at ``bits`` significant bits (a Python int)."""
    shift = max(abs(value).bit_length() - bits, 0)
    kept = abs(value) >> shift
    if kept << shift != abs(value):
        kept |= 1
    return (kept << shift) * (1 if value >= 0 else -1)


def _int_to_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")
