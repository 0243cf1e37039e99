"""``ft.autotune``: a tile kernel's tile shape, constants and tileiras hints chosen by measurement,
never at the cost of the caller's data.

    @ft.autotune(configs=[ft.Config(tile=(128, 128), bk=64),
                          ft.Config(tile=(128, 256), bk=64, hints={"sm_90": {"occupancy": 1}})],
                 key=("a", "b"))
    @ft.kernel
    def matmul(c: ft.Out[T], a: ft.In[T], b: ft.In[T], bk: ft.Const[int] = 32): ...

    c, a, b = matmul(c, a, b).sync()      # c: a Tensor in, its Partition out (unpartition())

A ``Config`` holds the tile of the Out parameters (one shape for all, or ``{name: shape}``),
values for ``ft.Const`` parameters and tileiras entry hints per arch (``occupancy``,
``num_cta_in_cga``, ...). The key, by default the tensor parameters' shapes, dtypes, strides and
16-byte alignment class (and named scalars' values), with the device, its SM count and the
compiler, selects a cached winner; a new key tunes once.

Safety by construction: tuning never runs a candidate on the caller's buffers. The real call's
own checks run first (a call every config refuses is refused before any tuning). Every Out
and Atomic argument gets scratch twins of its layout; In arguments are read-only anyway. An Out
a config reads (its own tile loaded, found in the compiled IR) or an Atomic starts as a copy of
the real contents, so in-place and accumulating kernels see what the real run will see; any
other Out runs twice, starting all zero bytes and all one bytes, and an element holding the
fill in both runs was never written: such a config is dropped. So is a config that fails to
compile or launch, and, unless ``compare=False``, the survivors' results must agree (each
element within ``rtol`` of the other, plus ``rtol`` times the output's mean magnitude; integers
exactly): survivors that disagree are an ``AutotuneError`` naming both, never a silent choice.
The rest are timed (a CUDA graph of one run, replayed between CUDA events) and only the winner
runs on the real arguments, once; its lazy operation is returned. All candidates failing is an
``AutotuneError`` listing each with why; ``tuned.report`` lists the last tuning's candidates.

The configs that refuse the real arguments (their ``requires=``, say) are not tried. A key's
ranking (the timed configs, fastest first) persists in ``FEARLESS_CACHE_DIR/autotune/`` per
kernel (its source fingerprint) and config list; a later call runs the best ranked config that
accepts its arguments. ``FEARLESS_AUTOTUNE=0`` uses a cached ranking or the first config that
accepts the arguments, and so does a call inside ``fl.capture()`` or a running operation (with
a ``PerformanceWarning``). The cpu backend does not tune: it runs the first config that accepts
the arguments and says so once; when it compiles kernels for GPUs too
(``FEARLESS_CROSS_COMPILE``, ``fearless compile``) every accepted config is compiled, on twins.
Not yet: SIMT kernels, a default search space, a bound on tuning time, ``fearless tune``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fearless.errors import AutotuneError, FearlessError, InternalError, PerformanceWarning
from fearless.ir.opdef import Op
from fearless.kernel import base
from fearless.observe import STATS
from fearless.kernel import params as P
from fearless.kernel.tile import TileKernel
from fearless.runtime import ahead, cache, device, memory, ownership, timing
from fearless.runtime.stream import current_stream
from fearless.runtime.tensor import Tensor, as_tensor, empty
from fearless.tracebacks import user_facing
from fearless.version import __version__


@dataclass(frozen=True)
class Config:
    """One candidate: ``tile`` (a tuple for every Out, or ``{out name: tuple}``), ``hints``
    (``{arch: {hint: value}}``, merged over the kernel's own) and ``ft.Const`` values."""

    tile: object = None
    hints: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)

    def __init__(self, tile=None, hints: dict | None = None, **consts):
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "hints", dict(hints or {}))
        object.__setattr__(self, "consts", consts)

    def __repr__(self) -> str:
        parts = [f"tile={self.tile!r}"] if self.tile is not None else []
        parts += [f"{k}={v!r}" for k, v in sorted(self.consts.items())]
        if self.hints:
            parts.append(f"hints={self.hints!r}")
        return f"Config({', '.join(parts)})"


