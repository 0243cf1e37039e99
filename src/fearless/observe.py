"""``fl.stats``: what fearless did in this process, for the go-live checklist.

    fl.stats.enable()            (or FEARLESS_STATS=1 before the first import)
    ... launch kernels ...
    fl.stats()                   a dict: per kernel, its compiles and launches, ...
    fl.stats.json()              the same as JSON text
    fl.stats.prometheus()        the Prometheus text exposition format (version 0.0.4)
    fl.stats.reset()

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
not counted (an autotuner's trial runs).

Off by default, and close to free when off: each launch and allocation tests one module
variable (``runtime/stats.py``); compiles and errors, off the hot path, test one flag. This
module sits below the runtime (tracebacks report errors to it), so the runtime registers what
enabling does here (``hook``).
"""
from __future__ import annotations

import contextlib
import json as _json
import threading
from collections import Counter


class _Kernel:
    __slots__ = ("compiles", "launches", "refused", "kernel_errors", "autotune")

    def __init__(self):
        self.autotune: list = []
        self.compiles: dict = {}
        self.launches = 0
        self.refused: Counter = Counter()
        self.kernel_errors: Counter = Counter()


class Stats:
    """The process's counters (``fl.stats``); see the module docstring."""

    def __init__(self):
        self.on = False
        # reentrant: freed() runs from a Buffer's finalizer, which a garbage collection may
        # call while this thread holds the lock
        self._lock = threading.RLock()
        self._hooks: list = []
        self._quiet = threading.local()
        self.reset()

    # -- switching -------------------------------------------------------------------------
    def enable(self, on: bool = True) -> None:
        """Start (or with ``on=False`` stop) counting; counts so far are kept."""
        with self._lock:
            if on == self.on:
                return
            self.on = on
            for install, uninstall in self._hooks:
                if on:
                    install(self)
                else:
                    uninstall()

    def disable(self) -> None:
        self.enable(False)

    def reset(self) -> None:
        """Forget every count (the memory high-water mark restarts at the current bytes)."""
        with self._lock:
            self._kernels: dict[str, _Kernel] = {}
            self._replays = 0
            current = getattr(self, "_current", 0)
            self._current, self._peak = current, current
            self._device = getattr(self, "_device", False)

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

    # -- reading --------------------------------------------------------------------------
    def __call__(self) -> dict:
        """A snapshot: ``{"enabled", "kernels": {name: {...}}, "graphs": {"replays"},
        "memory": {"current", "peak"} or None}`` (see the module docstring)."""
        with self._lock:
            kernels = {name: {"compiles": {label: dict(c) for label, c in k.compiles.items()},
                              "launches": k.launches, "refused": dict(k.refused),
                              "kernel_errors": dict(k.kernel_errors),
                              "autotune": [dict(r) for r in k.autotune]}
                       for name, k in sorted(self._kernels.items())}
            memory = {"current": self._current, "peak": self._peak} if self._device else None
            return {"enabled": self.on, "kernels": kernels, "graphs": {"replays": self._replays},
                    "memory": memory}

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
        gauges ``fearless_memory_bytes`` and ``fearless_memory_peak_bytes`` (cuda only)."""
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
        if snap["memory"] is not None:
            family("fearless_memory_bytes", "gauge", "Device bytes fearless allocated while "
                   "counting and has not freed.", [({}, snap["memory"]["current"])])
            family("fearless_memory_peak_bytes", "gauge", "The most of fearless_memory_bytes.",
                   [({}, snap["memory"]["peak"])])
        return "\n".join(out) + "\n"


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


STATS = Stats()  # fearless/__init__.py enables it under FEARLESS_STATS=1, once imported
