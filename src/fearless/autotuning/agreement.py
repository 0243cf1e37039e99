"""Whether a tuning's configs compute the same values (``ft.autotune``/``fl.autotune`` with
``compare=True``): each config whose trial passed is compared, as its trial ends, with the
first one's outputs (host arrays), so the tuner keeps one set of outputs, not one per config.

The comparison runs in slices of ``SLICE`` elements, in float32 for outputs of 32 bits or
fewer (exact for f16, bf16 and f32 values: near the bound two values are within a factor of two,
so their difference is exact, and the bound's own rounding is a few units of 2^-24 of it) and
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
    """The mean |value| of the finite elements of a float array (0.0 when none is finite), as
    a running mean of the slices' means: a float64 sum of values near its largest overflows."""
    flat, work = want.reshape(-1), _work(want.dtype)
    mean, count = 0.0, 0
    for s in range(0, flat.size, SLICE):
        w = flat[s:s + SLICE].astype(work)
        a = np.abs(w[np.isfinite(w)])
        if a.size:
            part = float(a.sum(dtype=np.float64) / a.size) if work is np.float32 else \
                float((a / a.size).sum())
            count += a.size
            mean += (part - mean) * (a.size / count)
    return mean


def _first_bad(got: np.ndarray, want: np.ndarray, r: float, mean: float) -> int | None:
    """The first flat index where ``got`` is not within r x (|want| + mean) of ``want`` (NaN
    matches NaN, an infinity only itself), or None."""
    g_flat, w_flat, work = got.reshape(-1), want.reshape(-1), _work(got.dtype)
    bound = work(min(r * mean, float(np.finfo(work).max)))
    for s in range(0, g_flat.size, SLICE):
        g, w = g_flat[s:s + SLICE].astype(work), w_flat[s:s + SLICE].astype(work)
        with np.errstate(invalid="ignore", over="ignore"):   # inf - inf: NaN, not close
            # |g - w| - r|w| <= r mean: r(|w| + mean) would overflow to inf near the format's
            # largest value and bound nothing; an infinite reference matches only itself
            close = (np.abs(g - w) - r * np.abs(w) <= bound) & np.isfinite(w)
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
    """The configs' outputs, compared as each trial ends with the first's (``add``); a
    difference among the configs the timing kept is raised by ``check`` (after the timing, so
    the report stays whole)."""

    def __init__(self, tuned):
        self.tuned = tuned
        self.first: int | None = None
        self.reference: dict | None = None
        self.means: dict | None = None
        self.verdicts: dict[int, str | None] = {}   # config -> why it differs from the first

    def add(self, n: int, outputs: dict) -> None:
        """Config n's outputs ({name: host array}); the first config's are kept."""
        if not self.tuned.compare:
            return
        if self.reference is None:
            self.first, self.reference = n, outputs
            return
        if self.means is None:   # only once a second config survives its trial
            self.means = {name: mean_magnitude(a) for name, a in self.reference.items()
                          if a.dtype.kind not in "biu"}
        self.verdicts[n] = differs(outputs, self.reference, self.tuned.rtol, self.means)

    def check(self, kept) -> None:
        """Raise AutotuneError naming two configs of ``kept`` (those the timing kept) that
        compute different values: the first config and one that differs from it; or, when
        the first was dropped since, one that agreed with it and one that did not (two that
        both differed from it are not compared with each other)."""
        verdicts = {n: why for n, why in sorted(self.verdicts.items()) if n in kept}
        differ = [(n, why) for n, why in verdicts.items() if why is not None]
        if not differ:
            return
        n, why = differ[0]
        if self.first in kept:
            other, note = self.first, ""
        else:
            agreed = [m for m, w in verdicts.items() if w is None]
            if not agreed:
                return
            other = agreed[0]
            note = (f" (both compared with config {self.first}'s outputs, dropped since; "
                    f"config {other} agreed with them)")
        configs = self.tuned.configs
        raise AutotuneError(
            f"configs {other} {configs[other]!r} and {n} {configs[n]!r} compute different "
            f"values: {why}{note}", kernel=self.tuned.name,
            help="one of them is wrong (drop it from the list); if the kernel's outputs may "
                 "differ between runs (float atomics), pass compare=False")