@dataclass(frozen=True)
class Candidate:
    """One config's outcome in a tuning: its median ``seconds``, or why it was ``dropped``."""

    config: Config
    seconds: float | None = None
    dropped: str | None = None


def autotune(configs, key=None, rtol: float | None = None, reps: int = 5,
             compare: bool = True):
    """Decorator over a tile kernel (``@ft.kernel``): see the module docstring. ``key``: names
    of runtime parameters (default the tensor ones); ``rtol``: the comparison's tolerance
    (default 1e-2 for 16-bit float outputs, 1e-5 for wider floats); ``reps``: timed replays
    per candidate; ``compare=False`` skips the comparison (outputs that may differ between
    runs: float atomics, atomic old values). Raises AutotuneError for an empty or invalid
    config list, key or setting, naming the problem."""
    def wrap(kernel):
        return Autotuned(kernel, configs, key, rtol, reps, compare)
    return wrap


class Autotuned:
    """A tile kernel with a config list; calling it runs the winner for the call's key."""

    def __init__(self, kernel, configs, key, rtol, reps, compare):
        if not isinstance(kernel, TileKernel):
            raise AutotuneError("ft.autotune decorates a tile kernel (@ft.kernel)")
        self.kernel, self.name = kernel, kernel.name
        self.rtol, self.reps, self.compare = rtol, reps, compare
        self.params = kernel.params
        self.runtime = [p for p in self.params if p.kind is not P.CONST]
        self.outs = [p.name for p in self.params if p.kind is P.OUT]
        self.written = [p.name for p in self.params if p.kind in (P.OUT, P.ATOMIC)]
        if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
            raise AutotuneError(f"reps is {reps!r}; expected an int >= 1", kernel=self.name)
        if rtol is not None and not (isinstance(rtol, (int, float)) and rtol >= 0):
            raise AutotuneError(f"rtol is {rtol!r}; expected a number >= 0", kernel=self.name)
        self.configs = self._checked_configs(list(configs) if configs is not None else [])
        names = [p.name for p in self.runtime]
        tensors = [p.name for p in self.runtime if p.kind is not P.SCALAR]
        self.key = tuple(tensors if key is None else key)
        for name in self.key:
            if name not in names:
                raise AutotuneError(f"the key names '{name}', which is not a runtime "
                                    f"parameter", kernel=self.name,
                                    help=f"the parameters are {', '.join(names)}")
        self._variants: dict = {}
        self._winners: dict = {}
        self._lock = threading.Lock()
        self._warned: set = set()
        self.report: list = []   # Candidates of the last tuning, in config order

    def _checked_configs(self, configs: list) -> list:
        consts = {p.name: p for p in self.params if p.kind is P.CONST}
        if not configs:
            raise AutotuneError("the config list is empty", kernel=self.name,
                                help="give ft.autotune(configs=[ft.Config(...), ...])")
        for n, cfg in enumerate(configs):
            if not isinstance(cfg, Config):
                raise AutotuneError(f"config {n} is a {type(cfg).__name__}, not an ft.Config",
                                    kernel=self.name)
            unknown = sorted(set(cfg.consts) - set(consts))
            if unknown:
                raise AutotuneError(f"config {n} sets '{unknown[0]}', which is not an ft.Const "
                                    f"parameter", kernel=self.name,
                                    help=f"its constants: {', '.join(sorted(consts)) or 'none'}")
            unset = [c for c, p in consts.items() if p.default is P.NO_DEFAULT
                     and c not in cfg.consts]
            if unset:
                raise AutotuneError(f"config {n} leaves the ft.Const '{unset[0]}' without a "
                                    f"value (it has no default)", kernel=self.name)
            for name in cfg.tile if isinstance(cfg.tile, dict) else {}:
                if name not in self.outs:
                    raise AutotuneError(f"config {n} gives a tile for '{name}', which is not an "
                                        f"Out parameter", kernel=self.name)
            if cfg.tile is None and self.outs:
                raise AutotuneError(f"config {n} has no tile for the Out parameters",
                                    kernel=self.name)
        return configs

    def __repr__(self) -> str:
        return f"<fearless autotuned kernel {self.name}, {len(self.configs)} configs>"

    # -- calling ---------------------------------------------------------------------------
    @user_facing
    def __call__(self, *args, **kwargs):
        """The lazy operation of the winning config on these arguments (see the module
        docstring); the Out arguments are Tensors, which it partitions."""
        values = P.bind(self.name, self.runtime, args, kwargs)
        bound = {p.name: v for p, v in zip(self.runtime, values)}
        for name in self.outs:
            if not isinstance(bound[name], Tensor):
                raise AutotuneError(f"'{name}' takes a fearless Tensor here (the chosen config "
                                    f"partitions it), got {type(bound[name]).__name__}",
                                    kernel=self.name, help="pass the tensor itself; for a "
                                                           "torch tensor, fl.asarray(t)")
        for n, cfg in enumerate(self.configs):  # every tile fits its Out before anything runs
            for name in self.outs:
                self._tile(n, cfg, name, bound[name])
        key = self._key(bound)
        ranking = self._winners.get(key)
        if ranking is not None:   # a key seen before: its best config, whose own checks run
            try:
                with STATS.quiet():   # a refusal here is not the caller's: it chooses again
                    return self._run(ranking[0], bound)
            except InternalError:
                raise
            except FearlessError:
                pass   # refused for these arguments (a requires= on a scalar): choose again
        accepted = self._accepted(bound)
        return self._run(self._choose(key, bound, accepted), bound)

    def _accepted(self, bound: dict) -> list:
        """The configs whose call on the real arguments passes every check (aliasing,
        ownership, dtypes, ``requires``), each built and cancelled with its partitions given
        back: tuning runs on twins, which would hide a refusal. None passing raises the first
        config's error."""
        first, accepted = None, []
        for n in range(len(self.configs)):
            made: list = []
            try:
                with STATS.quiet():
                    self._run(n, bound, made=made).cancel()
                accepted.append(n)
            except InternalError:
                raise
            except FearlessError as exc:
                first = first or exc
            finally:
                for part, tensor in made:
                    part.abandon(tensor)
        if not accepted:
            raise first
        return accepted

    def _tile(self, n: int, cfg: Config, name: str, tensor) -> tuple:
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

    def _run(self, n: int, bound: dict, twins: dict | None = None, made: list | None = None):
        """The lazy operation of config ``n`` over ``bound`` (twins replacing the real Outs
        and Atomics when given). A refusal gives every Out it partitioned back; ``made`` gets
        each (partition, tensor) it made."""
        cfg, args = self.configs[n], {}
        made = [] if made is None else made
        try:
            for p in self.params:
                if p.kind is P.CONST:
                    if p.name in cfg.consts:
                        args[p.name] = cfg.consts[p.name]
                    continue
                v = (twins or {}).get(p.name, bound[p.name])
                if p.kind is P.OUT:
                    part = v.partition(self._tile(n, cfg, p.name, v))
                    made.append((part, v))
                    v = part
                args[p.name] = v
            return self._variant(n)(**args)
        except BaseException:
            for part, tensor in made:
                part.abandon(tensor)
            raise

    # -- choosing --------------------------------------------------------------------------
    def _choose(self, key: str, bound: dict, accepted: list) -> int:
        """The best config for ``key`` among ``accepted``: from this process's or the disk's
        ranking when they hold one of them, else tuned now (on cuda), else the first accepted
        (the cpu backend, FEARLESS_AUTOTUNE=0, inside fl.capture() or a running operation)."""
        with self._lock:
            store = _Store(self)
            for ranking in (self._winners.get(key), store.get(key)):
                best = next((n for n in ranking or () if n in accepted), None)
                if best is not None:
                    self._winners[key] = [best] + [n for n in ranking if n != best]
                    return best
            backend = device.current_backend()
            why = None
            if current_stream().capture is not None or \
                    getattr(ownership._local, "executing", False):
                why = "tuning runs work now, which fl.capture() and running operations refuse"
            elif backend != "cuda" and not _tunes_on_cpu():
                self._compile_every_config(bound, accepted)
                why = f"the {backend} backend does not tune"
            if why is not None or not base.CONFIG.autotune:
                if why is not None:
                    self._first(why)
                self._winners[key] = accepted   # in config order: not stored on disk
                return accepted[0]
            with STATS.quiet():   # trial runs and dropped configs are not the caller's
                ranking = self._tune(bound, accepted)
            self._winners[key] = ranking
            store.put(key, ranking)
            return ranking[0]

    def _first(self, why: str) -> None:
        if why not in self._warned:
            warnings.warn(f"autotuned kernel '{self.name}': {why}; it runs the first config "
                          f"that accepts the arguments", PerformanceWarning, stacklevel=5)
            self._warned.add(why)

    def _key(self, bound: dict) -> str:
        parts = []
        for name in self.key:
            v = bound[name]
            if isinstance(v, (bool, int, float)) or np.isscalar(v):
                parts.append((name, type(v).__name__, repr(v)))
                continue
            t = v if isinstance(v, Tensor) else as_tensor(v)
            ptr = t.data_ptr() if t.size else 0
            parts.append((name, t.shape, t.dtype.name, t.strides, min(ptr & -ptr, 16) if ptr
                          else 16))
        backend = device.current_backend()
        where = (device.cuda_device().name, device.cuda_arch(), device.multiprocessor_count()) \
            if backend == "cuda" else ("cpu",)
        return repr((backend, where, __version__, cache.compiler_fingerprint(), tuple(parts)))

    def _compile_every_config(self, bound: dict, accepted: list) -> None:
        """When the cpu backend also compiles for GPUs (FEARLESS_CROSS_COMPILE, ``fearless
        compile``): every accepted config, on twins, so each is known to compile (once per
        key: the fallback choice is then remembered)."""
        if not ahead.archs(base.CONFIG) and not ahead.compiling_ahead():
            return
        for n in accepted[1:]:
            twins = {name: _twin(bound[name], copy=True) for name in self.written}
            with STATS.quiet():
                self._run(n, bound, twins).sync()

    def _tune(self, bound: dict, accepted: list) -> list:
        """Tune over the ``accepted`` configs; returns the timed ones, fastest first."""
        start = time.perf_counter()
        read = _outs_read(self, bound)
        for name in self.written:
            t = bound[name] if isinstance(bound[name], Tensor) else as_tensor(bound[name])
            if not t.is_contiguous():
                raise AutotuneError(f"tuning needs contiguous Out and Atomic arguments; "
                                    f"'{name}' has strides {t.strides}", kernel=self.name,
                                    param=name, help="tune on a contiguous tensor of its "
                                                     "shape, or pass a contiguous copy")
        report, results, timed = [], {}, {}
        for n, cfg in enumerate(self.configs):
            if n not in accepted:
                report.append(Candidate(cfg, dropped="refuses these arguments"))
                continue
            try:
                results[n] = self._trial(n, bound, read)
                if isinstance(results[n], str):
                    report.append(Candidate(cfg, dropped=results.pop(n)))
                    continue
                twins = {name: _twin(bound[name], copy=True) for name in self.written}
                timed[n] = timing.replay_seconds(lambda: self._enqueue(n, bound, twins),
                                                 self.reps)
                report.append(Candidate(cfg, seconds=timed[n]))
            except InternalError:
                raise
            except FearlessError as exc:
                results.pop(n, None)
                report.append(Candidate(cfg, dropped=f"{type(exc).__name__}: "
                                                     f"{str(exc).splitlines()[0]}"))
        self.report = report
        if not timed:
            lines = "\n".join(f"  config {n} {c.config!r}: {c.dropped}"
                              for n, c in enumerate(report))
            raise AutotuneError(f"every config failed:\n{lines}", kernel=self.name)
        if self.compare:
            self._agree(results)
        ranking = sorted(timed, key=timed.get)
        best = ranking[0]
        if base.CONFIG.progress:
            dropped = sum(c.dropped is not None for c in report)
            print(f"fearless: tuned '{self.name}' over {len(self.configs)} configs in "
                  f"{time.perf_counter() - start:.1f} s: config {best} "
                  f"{self.configs[best]!r} ({timed[best] * 1e6:.1f} us)"
                  + (f"; {dropped} dropped (see .report)" if dropped else ""), file=sys.stderr)
        return ranking

    def _enqueue(self, n: int, bound: dict, twins: dict) -> None:
        """Enqueue config n on the twins (no wait) and take the twins back."""
        result = self._run(n, bound, twins).enqueue()
        for p, v in zip(self.runtime, result):
            if p.name in twins:
                twins[p.name] = v.unpartition() if p.kind is P.OUT else v

    def _trial(self, n: int, bound: dict, read: set):
        """Config n's results on fresh twins (name -> host array), or why it is dropped: an
        Out it does not read runs from zero bytes and from one bytes, and an element holding
        the fill after both was never written."""
        fills = (0x00, 0xFF) if any(o not in read for o in self.outs) else (0x00,)
        runs = []
        for fill in fills:
            twins = {name: _twin(bound[name], copy=name in read or name not in self.outs,
                                 fill=fill) for name in self.written}
            self._enqueue(n, bound, twins)
            runs.append({name: twins[name].numpy() for name in self.written})
        for name in self.outs:
            if name in read or len(runs) < 2:
                continue
            zero, one = (_bits(run[name]) for run in runs)
            unwritten = (zero == 0) & (one == _ones(one.dtype))
            if unwritten.any():
                return (f"leaves {int(unwritten.sum())} of the {unwritten.size} elements of "
                        f"'{name}' unwritten")
        return runs[0]

    def _agree(self, results: dict) -> None:
        order = sorted(results)
        first = order[0]
        for n in order[1:]:
            differs = _differs(results[n], results[first], self.rtol)
            if differs:
                raise AutotuneError(
                    f"configs {first} {self.configs[first]!r} and {n} {self.configs[n]!r} "
                    f"compute different values: {differs}", kernel=self.name,
                    help="one of them is wrong (drop it from the list); if the kernel's "
                         "outputs may differ between runs (float atomics), pass compare=False")


