"""``fl.stats``: what fearless did in this process, for the go-live checklist.

    fl.stats.enable()            (or FEARLESS_STATS=1 before the first import)
    ... launch kernels ...
    fl.stats()                   a dict: per kernel, its compiles and launches, ...
    fl.stats.json()              the same as JSON text
    fl.stats.prometheus()        the Prometheus text exposition format (version 0.0.4)
    fl.stats.reset()
    with fl.profile(): ...       counting, and timing each launch (P50/P99 per kernel)

Per kernel: ``compiles`` per specialisation (the label a compile prints: the parameter types,
constants and target), each ``{"cold": n, "cold_s": seconds, "disk": n, "disk_s": seconds,
"memory": n}``: a cold compile, a disk-cache hit (its load time) and a memory-cache hit (a
call's slow path found the specialisation compiled in this process; fast-path launches reuse it
without looking); ``launches``: kernel launches enqueued eagerly (work recorded into a graph is
not; its replays are ``graphs.replays``); ``refused``: errors that name the kernel raised to the
caller, by type (``ContractError``, ``AliasError``, ... a launch or call refused before anything
ran, or a ``CompileError``; fearless's own ``InternalError`` is not counted); ``kernel_errors``:
bounds and race errors the kernel's own runs raised (``KernelBoundsError``, ``RaceError``).
``memory``: the bytes of device memory fearless allocated while counting and has not freed
(``current``) and the most at any time (``peak``); None until it counts a device allocation.
Per kernel too, ``autotune``: a record per tuning of an ``ft.autotune`` kernel (one per new
key): ``key`` (the key's parameters, readable), ``winner`` (the config chosen), ``seconds``
(the wall-clock cost of the tuning: compiles, trial runs, timing), ``tried`` (configs measured
or dropped), ``dropped`` (of those, the ones that failed, refused the arguments or did not fit
them), ``skipped`` (configs the time bound left out). Work inside ``with fl.stats.quiet():`` is
not counted (an autotuner's trial runs). On cuda,
``memory`` also has ``device_free`` and ``device_total``: the device's free and total bytes
(``cuMemGetInfo``, read when the snapshot is taken; None before fearless used the GPU).

Profiling (``with fl.profile():``, or FEARLESS_PROFILE=1 before the first import) also times
each eager launch: per kernel, ``device_time`` is ``{"clock", "count", "p50_s", "p99_s",
"max_s", "min_s", "total_s"}`` in seconds (None for a kernel never timed). ``clock`` says what
was measured: ``"cuda_events"``, the GPU's time between two CUDA events recorded on the
launch's stream just before and after it (resolution about 0.5 us; with programmatic
dependent launch the events serialise the kernels, so each is timed alone), or
``"host_wall"``, the wall clock around the cpu backend's interpretation of the launch. A kernel
timed under both clocks in one process reports its cuda_events times. Percentiles use the
nearest-rank method (``percentile``) over the kept times: all of them up to ``KEEP`` per kernel,
then a uniform sample of ``KEEP`` (reservoir sampling, Vitter's algorithm R); count, total, min
and max are exact. Launches inside a graph capture or ``quiet()`` are not timed, so ``count``
may be below ``launches``.

Off by default, and close to free when off: each launch tests one module variable before and
after it, each allocation once (``runtime/stats.py``); compiles and errors, off the hot path,
test one flag. This module sits below the runtime (tracebacks report errors to it), so the
runtime registers what enabling does here (``hook``) and what reading needs (``reader``).
"""
from __future__ import annotations

import contextlib
import json as _json
import math
import random
import threading
from collections import Counter

KEEP = 1 << 16   # launch times kept per kernel and clock for the percentiles (512 KiB at most)
CLOCKS = ("cuda_events", "host_wall")   # the preferred first


def percentile(ordered, p: float) -> float:
    """The ``p``-th percentile (0 < p <= 100) of the non-empty sorted sequence ``ordered`` by
    the nearest-rank method: the smallest value with at least ``p`` percent of the values at or
    below it, ``ordered[ceil(p / 100 * n) - 1]`` (always one of the values; no interpolation)."""
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


