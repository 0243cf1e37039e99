"""``ft.autotune``: a tile kernel's tile shape, constants and tileiras hints chosen by measurement,
never at the cost of the caller's data.

    @ft.autotune(configs=[ft.Config(tile=(128, 128), bk=64),
                          ft.Config(tile=(128, 256), bk=64, hints={"sm_90": {"num_cta_in_cga": 2}})],
                 key=("a", "b"))
    @ft.kernel
    def matmul(c: ft.Out[T], a: ft.In[T], b: ft.In[T], bk: ft.Const[int] = 32): ...

    c, a, b = matmul(c, a, b).sync()      # c: a Tensor; the chosen config partitions it

A ``Config`` holds the tile of the Out parameters (one shape for all, or ``{name: shape}``),
values for ``ft.Const`` parameters and tileiras entry hints per arch (``occupancy``,
``num_cta_in_cga``, ...). The ``key`` parameters' shapes, dtypes and strides (values, for
scalars), the device and the backend select a cached winner; a new key tunes once.

Safety by construction: tuning never runs a candidate on the caller's buffers. Every Out and
Atomic argument gets a scratch twin (a copy of its contents, so in-place and accumulating
kernels see what the real run will see); In arguments are read-only anyway. Each candidate runs
once on fresh twins, and is dropped, with the reason kept, when it fails to compile or launch,
when it leaves part of an Out unwritten (its twin starts poisoned: NaN, or the integer minimum;
an Out the kernel reads gets the real contents instead and is checked by the comparison alone),
or when its results differ from the first surviving candidate's beyond ``rtol`` (relative to the
largest magnitude). The survivors are timed on the twins (median of ``reps`` after a warm-up:
CUDA events); only the winner runs on the real arguments, once, and that call's lazy operation is
returned. All candidates failing is an ``AutotuneError`` listing each with why.

Winners persist in ``FEARLESS_CACHE_DIR/autotune/`` per kernel (its source fingerprint), keyed
by the device name, the fearless version and the key; a changed config list tunes again.
``FEARLESS_AUTOTUNE=0`` uses the cached winner or the first config. The cpu backend does not
tune: it runs the first config and says so once (a ``PerformanceWarning``).
"""
from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from fearless import dtypes
from fearless.errors import AutotuneError, FearlessError, PerformanceWarning
from fearless.kernel import base
from fearless.kernel import params as P
from fearless.kernel.tile import TileKernel
from fearless.runtime import cache, device, memory, timing
from fearless.runtime.tensor import Tensor, asarray, empty, full
from fearless.version import __version__


class Config:
    """One candidate: ``tile`` (a tuple for every Out, or ``{out name: tuple}``), ``hints``
    (``{arch: {hint: value}}``, merged over the kernel's own) and ``ft.Const`` values."""

    def __init__(self, tile=None, hints: dict | None = None, **consts):
        self.tile, self.hints, self.consts = tile, dict(hints or {}), consts

    def __repr__(self) -> str:
        parts = [f"tile={self.tile!r}"] if self.tile is not None else []
        parts += [f"{k}={v!r}" for k, v in sorted(self.consts.items())]
        if self.hints:
            parts.append(f"hints={self.hints!r}")
        return f"Config({', '.join(parts)})"


def autotune(configs, key=None, rtol: float | None = None, reps: int = 5):
    """Decorator over a tile kernel (``@ft.kernel``): see the module docstring. ``key``: names
    of runtime parameters (default all); ``rtol``: the comparison's tolerance (default 1e-2 for
    16-bit float outputs, 1e-5 for f32, 0 for integers); ``reps``: timed runs per candidate.
    Raises AutotuneError for an empty or invalid config list or key, naming the problem."""
    def wrap(kernel):
        return Autotuned(kernel, configs, key, rtol, reps)
    return wrap


