"""Random inputs and poisoned outputs for generated kernels, and the comparison of results.

Inputs are never all zeros: integers mix small values with values from the whole range (so
arithmetic wraps), floats mix normals, small integers, fractions and a few large values, and
signed zeros. Outputs start poisoned, so an element no thread writes shows. ``Expected`` is
what the reference says an output must hold, element by element: a value, an error bound (0:
bit-exact) and whether the element is checked at all (its thread may have reached undefined
behaviour, or a decision its error bound could flip).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from fearless.dtypes import DType
from tests.fuzz import rules, scalar

POISON = {"bool": True, "f16": -999.0, "bf16": -999.0, "f32": -999.0, "f64": -999.0}


def poison_value(d: DType):
    if d.name in POISON:
        return POISON[d.name]
    lo, hi = rules.int_range(d)
    return scalar.wrap(0x5A5A5A5A5A5A5A5A, d) if d.is_signed else hi - 0x25


def random_values(rng: np.random.Generator, d: DType, shape) -> np.ndarray:
    """Random values of ``d`` (never all zero), as a NumPy array of that dtype."""
    n = int(np.prod(shape))
    if d.is_bool:
        a = rng.random(n) < 0.5
        a[rng.integers(n)] = True
        return a.reshape(shape)
    if d.is_int:
        lo, hi = rules.int_range(d)
        small = rng.integers(max(lo, -20), min(hi, 20), n, endpoint=True)
        wide = rng.integers(lo, hi, n, endpoint=True, dtype=np.uint64 if lo == 0 else np.int64)
        a = np.where(rng.random(n) < 0.7, small.astype(object), wide.astype(object))
        out = np.array([int(v) for v in a], dtype=d.numpy)
        if not out.any():
            out[0] = 1
        return out.reshape(shape)
    kind = rng.random(n)
    top = min(scalar.MAX_FINITE[d.name] / 4, 1e6)
    values = np.select(
        [kind < 0.45, kind < 0.65, kind < 0.8, kind < 0.9, kind < 0.95],
        [rng.standard_normal(n) * 10, rng.integers(-8, 9, n).astype(float),
         rng.uniform(-1, 1, n), rng.uniform(-top, top, n),
         rng.choice([0.0, -0.0, 0.5, 1.0, -1.0], n)],
        rng.standard_normal(n) * 1e-3)
    rounded = [scalar.fround(float(v), d) for v in values]
    if not any(rounded):
        rounded[0] = 1.0
    return np.array(rounded, dtype=np.float64).astype(d.numpy).reshape(shape)


def random_scalar(rng: np.random.Generator, d: DType):
    return random_values(rng, d, (1,))[0]


def to_python(a: np.ndarray) -> list:
    """Nested lists of Python bool/int/float (floats exact) of ``a``'s elements."""
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return a.astype(np.float64).tolist()
    return a.tolist()


def scalar_value(x):
    if isinstance(x, np.floating) or type(x).__name__ == "bfloat16":
        return float(x)
    return x.item()


@dataclass
class Expected:
    """The reference's verdict per output element (``values``, ``errors``, ``checked``), the
    tags of the operations behind each element, and counts of unchecked threads by reason."""

    values: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    checked: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    stats: Counter = field(default_factory=Counter)


@dataclass
class Mismatch:
    output: str
    index: tuple
    got: object
    want: object
    err: float
    tags: frozenset

    def __str__(self):
        bound = f" (allowed error {self.err:.3g})" if self.err else " (bit-exact)"
        tags = f" [ops: {', '.join(sorted(self.tags))}]" if self.tags else ""
        return f"{self.output}{list(self.index)}: got {self.got!r}, want {self.want!r}" \
               f"{bound}{tags}"


def compare(got: dict, exp: Expected, limit: int = 8) -> tuple[list[Mismatch], int]:
    """Elements of ``got`` (NumPy arrays by output name) that the reference rejects, and how
    many elements were checked."""
    out, checked = [], 0
    for name, want in exp.values.items():
        g = np.asarray(got[name])
        mask = exp.checked[name]
        checked += int(mask.sum())
        if want.dtype.kind == "f" or want.dtype.name == "bfloat16":
            g64, w64 = g.astype(np.float64), want.astype(np.float64)
            err = exp.errors[name]
            with np.errstate(invalid="ignore"):
                ok = (g64 == w64) | (np.isnan(g64) & np.isnan(w64)) | (
                    (err > 0) & (np.abs(g64 - w64) <= err))
        else:
            ok = g == want
        bad = np.argwhere(mask & ~ok)
        for idx in bad[:limit]:
            idx = tuple(int(k) for k in idx)
            out.append(Mismatch(name, idx, scalar_value(g[idx]), scalar_value(want[idx]),
                                float(exp.errors[name][idx]), exp.tags[name][idx]))
    return out, checked
