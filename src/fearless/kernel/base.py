"""What SIMT and tile kernel objects share: capture, fingerprint, compile under a lock through
the memory and disk caches, and ``@fearless.func`` device functions.

``BaseKernel`` holds the user's function, reads its source and parameters once
(``captured``/``params``: the one parameter model of ``kernel/params.py``), names everything the compiled code depends on (``fingerprint``, the
disk-cache key), and compiles each specialisation once per process (``compiled``: a lock and a
memory cache in front of ``cached_compile``, which reads and writes the disk cache).
``Kernel`` (``kernel/simt.py``) and ``TileKernel`` (``kernel/tile.py``) add their parameter
binding, compile pipeline and launch. ``CONFIG`` is read here, once per compile, so tests and
tools swap it in one place.
"""
from __future__ import annotations

import ast
import functools
import inspect
import pickle
import threading
import time
from typing import Callable, Generic, ParamSpec, TypeVar

import numpy as np

from fearless import dtypes
from fearless.compiler import Compiled
from fearless.config import CONFIG, Config
from fearless.errors import CompileError
from fearless.frontend.capture import MISSING, Captured, capture
from fearless.kernel.params import CONST
from fearless.runtime import cache, progress
from fearless.observe import STATS
from fearless.tracebacks import user_facing
from fearless.version import __version__

VERSION = __version__  # in every disk-cache key
P = ParamSpec("P")
R = TypeVar("R")
__all__ = ["CONFIG", "VERSION", "BaseKernel", "DeviceFunction", "cached_compile", "func"]


class BaseKernel:
    """A kernel function: its source and parameters read on first use, compiled once per
    specialisation. Subclasses define ``_read_params(captured)`` (``params.read`` for their
    track) and ``_key_parts()`` (facts besides the source that decide the code, e.g. tile
    hints)."""

    __fearless_kernel__ = True

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        present_as(self, fn)
        self._cap: Captured | None = None
        self._params = None
        self._runtime_params = None
        self._compiled: dict = {}   # specialisation key -> Compiled
        self._entries: dict = {}    # argument signature -> what a launch needs (subclasses)
        self._lock = threading.Lock()
        self._key_locks: dict = {}  # specialisation key -> the lock its compile holds

    @property
    def captured(self) -> Captured:
        if self._cap is None:
            cap = capture(self.fn)
            self._params = self._read_params(cap)
            self._cap = cap
        return self._cap

    @property
    def params(self) -> list:
        """The parameters (``kernel.params.Param``), read from the annotations once."""
        _ = self.captured
        return self._params

    @property
    def runtime_params(self) -> list:
        """The parameters a launch passes to the GPU: all but the compile-time constants."""
        if self._runtime_params is None:
            self._runtime_params = [p for p in self.params if p.kind is not CONST]
        return self._runtime_params

    def _read_params(self, cap: Captured) -> list:
        raise NotImplementedError

    def _key_parts(self) -> list:
        return []

    def fingerprint(self) -> list:
        """Sources and frozen names the compiled code depends on (the disk-cache key).

        Every free name of the kernel and of each device function it calls is part of the key,
        by value for numbers and tuples, by qualified name for modules and functions, so two
        kernels with one source but a global bound to different functions never share code.
        """
        parts = self._key_parts()
        for c in _walk_functions(self.captured):
            parts.append(c.source)
            parts.extend(f"{name}={_key_of(c.resolve(name))}" for name in c.free_names())
        return parts

    def compiled(self, key, compile_once, fresh: bool = False) -> Compiled:
        """The Compiled of specialisation ``key`` from the memory cache, else
        ``compile_once()``'s, made under the key's lock so that threads launching one new
        signature compile it once (and threads with different ones compile at once).
        ``fresh``: compile again (the driver refused a cached one)."""
        compiled = None if fresh else self._compiled.get(key)
        if compiled is None:
            with self._lock:   # one lock per key: specialisations may compile in parallel
                lock = self._key_locks.setdefault(key, threading.Lock())
            with lock:
                compiled = None if fresh else self._compiled.get(key)
                if compiled is None:
                    compiled = self._compiled[key] = compile_once()
                    return compiled
        if STATS.on:
            STATS.compile(self.name, compiled.label, "memory")
        return compiled


def present_as(obj, fn) -> None:
    """Make the kernel or device-function object ``obj`` present itself as the user's ``fn``:
    ``help()``, ``inspect.signature()``, documentation tools and debuggers see its name,
    qualified name, module, docstring and signature, and ``__wrapped__`` leads to ``fn``."""
    functools.update_wrapper(obj, fn)
    obj.__signature__ = inspect.signature(fn)


class DeviceFunction(Generic[P, R]):
    """A ``@fearless.func`` helper: inlined into the kernels that call it, not callable on the host."""

    __fearless_func__ = True

    def __init__(self, fn: Callable[P, R]):
        self.fn = fn
        present_as(self, fn)
        self._captured = None

    @property
    def captured(self) -> Captured:
        if self._captured is None:
            self._captured = capture(self.fn)
        return self._captured

    @user_facing
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        raise CompileError(f"@fearless.func '{self.__name__}' runs only inside a kernel",
                           help="call it from a @fearless.kernel body")


