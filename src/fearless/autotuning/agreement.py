"""Whether a tuning's configs compute the same values (``ft.autotune``/``fl.autotune`` with
``compare=True``): each config whose trial passed is compared, as its trial ends, with the
first one's outputs (host arrays), so the tuner keeps one set of outputs, not one per config.

The comparison runs in slices of ``SLICE`` elements, in float32 for outputs of 32 bits or
fewer (exact for f16, bf16 and f32 values; its rounding is below 2^-23 of the tolerance) and
float64 for wider ones. Why: the whole-array float64 form took about 5 s for each config of a
8192^2 f16 output on a 2-core host, and its temporaries were several times the output.
"""
from __future__ import annotations

import numpy as np

from fearless.errors import AutotuneError

SLICE = 1 << 20   # elements per step: a slice's temporaries stay in the CPU's caches


def default_rtol(dtype: np.dtype) -> float:
    """The comparison's default tolerance for a float output of ``dtype``: 1e-2 for f16 (20
    units of its 2^-11 rounding), 2^-5 for bf16 (8 units of its 2^-8: two correct flash
    attention configs, probabilities rounded to bf16 in blocks of 64 or of 128 keys, differed by
    2.7 units of (|value| + the mean magnitude) on the H200, while a config off by 4% is still
    caught), 1e-5 for wider floats."""
    if dtype.itemsize > 2:
        return 1e-5
    return 2.0 ** -5 if dtype.name == "bfloat16" else 1e-2


def _work(dtype: np.dtype):
    return np.float64 if dtype.itemsize > 4 else np.float32


def mean_magnitude(want: np.ndarray) -> float:
    """The mean |value| of the finite elements of a float array (0.0 when none is finite)."""
    flat, work = want.reshape(-1), _work(want.dtype)
    total, count = 0.0, 0
    for s in range(0, flat.size, SLICE):
        w = flat[s:s + SLICE].astype(work)
        finite = np.isfinite(w)
        total += float(np.abs(w[finite]).sum(dtype=np.float64))
        count += int(finite.sum())
    return total / count if count else 0.0


def _first_bad(got: np.ndarray, want: np.ndarray, r: float, mean: float) -> int | None:
    """The first flat index where ``got`` is not within r x (|want| + mean) of ``want`` (NaN
    matches NaN, an infinity only itself), or None."""
    g_flat, w_flat, work = got.reshape(-1), want.reshape(-1), _work(got.dtype)
    for s in range(0, g_flat.size, SLICE):
        g, w = g_flat[s:s + SLICE].astype(work), w_flat[s:s + SLICE].astype(work)
        with np.errstate(invalid="ignore", over="ignore"):   # inf - inf: NaN, not close
            # an infinite reference bounds nothing: only itself matches it
            close = (np.abs(g - w) <= r * (np.abs(w) + mean)) & np.isfinite(w)
        bad = ~(close | (np.isnan(g) & np.isnan(w)) | (g == w))
        if bad.any():
            return s + int(np.flatnonzero(bad)[0])
    return None


def differs(results: dict, reference: dict, rtol, means: dict | None = None) -> str | None:
    """Why ``results`` ({name: host array}) differ from ``reference`` (the same names), or
    None: integer and bool outputs exactly, float ones within rtol x (|value| + the mean
    |value| of the reference's finite elements), rtol None: ``default_rtol``. ``means``:
    {name: that mean} when known (``mean_magnitude``)."""
    for name, got in results.items():
        want = reference[name]
        if got.dtype.kind in "biu":
            bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
            k = int(bad[0]) if bad.size else None
            tol = "exactly"
        else:
            r = rtol if rtol is not None else default_rtol(got.dtype)
            mean = means[name] if means is not None else mean_magnitude(want)
            k = _first_bad(got, want, r, mean)
            tol = f"within {r} x (|value| + {mean:.3g})"
        if k is not None:
            return (f"'{name}' element {k}: {got.reshape(-1)[k].item()!r} against "
                    f"{want.reshape(-1)[k].item()!r} (compared {tol})")
    return None


class Agreement:
    """The configs' outputs, compared as each trial ends with the first's (``add``); the
    first difference is raised by ``check`` (after the timing, so the report stays whole)."""

    def __init__(self, tuned):
        self.tuned = tuned
        self.first: int | None = None
        self.reference: dict | None = None
        self.means: dict = {}
        self.mismatch: tuple[int, str] | None = None

    def add(self, n: int, outputs: dict) -> None:
        """Config n's outputs ({name: host array}); the first config's are kept."""
        if not self.tuned.compare or self.mismatch is not None:
            return
        if self.reference is None:
            self.first, self.reference = n, outputs
            self.means = {name: mean_magnitude(a) for name, a in outputs.items()
                          if a.dtype.kind not in "biu"}
            return
        why = differs(outputs, self.reference, self.tuned.rtol, self.means)
        if why:
            self.mismatch = (n, why)

    def check(self) -> None:
        """Raise AutotuneError naming the first two configs found to compute different
        values."""
        if self.mismatch is None:
            return
        n, why = self.mismatch
        configs = self.tuned.configs
        raise AutotuneError(
            f"configs {self.first} {configs[self.first]!r} and {n} {configs[n]!r} compute "
            f"different values: {why}", kernel=self.tuned.name,
            help="one of them is wrong (drop it from the list); if the kernel's outputs may "
                 "differ between runs (float atomics), pass compare=False")