def _tunes_on_cpu() -> bool:
    """Whether the cpu backend tunes: never, but tests say otherwise (they replace this)."""
    return False


def _outs_read(tuned: Autotuned, bound: dict) -> set:
    """The Out parameters a config loads (``out.load()``, or ``ft.load``/``load_like`` of its
    own tile: TILE_LOAD_OWN or TILE_LOAD of the Out in the compiled IR), over every config that
    compiles for these arguments' dtypes and ranks (a Const may fold a read away)."""
    from fearless.compiler import compile_tile
    found, compiled = set(), 0
    for n, cfg in enumerate(tuned.configs):
        signature = {}
        for p in tuned.runtime:
            if p.kind is P.SCALAR:
                continue
            v = bound[p.name]
            t = v if isinstance(v, Tensor) else as_tensor(v)
            tile = tuned._tile(n, cfg, p.name, t) if p.kind is P.OUT else None
            signature[p.name] = (t.dtype, t.ndim, tile)
        kernel = tuned._variant(n)
        try:
            infos = P.signature_infos(kernel.runtime_params, signature)
            types = P.specialise(kernel.name, kernel.runtime_params, infos)
            consts = {p.name: cfg.consts.get(p.name, p.default) for p in tuned.params
                      if p.kind is P.CONST}
            fn = compile_tile(kernel.captured, kernel._ir_params(types), consts, None,
                              "passes").fn
        except (FearlessError, P.Unspecified):
            continue
        compiled += 1
        outs = {id(q.value): q.name for q in fn.params if q.name in tuned.outs}
        found |= {outs[id(op.operands[0])] for op in fn.walk()
                  if op.name in (Op.TILE_LOAD_OWN, Op.TILE_LOAD) and id(op.operands[0]) in outs}
    return found if compiled else set(tuned.outs)   # none compiles: every config is dropped