class _Times:
    """One kernel's launch times under one clock (see the module docstring)."""

    __slots__ = ("count", "total", "low", "high", "kept", "_rng")

    def __init__(self):
        self.count, self.total, self.low, self.high = 0, 0.0, math.inf, 0.0
        self.kept: list[float] = []
        self._rng = random.Random(0)   # reproducible samples

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.low, self.high = min(self.low, seconds), max(self.high, seconds)
        if len(self.kept) < KEEP:
            self.kept.append(seconds)
        else:   # algorithm R: the new time replaces a kept one with probability KEEP / count
            j = self._rng.randrange(self.count)
            if j < KEEP:
                self.kept[j] = seconds

    def summary(self, clock: str) -> dict:
        ordered = sorted(self.kept)
        return {"clock": clock, "count": self.count, "p50_s": percentile(ordered, 50),
                "p99_s": percentile(ordered, 99), "max_s": self.high, "min_s": self.low,
                "total_s": self.total}


class _Kernel:
    __slots__ = ("compiles", "launches", "refused", "kernel_errors", "autotune", "times")

    def __init__(self):
        self.autotune: list = []
        self.compiles: dict = {}
        self.launches = 0
        self.refused: Counter = Counter()
        self.kernel_errors: Counter = Counter()
        self.times: dict[str, _Times] = {}   # clock -> the launch times it measured

    def device_time(self) -> dict | None:
        clock = next((c for c in CLOCKS if c in self.times), None)
        return None if clock is None else self.times[clock].summary(clock)


