"""The dtype table: one row per element type, read by every layer.

Each DType knows its NumPy dtype (bfloat16 comes from ml_dtypes, since NumPy has none), its kind
(bool, signed int, unsigned int, float), its width, and its LLVM spelling. Backends never keep a
dtype table of their own; they read these rows.

DType objects are also what users write in annotations (``fl.f32``) and call as casts inside a
kernel (``fl.f32(x)``); called on the host they return a NumPy scalar of that type.
"""
from __future__ import annotations

from dataclasses import dataclass
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