def _twin(t, copy: bool, fill: int = 0) -> Tensor:
    """A scratch tensor of ``t``'s shape, dtype and 16-byte alignment class: a copy of ``t``,
    or every byte ``fill``."""
    t = t if isinstance(t, Tensor) else as_tensor(t)
    item = t.itemsize
    pad = 256 // item
    buf = empty(t.size + pad, t.dtype)
    want = t.data_ptr() % 256 if t.size else 0
    start = ((want - buf.data_ptr() % 256) % 256) // item
    twin = buf[start:start + t.size].reshape(t.shape)
    del buf
    if copy:
        if t.backend == "cuda":
            memory.copy_device_to_device(twin.data_ptr(), t.data_ptr(), t.nbytes)
        else:
            view = twin.host_view()
            view[...] = t.numpy()
            del view
    elif t.backend == "cuda":
        memory.memset(twin.data_ptr(), fill, t.nbytes)
    else:
        view = twin.host_view()
        view.view(np.uint8)[...] = fill
        del view
    return twin


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32,
                                         8: np.uint64}[a.dtype.itemsize])


def _ones(dtype) -> int:
    return np.iinfo(dtype).max


def _differs(results: dict, reference: dict, rtol) -> str | None:
    for name, got in results.items():
        want = reference[name]
        if got.dtype.kind in "biu":
            bad = got != want
            tol = "exactly"
        else:
            g, w = got.astype(np.float64), want.astype(np.float64)
            r = rtol if rtol is not None else (1e-2 if got.dtype.itemsize <= 2 else 1e-5)
            finite = np.isfinite(w)
            mean = float(np.abs(w[finite]).mean()) if finite.any() else 0.0
            close = np.abs(g - w) <= r * (np.abs(w) + mean)
            bad = ~(close | (np.isnan(g) & np.isnan(w)) | (g == w))
            tol = f"within {r} x (|value| + {mean:.3g})"
        if bad.any():
            k = int(np.flatnonzero(np.asarray(bad).ravel())[0])
            return (f"'{name}' element {k}: {got.ravel()[k].item()!r} against "
                    f"{want.ravel()[k].item()!r} (compared {tol})")
    return None


class _Store:
    """Rankings on disk: one JSON file per kernel fingerprint, each key's timed configs
    (fastest first) with the config list they were chosen from."""

    def __init__(self, tuned: Autotuned):
        self.configs = [repr(c) for c in tuned.configs]
        fingerprint = cache.digest(["autotune", *tuned.kernel.fingerprint(),
                                    *tuned.kernel._key_parts()])
        self.path = Path(base.CONFIG.cache_dir) / "autotune" / f"{fingerprint}.json"
        self.enabled = base.CONFIG.disk_cache

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> list | None:
        if not self.enabled:
            return None
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get("configs") != self.configs:
            return None
        ranking = entry.get("ranking")
        if not isinstance(ranking, list) or not ranking or not all(
                type(n) is int and 0 <= n < len(self.configs) for n in ranking):
            return None
        return ranking

    def put(self, key: str, ranking: list) -> None:
        if not self.enabled:
            return
        data = self._read()
        data[key] = {"ranking": ranking, "configs": self.configs}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
        except OSError:
            pass   # a read-only cache: tune again in the next process