class Stats:
    """The process's counters (``fl.stats``); see the module docstring."""

    def __init__(self):
        self.on = False
        self.profiling = False
        # reentrant: freed() runs from a Buffer's finalizer, which a garbage collection may
        # call while this thread holds the lock
        self._lock = threading.RLock()
        self._hooks: list = []
        self._readers: list = []
        self._quiet = threading.local()
        self.reset()

    # -- switching -------------------------------------------------------------------------
    def enable(self, on: bool = True) -> None:
        """Start (or with ``on=False`` stop) counting; counts so far are kept. Stopping also
        stops profiling."""
        with self._lock:
            if not on:
                self.profiling = False
            if on == self.on:
                return
            self.on = on
            for install, uninstall in self._hooks:
                if on:
                    install(self)
                else:
                    uninstall()

    def disable(self) -> None:
        """Stop counting (and profiling); counts so far are kept."""
        self.enable(False)

    @contextlib.contextmanager
    def profile(self):
        """``with fl.profile():`` counting and timing each eager launch in the block (see the
        module docstring); afterwards both are as they were, the times kept. Process-wide, not
        per thread. Yields this Stats: ``with fl.profile() as stats: ...; stats()``."""
        with self._lock:
            was_on, was_profiling = self.on, self.profiling
            self.enable()
            self.profiling = True
        try:
            yield self
        finally:
            with self._lock:
                self.profiling = was_profiling
                self.enable(was_on)

    def reset(self) -> None:
        """Forget every count (the memory high-water mark restarts at the current bytes)."""
        with self._lock:
            self._kernels: dict[str, _Kernel] = {}
            self._replays = 0
            current = getattr(self, "_current", 0)
            self._current, self._peak = current, current
            self._device = getattr(self, "_device", False)
            self._device_memory = None

    @contextlib.contextmanager
    def quiet(self):
        """Within the block, this thread's launches and errors are not counted."""
        self._quiet.depth = getattr(self._quiet, "depth", 0) + 1
        try:
            yield
        finally:
            self._quiet.depth -= 1

    def _muted(self) -> bool:
        return getattr(self._quiet, "depth", 0) > 0

    # -- recording (fearless calls these) --------------------------------------------------
    def _kernel(self, name) -> _Kernel:
        k = self._kernels.get(name or "-")
        if k is None:
            k = self._kernels[name or "-"] = _Kernel()
        return k

    def compile(self, kernel: str, label: str, kind: str, seconds: float = 0.0) -> None:
        """One lookup of a specialisation: ``kind`` "cold", "disk" or "memory" (a memory hit
        inside ``quiet()`` is not counted; a compile is, whoever asked for it)."""
        if kind == "memory" and self._muted():
            return
        with self._lock:
            c = self._kernel(kernel).compiles.setdefault(
                label, {"cold": 0, "cold_s": 0.0, "disk": 0, "disk_s": 0.0, "memory": 0})
            c[kind] += 1
            if kind != "memory":
                c[f"{kind}_s"] += seconds

    def error(self, exc) -> None:
        """An error on its way to the caller (counted once however many boundaries it passes;
        not when it names no kernel, or is fearless's own InternalError)."""
        from fearless.errors import InternalError, KernelBoundsError, RaceError
        if getattr(exc, "_fearless_counted", False) or getattr(exc, "kernel", None) is None \
                or isinstance(exc, InternalError) or self._muted():
            return
        try:
            exc._fearless_counted = True
        except AttributeError:
            return
        kind = type(exc).__name__
        with self._lock:
            k = self._kernel(getattr(exc, "kernel", None))
            (k.kernel_errors if isinstance(exc, (KernelBoundsError, RaceError))
             else k.refused)[kind] += 1

    def replay(self) -> None:
        if self._muted():
            return
        with self._lock:
            self._replays += 1

    def launch(self, kernel: str) -> None:
        if self._muted():
            return
        with self._lock:
            self._kernel(kernel).launches += 1

    def autotuned(self, kernel: str, key: str, winner: str, seconds: float, tried: int,
                  dropped: int, skipped: int) -> None:
        """One tuning of an autotuned kernel (see the module docstring); counted whoever asks,
        as a compile is."""
        with self._lock:
            self._kernel(kernel).autotune.append(
                {"key": key, "winner": winner, "seconds": seconds, "tried": tried,
                 "dropped": dropped, "skipped": skipped})
    def time(self, kernel: str, seconds: float, clock: str) -> None:
        """One launch of ``kernel`` took ``seconds`` on ``clock`` (one of ``CLOCKS``)."""
        with self._lock:
            times = self._kernel(kernel).times
            (times.get(clock) or times.setdefault(clock, _Times())).add(seconds)

    def device_memory(self, free: int, total: int) -> None:
        """The device's free and total bytes, as the driver reported them now."""
        with self._lock:
            self._device_memory = (free, total)

    def allocated(self, nbytes: int) -> None:
        with self._lock:
            self._device = True
            self._current += nbytes
            self._peak = max(self._peak, self._current)

    def freed(self, nbytes: int) -> None:
        with self._lock:
            self._current -= nbytes

    def hook(self, install, uninstall) -> None:
        """Register what enabling does below this layer: ``install(stats)`` sets the launch
        paths' observer (``runtime/stats.py``), ``uninstall()`` clears it."""
        self._hooks.append((install, uninstall))

    def reader(self, read) -> None:
        """Register ``read(stats)``, called before each snapshot (outside the lock): the
        runtime resolves the launch times still pending and reads the device's memory."""
        self._readers.append(read)

    # -- reading --------------------------------------------------------------------------
    def __call__(self) -> dict:
        """A snapshot: ``{"enabled", "profiling", "kernels": {name: {...}}, "graphs":
        {"replays"}, "memory": {"current", "peak", "device_free", "device_total"} or None}``
        (see the module docstring). Waits for the timed launches still running on the GPU."""
        for read in self._readers:
            read(self)
        with self._lock:
            kernels = {name: {"compiles": {label: dict(c) for label, c in k.compiles.items()},
                              "launches": k.launches, "refused": dict(k.refused),
                              "kernel_errors": dict(k.kernel_errors),
                              "autotune": [dict(r) for r in k.autotune],
                              "device_time": k.device_time()}
                       for name, k in sorted(self._kernels.items())}
            memory = None
            if self._device or self._device_memory is not None:
                free, total = self._device_memory or (None, None)
                memory = {"current": self._current, "peak": self._peak, "device_free": free,
                          "device_total": total}
            return {"enabled": self.on, "profiling": self.profiling, "kernels": kernels,
                    "graphs": {"replays": self._replays}, "memory": memory}

    def json(self, **dumps) -> str:
        """The snapshot as JSON (``json.dumps`` keywords pass through, e.g. ``indent=2``)."""
        return _json.dumps(self(), **dumps)

    def prometheus(self) -> str:
        """The snapshot in Prometheus's text exposition format: counters
        ``fearless_compiles_total{kernel,signature,kind}``,
        ``fearless_compile_seconds_total{kernel,signature,kind}``,
        ``fearless_launches_total{kernel}``, ``fearless_refused_total{kernel,error}``,
        ``fearless_kernel_errors_total{kernel,error}``, ``fearless_graph_replays_total``,
        ``fearless_autotunes_total{kernel}``, ``fearless_autotune_seconds_total{kernel}``;
        gauges ``fearless_memory_bytes``, ``fearless_memory_peak_bytes``,
        ``fearless_device_memory_free_bytes`` and ``fearless_device_memory_total_bytes`` (cuda
        only); and, profiling, the summary ``fearless_kernel_seconds{kernel,clock,quantile}``
        (quantiles 0 (min), 0.5, 0.99, 1 (max), with ``_sum`` and ``_count``)."""
        snap = self()
        out = []

        def family(name, kind, help_text, rows):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in rows:
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                out.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")

        ks = snap["kernels"]
        family("fearless_compiles_total", "counter", "Specialisation lookups by where they "
               "were found (cold: compiled, disk: the disk cache, memory: this process).",
               [({"kernel": n, "signature": s, "kind": kind}, c[kind])
                for n, k in ks.items() for s, c in k["compiles"].items()
                for kind in ("cold", "disk", "memory")])
        family("fearless_compile_seconds_total", "counter", "Seconds spent compiling (cold) "
               "and loading from the disk cache.",
               [({"kernel": n, "signature": s, "kind": kind}, c[f"{kind}_s"])
                for n, k in ks.items() for s, c in k["compiles"].items()
                for kind in ("cold", "disk")])
        family("fearless_launches_total", "counter", "Kernel launches enqueued.",
               [({"kernel": n}, k["launches"]) for n, k in ks.items()])
        family("fearless_refused_total", "counter", "Errors raised to the caller before "
               "anything ran, by type.",
               [({"kernel": n, "error": e}, v) for n, k in ks.items()
                for e, v in k["refused"].items()])
        family("fearless_kernel_errors_total", "counter", "Bounds and race errors of the "
               "kernels' runs.",
               [({"kernel": n, "error": e}, v) for n, k in ks.items()
                for e, v in k["kernel_errors"].items()])
        family("fearless_autotunes_total", "counter", "Tunings of autotuned kernels (one per "
               "new key).", [({"kernel": n}, len(k["autotune"])) for n, k in ks.items()])
        family("fearless_autotune_seconds_total", "counter", "Seconds spent tuning.",
               [({"kernel": n}, sum(r["seconds"] for r in k["autotune"]))
                for n, k in ks.items()])
        family("fearless_graph_replays_total", "counter", "Captured graphs replayed.",
               [({}, snap["graphs"]["replays"])])
        mem = snap["memory"]
        if mem is not None:
            family("fearless_memory_bytes", "gauge", "Device bytes fearless allocated while "
                   "counting and has not freed.", [({}, mem["current"])])
            family("fearless_memory_peak_bytes", "gauge", "The most of fearless_memory_bytes.",
                   [({}, mem["peak"])])
            if mem["device_total"] is not None:
                family("fearless_device_memory_free_bytes", "gauge", "The device's free bytes "
                       "(cuMemGetInfo).", [({}, mem["device_free"])])
                family("fearless_device_memory_total_bytes", "gauge", "The device's bytes "
                       "(cuMemGetInfo).", [({}, mem["device_total"])])
        timed = [(n, k["device_time"]) for n, k in ks.items() if k["device_time"] is not None]
        if timed:
            family("fearless_kernel_seconds", "summary", "Seconds per launch (clock "
                   "cuda_events: GPU time between CUDA events; host_wall: the cpu backend's "
                   "wall clock); quantiles by nearest rank.", [])
            for n, t in timed:   # a summary's samples, per label set: quantiles, sum, count
                labels = f'kernel="{_escape(n)}",clock="{t["clock"]}"'
                out.extend(f'fearless_kernel_seconds{{{labels},quantile="{q}"}} {t[key]}' for
                           q, key in (("0", "min_s"), ("0.5", "p50_s"), ("0.99", "p99_s"),
                                      ("1", "max_s")))
                out.append(f"fearless_kernel_seconds_sum{{{labels}}} {t['total_s']}")
                out.append(f"fearless_kernel_seconds_count{{{labels}}} {t['count']}")
        return "\n".join(out) + "\n"


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


STATS = Stats()  # fearless/__init__.py enables it under FEARLESS_STATS=1, once imported