class Autotuned:
    """A tile kernel with a config list; calling it runs the winner for the call's key."""

    def __init__(self, kernel, configs, key, rtol, reps):
        if not isinstance(kernel, TileKernel):
            raise AutotuneError("ft.autotune decorates a tile kernel (@ft.kernel)")
        self.kernel, self.name, self.rtol, self.reps = kernel, kernel.name, rtol, reps
        self.params = kernel.params
        consts = {p.name for p in self.params if p.kind is P.CONST}
        self.outs = [p.name for p in self.params if p.kind is P.OUT]
        runtime = [p.name for p in self.params if p.kind is not P.CONST]
        configs = list(configs) if configs is not None else []
        if not configs:
            raise AutotuneError("the config list is empty", kernel=self.name,
                                help="give ft.autotune(configs=[ft.Config(...), ...])")
        for n, cfg in enumerate(configs):
            if not isinstance(cfg, Config):
                raise AutotuneError(f"config {n} is a {type(cfg).__name__}, not an ft.Config",
                                    kernel=self.name)
            unknown = sorted(set(cfg.consts) - consts)
            if unknown:
                raise AutotuneError(f"config {n} sets '{unknown[0]}', which is not an ft.Const "
                                    f"parameter", kernel=self.name,
                                    help=f"its constants: {', '.join(sorted(consts)) or 'none'}")
            tiles = cfg.tile if isinstance(cfg.tile, dict) else {}
            for name in tiles:
                if name not in self.outs:
                    raise AutotuneError(f"config {n} gives a tile for '{name}', which is not an "
                                        f"Out parameter", kernel=self.name)
            if cfg.tile is None and self.outs:
                raise AutotuneError(f"config {n} has no tile for the Out parameters",
                                    kernel=self.name)
        self.configs = configs
        self.key = tuple(runtime if key is None else key)
        for name in self.key:
            if name not in runtime:
                raise AutotuneError(f"the key names '{name}', which is not a runtime "
                                    f"parameter", kernel=self.name,
                                    help=f"the parameters are {', '.join(runtime)}")
        self._variants: dict = {}
        self._winners: dict = {}
        self._warned = False
        self.report: dict = {}   # the last tuning: config index -> seconds or why dropped

    def __repr__(self) -> str:
        return f"<fearless autotuned kernel {self.name}, {len(self.configs)} configs>"

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """The lazy operation of the winning config on these arguments (see the module
        docstring); the Out arguments are Tensors, which it partitions."""
        values = P.bind(self.name, [p for p in self.params if p.kind is not P.CONST],
                        args, kwargs)
        names = [p.name for p in self.params if p.kind is not P.CONST]
        for name, v in zip(names, values):
            if name in self.outs and not isinstance(v, Tensor):
                raise AutotuneError(f"'{name}' takes a fearless Tensor here (the chosen config "
                                    f"partitions it), got {type(v).__name__}", kernel=self.name,
                                    help="pass the tensor itself; for a torch tensor, "
                                         "fl.asarray(t)")
        bound = dict(zip(names, values))
        for n, cfg in enumerate(self.configs):  # every tile fits its Out before anything runs
            for name in self.outs:
                self._tile(n, cfg, name, bound[name])
        which = self._choose(bound)
        return self._run(which, bound)

    def _tile(self, n: int, cfg: Config, name: str, tensor: Tensor) -> tuple:
        tile = cfg.tile.get(name) if isinstance(cfg.tile, dict) else cfg.tile
        tile = (tile,) if isinstance(tile, int) else tuple(tile or ())
        if len(tile) != tensor.ndim or not all(isinstance(t, int) and t > 0 for t in tile):
            raise AutotuneError(f"config {n}'s tile {tile} does not fit '{name}' of shape "
                                f"{tensor.shape}: one positive extent per axis",
                                kernel=self.name, param=name)
        return tile

    def _variant(self, n: int) -> TileKernel:
        kernel = self._variants.get(n)
        if kernel is None:
            hints = {arch: dict(h) for arch, h in self.kernel.hints.items()}
            for arch, h in self.configs[n].hints.items():
                hints.setdefault(arch, {}).update(h)
            kernel = self.kernel if hints == self.kernel.hints else \
                TileKernel(self.kernel.fn, hints=hints, requires=self.kernel.requires)
            self._variants[n] = kernel
        return kernel

    def _run(self, n: int, bound: dict, twins: dict | None = None):
        """The lazy operation of config ``n`` over ``bound`` (twins replacing the real Outs
        and Atomics when given)."""
        cfg = self.configs[n]
        args = {}
        for p in self.params:
            if p.kind is P.CONST:
                if p.name in cfg.consts:
                    args[p.name] = cfg.consts[p.name]
                continue
            v = (twins or {}).get(p.name, bound[p.name])
            if p.kind is P.OUT:
                v = v.partition(self._tile(n, cfg, p.name, v))
            args[p.name] = v
        return self._variant(n)(**args)

    # -- choosing --------------------------------------------------------------------------
    def _key(self, bound: dict) -> str:
        parts = []
        for name in self.key:
            v = bound[name]
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                parts.append((name, tuple(v.shape), str(v.dtype),
                              tuple(getattr(v, "strides", ()))))
            else:
                parts.append((name, type(v).__name__, repr(v)))
        backend = device.current_backend()
        where = device.cuda_device().name if backend == "cuda" else "cpu"
        return repr((backend, where, __version__, tuple(parts)))

    def _choose(self, bound: dict) -> int:
        if device.current_backend() != "cuda" and not _FORCE_CPU[0]:
            if not self._warned:
                warnings.warn(f"autotuned kernel '{self.name}': the cpu backend does not tune; "
                              f"it runs the first config", PerformanceWarning, stacklevel=3)
                self._warned = True
            return 0
        key = self._key(bound)
        if key in self._winners:
            return self._winners[key]
        store = _Store(self)
        stored = store.get(key)
        if stored is not None:
            self._winners[key] = stored
            return stored
        if not base.CONFIG.autotune:
            return 0
        n = self._winners[key] = self._tune(bound)
        store.put(key, n)
        return n

    def _tune(self, bound: dict) -> int:
        start = time.perf_counter()
        written = [p.name for p in self.params if p.kind in (P.OUT, P.ATOMIC)]
        read_outs = _outs_read(self, bound)
        report, reference, timed = {}, None, {}
        runtime = [p for p in self.params if p.kind is not P.CONST]

        def run_on(n: int, twins: dict) -> dict:
            """Run config n on the twins, wait, and take the twins back (Outs unpartitioned)."""
            result = self._run(n, bound, twins).sync()
            for p, v in zip(runtime, result):
                if p.name in twins:
                    twins[p.name] = v.unpartition() if p.kind is P.OUT else v
            return twins

        for n in range(len(self.configs)):
            try:
                twins = run_on(n, {name: _twin(bound[name], poison=name in self.outs
                                               and name not in read_outs) for name in written})
                results = {name: twins[name].numpy() for name in written}
            except FearlessError as exc:
                report[n] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                continue
            unwritten = [name for name in self.outs if name not in read_outs
                         and _poisoned(results[name]).any()]
            if unwritten:
                report[n] = f"leaves part of '{unwritten[0]}' unwritten"
                continue
            if reference is None:
                reference = (n, results)
            else:
                differs = _differs(results, reference[1], self.rtol)
                if differs:
                    report[n] = f"differs from config {reference[0]}: {differs}"
                    continue
            try:
                twins = {name: _twin(bound[name], poison=False) for name in written}
                timed[n] = timing.median_seconds(lambda: run_on(n, twins), self.reps)
            except FearlessError as exc:
                report[n] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                continue
            report[n] = timed[n]
        self.report = report
        if not timed:
            lines = "\n".join(f"  config {n} {self.configs[n]!r}: {why}"
                              for n, why in sorted(report.items()))
            raise AutotuneError(f"every config failed:\n{lines}", kernel=self.name)
        best = min(timed, key=timed.get)
        dropped = sum(1 for v in report.values() if isinstance(v, str))
        if base.CONFIG.progress:
            import sys
            print(f"fearless: tuned '{self.name}' over {len(self.configs)} configs in "
                  f"{time.perf_counter() - start:.1f} s: config {best} "
                  f"{self.configs[best]!r} ({timed[best] * 1e6:.1f} us)"
                  + (f"; {dropped} dropped (.report says why)" if dropped else ""),
                  file=sys.stderr)
        return best


