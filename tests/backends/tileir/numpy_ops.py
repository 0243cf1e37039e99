"""``mathlib.Ops`` on NumPy: the Tile IR recipes of math functions run on the host.

Each operation is the IR op's own eval at the work type (IEEE adds, multiplies, divisions,
correctly rounded square roots, log and sin), fma rounded once from the exact rational result,
and integer operations on the floats' bits with two's complement wrap-around: what a recipe
computes on the GPU, but for the error of Tile IR's ``log``, ``sin`` and ``atan2`` (CUDA's math
library), which the bounds of docs/semantics.md add.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from fearless import dtypes
from fearless.ir.opdef import REGISTRY, Op
from tests.numerics.reference import round_float


class NumpyOps:
    """``mathlib.Ops`` on NumPy arrays of one float type ``d`` (f32 or f64)."""

    def __init__(self, d):
        self.d = d
        self.int = np.int32 if d.bits == 32 else np.int64

    def _ev(self, op, *args, attrs=None):
        return np.asarray(REGISTRY[op].eval(self.d, attrs or {}, *args))

    def c(self, value):
        return np.asarray(dtypes.cast(value, self.d))

    def add(self, x, y):
        return self._ev(Op.ADD, x, y)

    def sub(self, x, y):
        return self._ev(Op.SUB, x, y)

    def mul(self, x, y):
        return self._ev(Op.MUL, x, y)

    def div(self, x, y):
        return self._ev(Op.DIV, x, y)

    def neg(self, x):
        return self._ev(Op.NEG, x)

    def abs(self, x):
        return self._ev(Op.FABS, x)

    def floor(self, x):
        return self._ev(Op.FLOOR, x)

    def log(self, x):
        return self._ev(Op.LOG, x)

    def sin(self, x):
        return self._ev(Op.SIN, x)

    def sqrt(self, x):
        return self._ev(Op.SQRT, x)

    def rem(self, x, y):
        return self._ev(Op.FMOD, x, y)

    def atan2(self, x, y):
        return self._ev(Op.ATAN2, x, y)

    def fma(self, x, y, z):
        """``x * y + z`` rounded once to ``d`` (from the exact rational value)."""
        x, y, z = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (x, y, z)))
        out = np.empty(x.shape, np.float64)
        for i, (a, b, c) in enumerate(zip(x.flat, y.flat, z.flat)):
            if all(map(math.isfinite, (a, b, c))):
                exact = Fraction(a) * Fraction(b) + Fraction(c)
                out.flat[i] = round_float(exact, self.d.name) if exact else \
                    (a * b + c)  # a zero keeps IEEE's sign rules
            else:
                out.flat[i] = a * b + c
        return out.astype(self.d.numpy)

    def select(self, cond, x, y):
        return np.asarray(np.where(cond, x, y))

    def cmp(self, pred, x, y):
        return np.asarray(REGISTRY[Op.CMP].eval(dtypes.bool_, {"pred": pred}, x, y))

    # integers of the float's width
    def ci(self, value):
        bits = self.d.bits
        value &= (1 << bits) - 1
        return np.asarray(value - (1 << bits) if value >> (bits - 1) else value, self.int)

    def bits(self, x):
        return np.asarray(x, self.d.numpy).view(self.int)

    def real(self, i):
        return np.asarray(i, self.int).view(self.d.numpy)

    def iadd(self, x, y):
        return np.asarray(x + y, self.int)

    def isub(self, x, y):
        return np.asarray(x - y, self.int)

    def imul(self, x, y):
        return np.asarray(x * y, self.int)

    def iand(self, x, y):
        return np.asarray(x & y, self.int)

    def ior(self, x, y):
        return np.asarray(x | y, self.int)

    def shl(self, x, k):
        return np.asarray(np.left_shift(x, k), self.int)

    def shr(self, x, k):
        return np.asarray(np.right_shift(x, k), self.int)

    def icmp(self, pred, x, y):
        return np.asarray(REGISTRY[Op.CMP].eval(dtypes.bool_, {"pred": pred}, x, y))

    def widen(self, n):
        return np.asarray(n, self.int)

    def itof(self, i):
        return np.asarray(i).astype(self.d.numpy)

    def to_int(self, x):
        return np.asarray(x).astype(self.int)


def run(recipe, d, *args):
    """``recipe`` on float arrays (rounded to ``d``) or i32 arrays; the result as f64."""
    args = [np.asarray(a, np.int32) if np.asarray(a).dtype.kind == "i" else
            dtypes.convert(np.asarray(a, np.float64), d) for a in args]
    with np.errstate(all="ignore"):
        return np.asarray(recipe(NumpyOps(d), d.bits, *args)).astype(np.float64)