def _called(cap: Captured):
    """The Python objects a function calls by name or attribute chain (resolved statically)."""
    out = []
    for node in ast.walk(cap.tree):
        if not isinstance(node, ast.Call):
            continue
        chain, f = [], node.func
        while isinstance(f, ast.Attribute):
            chain.append(f.attr)
            f = f.value
        if not isinstance(f, ast.Name) or f.id in cap.assign_counts:
            continue
        obj = cap.resolve(f.id)
        for attr in reversed(chain):
            obj = getattr(obj, attr, MISSING) if obj is not MISSING else MISSING
        if obj is not MISSING:
            out.append(obj)
    return out


def _walk_functions(cap: Captured):
    """``cap`` and every device function it calls, transitively, each once."""
    seen, todo, out = set(), [cap], []
    while todo:
        c = todo.pop()
        if id(c.fn) in seen:
            continue
        seen.add(id(c.fn))
        out.append(c)
        todo += [o.captured for o in _called(c) if isinstance(o, DeviceFunction)]
    return out


def _key_of(value) -> str:
    """How a value a kernel refers to enters the cache key."""
    if isinstance(value, (bool, int, float, tuple, np.generic, dtypes.DType)) or value is None:
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, DeviceFunction):  # its defaults were evaluated when the def ran
        fn = value.fn
        defaults = [_key_of(d) for d in fn.__defaults__ or ()]
        defaults += [f"{k}={_key_of(d)}" for k, d in (fn.__kwdefaults__ or {}).items()]
        return f"func:{value.captured.source}:{','.join(defaults)}"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    module = getattr(value, "__module__", None) or ""
    return f"{type(value).__name__}:{module}.{name}" if name else f"object:{type(value).__qualname__}"


def cached_compile(config: Config, key: str, cap: Captured, types: tuple, run, what: str,
                   keep_ir: bool, fresh: bool = False, accept=None) -> Compiled:
    """The Compiled under ``key`` in ``config``'s disk cache, else ``run()``'s, stored there.
    Both tracks use it.

    An entry holds the PTX and cubin when there are some, and a pickle of the compile facts
    (``info``) and, when ``keep_ir`` (the cpu backend, which interprets it), the IR after the
    passes. Spans are stored relative to ``cap``'s functions and rebased on load, so errors point
    at the source as it is now. ``accept(compiled)``: False rejects a hit (not damage: another
    toolchain built it). ``fresh``: do not read the entry. A compile taking over a second prints
    a line on stderr (``runtime/progress.py``)."""
    disk = cache.DiskCache(config.cache_dir, config.disk_cache)
    anchors = _anchors(cap)
    label = "(" + what.split(" (", 1)[1] if " (" in what else what  # without the name
    start = time.perf_counter()
    if not fresh:
        hit = disk.load(key, lambda sections: _restored(cap.name, types, sections, anchors))
        if hit is not None and (accept is None or accept(hit)):
            hit.label = label
            if STATS.on:
                STATS.compile(cap.name, label, "disk", time.perf_counter() - start)
            return hit
    start = time.perf_counter()
    with progress.compiling(what, config.progress and not progress.quiet_here()):
        compiled = run()
    compiled.label = label
    if STATS.on:
        STATS.compile(cap.name, label, "cold", time.perf_counter() - start)
    sections = {}
    if compiled.ptx:
        sections["ptx"] = compiled.ptx.encode()
    if compiled.cubin is not None:
        sections["cubin"] = compiled.cubin
    try:
        sections["pickle"] = cache.dumps((compiled.fn if keep_ir else None, compiled.info),
                                         anchors)
    except (pickle.PicklingError, TypeError, AttributeError):
        return compiled  # something that cannot be stored: compiled in every process instead
    disk.put(key, sections)
    return compiled


def _restored(name: str, types: tuple, sections: dict, anchors) -> Compiled:
    fn, info = cache.loads(sections["pickle"], anchors)
    ptx = sections["ptx"].decode() if "ptx" in sections else None
    return Compiled(name, types, fn=fn, ptx=ptx, cubin=sections.get("cubin"), info=info,
                    from_cache=True)


def _anchors(cap: Captured) -> list:
    """Where the kernel's functions are now: what cached spans are relative to."""
    return [cache.Anchor(c.filename, min([c.tree.lineno, *(d.lineno for d in
                                                          c.tree.decorator_list)]),
                         c.tree.end_lineno, c.tree.lineno, c.indent)
            for c in _walk_functions(cap)]


def func(fn: Callable[P, R]) -> DeviceFunction[P, R]:
    """Decorator: a device function, inlined into the kernels that call it."""
    return DeviceFunction(fn)