_FORCE_CPU = [False]  # tests tune on the cpu backend (the wall clock times it)


def _outs_read(tuned: Autotuned, bound: dict) -> set:
    """The Out parameters the kernel may read: ``out.load()``, or the name passed to a call
    other than as ``load_like``'s second argument (a helper might read it). Their twins start
    as copies of the real contents, and only the comparison checks them."""
    import ast
    found = set()
    for node in ast.walk(tuned.kernel.captured.tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "load" and \
                    isinstance(func.value, ast.Name) and func.value.id in tuned.outs:
                found.add(func.value.id)
            like = isinstance(func, ast.Attribute) and func.attr == "load_like" or \
                isinstance(func, ast.Name) and func.id == "load_like"
            for k, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id in tuned.outs and not (like and k == 1):
                    found.add(arg.id)
    return found


def _twin(t: Tensor, poison: bool) -> Tensor:
    """A fresh tensor of ``t``'s shape and dtype: poisoned, or a copy of ``t``."""
    if poison:
        value = math.nan if t.dtype.is_float else int(np.iinfo(t.dtype.numpy).min) \
            if t.dtype is not dtypes.bool_ else True
        return full(t.shape, value, t.dtype)
    if t.backend == "cuda" and t.is_contiguous():
        twin = empty(t.shape, t.dtype)
        memory.copy_device_to_device(twin.data_ptr(), t.data_ptr(), t.nbytes)
        return twin
    return asarray(t.numpy().copy())


def _poisoned(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.isnan(a.astype(np.float64))
    if a.dtype.kind == "b":
        return np.zeros(a.shape, bool)  # no poison value for bool: the comparison checks it
    return a == np.iinfo(a.dtype).min


def _differs(results: dict, reference: dict, rtol) -> str | None:
    for name, got in results.items():
        want = reference[name]
        g, w = got.astype(np.float64), want.astype(np.float64)
        tol = rtol if rtol is not None else (1e-2 if got.dtype.itemsize <= 2 and
                                             got.dtype.kind in "fV" else
                                             1e-5 if got.dtype.kind == "f" else 0.0)
        finite = np.isfinite(w)
        scale = np.abs(w[finite]).max() if finite.any() else 0.0
        bad = ~((np.abs(g - w) <= tol * scale) | (np.isnan(g) & np.isnan(w)) | (g == w))
        if bad.any():
            k = int(np.flatnonzero(bad.ravel())[0])
            return (f"'{name}' element {k}: {float(g.ravel()[k])!r} against "
                    f"{float(w.ravel()[k])!r} "
                    f"(tolerance {tol} x {scale:.3g})")
    return None


class _Store:
    """Winners on disk: one JSON file per kernel fingerprint, each key's winner with the
    config list it was chosen from."""

    def __init__(self, tuned: Autotuned):
        self.configs = [repr(c) for c in tuned.configs]
        fingerprint = cache.digest(["autotune", *tuned.kernel.fingerprint()])
        self.path = Path(base.CONFIG.cache_dir) / "autotune" / f"{fingerprint}.json"
        self.enabled = base.CONFIG.disk_cache

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> int | None:
        if not self.enabled:
            return None
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get("configs") != self.configs:
            return None
        n = entry.get("winner")
        return n if isinstance(n, int) and 0 <= n < len(self.configs) else None

    def put(self, key: str, n: int) -> None:
        if not self.enabled:
            return
        data = self._read()
        data[key] = {"winner": n, "configs": self.configs}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.path)
        except OSError:
            pass   # a read-only cache: tune again next process
