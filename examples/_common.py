"""Helpers shared by the examples: timing a launch and checking a result against NumPy."""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

import fearless as fl
from fearless.errors import PerformanceWarning


@dataclass
class Result:
    """What one example measured: times in milliseconds, bytes moved by one steady launch."""

    name: str
    backend: str
    size: str
    first_ms: float
    steady_ms: float
    bytes_moved: int
    error_ratio: float  # worst error / allowed error (see check)
    notes: list = field(default_factory=list)

    @property
    def gbps(self) -> float:
        return self.bytes_moved / (self.steady_ms * 1e6) if self.steady_ms > 0 else float("nan")


def timed(launch, repeat: int) -> tuple[float, float]:
    """(first call ms, mean steady ms) of ``launch()``, each synchronised."""
    t0 = time.perf_counter()
    launch()
    fl.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for _ in range(repeat):
        launch()
    fl.synchronize()
    return first, (time.perf_counter() - t0) * 1e3 / max(repeat, 1)


def check(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol=0.0) -> float:
    """Check ``got`` against the float64 reference ``want``: raises AssertionError where
    ``|got - want| > atol + rtol * |want|``, else returns the worst error as a fraction of that
    bound (0 = exact, 1 = at the limit). ``atol`` may be an array (a per-element bound, for sums
    whose terms cancel)."""
    if compiling_ahead():
        return 0.0  # `fearless compile`: the kernels did not run, there is nothing to check
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} != {want.shape}")
    err = np.abs(got64 - want64)
    bad = err > atol + rtol * np.abs(want64)
    if bad.any():
        k = np.flatnonzero(bad.ravel())[0]
        raise AssertionError(f"{name}: {bad.sum()} wrong elements; first at flat index {k}: "
                             f"got {got64.ravel()[k]}, want {want64.ravel()[k]}")
    bound = np.maximum(atol + rtol * np.abs(want64), 1e-300)
    return float((err / bound).max()) if err.size else 0.0


def sizes(gpu: int, cpu: int) -> int:
    """The problem size for the current backend: GPUs get big enough to measure bandwidth.

    ``fearless compile`` (kernels compile for the GPU but do not run) compiles the cubins the GPU
    run asks for: those depend on a size only through its divisibility by powers of two up to
    16 (a tile kernel's layout facts; a SIMT kernel's not at all), so it takes the CPU size when
    that has the same divisibility, else the GPU size. ``FEARLESS_EXAMPLE_SIZES=small`` in the
    environment gives the CPU sizes on every backend: for runs under compute-sanitizer, which
    slows kernels down by orders of magnitude."""
    if os.environ.get("FEARLESS_EXAMPLE_SIZES") == "small":
        return cpu
    if compiling_ahead():
        return cpu if min(cpu & -cpu, 16) == min(gpu & -gpu, 16) else gpu
    return gpu if fl.current_backend() == "cuda" else cpu


def compiling_ahead() -> bool:
    """True under ``fearless compile``: kernels compile for the GPU and run nothing."""
    from fearless.runtime import ahead
    return ahead.compiling_ahead()


def timed_op(step, owned, repeat: int):
    """Time a lazy tile-kernel call. ``step(owned)`` runs one call to completion (``.sync()``)
    and returns the ownership it got back, which the next call takes: (owned, first ms, mean
    steady ms). The warning that the cpu backend does not tune an ``ft.autotune`` kernel is
    left out: the example's notes say which config ran (``config_note``)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"autotuned kernel .* backend does not tune",
                                PerformanceWarning)
        owned = step(owned)
    first = (time.perf_counter() - t0) * 1e3
    if compiling_ahead():
        return owned, first, first  # `fearless compile`: one call compiles everything
    t0 = time.perf_counter()
    for _ in range(repeat):
        owned = step(owned)
    return owned, first, (time.perf_counter() - t0) * 1e3 / max(repeat, 1)


def config_note(tuned, *args) -> str:
    """Which config the ``ft.autotune`` kernel ``tuned`` ran for the call arguments ``args``
    (its Out first), in a few words for a Result's notes."""
    if compiling_ahead():
        return f"each of its {len(tuned.configs)} configs compiled"
    cfg, backend = tuned.config_for(*args), fl.current_backend()
    if backend != "cuda":
        return f"not tuned (the {backend} backend): the first config, {describe(cfg, args[0])}"
    from fearless.runtime.device import cuda_arch
    return f"tuned: {describe(cfg, args[0], cfg.hints.get(cuda_arch(), {}))}"


def describe(cfg, out, hints: dict | None = None) -> str:
    """An ``ft.Config`` in a few words (``tile 128x256, persistent, num_cta_in_cga=2``); an
    extent None shows as what it covers of ``out``: the axis, rounded up to a power of two.
    ``hints``: the config's hints for the GPU it ran on."""
    tile = "x".join(str(1 << (e - 1).bit_length() if t is None else t)
                    for t, e in zip(cfg.tile, out.shape))
    words = [f"tile {tile}"] + (["persistent"] if cfg.schedule is not None else [])
    words += [f"{name}={value}" for name, value in sorted({**cfg.consts, **(hints or {})}.items())]
    return ", ".join(words)
