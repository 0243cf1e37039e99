"""``ft.autotune``: a tile kernel's tile shape, constants and tileiras hints chosen by measurement,
never at the cost of the caller's data.

    @ft.autotune(configs=[ft.Config(tile=(128, 128), bk=64),
                          ft.Config(tile=(128, 256), bk=64, hints={"sm_90": {"occupancy": 1}})],
                 key=("a", "b"), max_seconds=60)
    @ft.kernel
    def matmul(c: ft.Out[T], a: ft.In[T], b: ft.In[T], bk: ft.Const[int] = 32): ...

    c, a, b = matmul(c, a, b).sync()      # c: a Tensor in, its Partition out (unpartition())

A ``Config`` holds the tile of the Out parameters (one shape for all, or ``{name: shape}``; an
extent ``None`` covers the Out's whole axis, rounded up to a power of two), values for
``ft.Const`` parameters and tileiras entry hints per arch (``occupancy``, ``num_cta_in_cga``,
...). Without ``configs=`` the default space of ``fearless.tile.configs`` is used (``gemm()`` for a
kernel calling ``ft.mma``, else ``rowwise()``). A config whose tile has another rank than a
call's Out is left out of that call (``tuned.report`` says why; none fitting is an error). The
key, by default the tensor parameters' shapes, dtypes, strides and 16-byte alignment class (and
named scalars' values), with the device, its SM count and the compiler, selects a cached
winner; a new key tunes once.

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
``AutotuneError`` listing each with why; ``tuned.report`` (a ``Report``) holds the last
tuning's candidates, its key and its cost in seconds, and ``fl.stats()`` records each tuning.

Time: ``max_seconds`` (and ``FEARLESS_AUTOTUNE_SECONDS``; the smaller applies) bounds one tuning,
compiles included: once it is spent, the configs not yet measured are skipped (``skipped`` in
the report) and the best measured wins; at least one config is always measured, so a tuning
may overrun by one config's compile and trial. Progress goes to stderr (``tuner.py``).

The configs that refuse the real arguments (their ``requires=``, say) are not tried. A key's
ranking (the timed configs, fastest first) persists in ``FEARLESS_CACHE_DIR/autotune/`` per
kernel (its source fingerprint) and config list; a later call runs the best ranked config that
accepts its arguments. ``tuned.tune(*args)`` (and ``fearless tune``) tunes ahead of time for the
key of its arguments, running nothing on them. ``FEARLESS_AUTOTUNE=0`` uses a cached ranking or
the first config that accepts the arguments, and so does a call inside ``fl.capture()`` or a
running operation (with a ``PerformanceWarning``). The cpu backend does not tune: it runs the
first config that accepts the arguments and says so once; when it compiles kernels for GPUs too
(``FEARLESS_CROSS_COMPILE``, ``fearless compile``) every accepted config is compiled, on twins.
Not yet: SIMT kernels (``@fl.kernel``, whose block shape would vary).
"""
from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from fearless.errors import AutotuneError, FearlessError, InternalError, PerformanceWarning
from fearless.kernel import base
from fearless.observe import STATS
from fearless.kernel import params as P
from fearless.kernel.tile import TileKernel
from fearless.runtime import ahead, cache, device, ownership
from fearless.runtime.stream import current_stream
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.tile import tuner
from fearless.tile.rankings import Store
from fearless.tile.tuner import Candidate, Report
from fearless.tracebacks import user_facing
from fearless.version import __version__

__all__ = ["Config", "Candidate", "Report", "autotune", "Autotuned"]


@dataclass(frozen=True)
class Config:
    """One candidate: ``tile`` (a tuple for every Out, or ``{out name: tuple}``; an extent None
    covers the axis, rounded up to a power of two), ``hints`` (``{arch: {hint: value}}``, merged
    over the kernel's own) and ``ft.Const`` values."""

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


def autotune(configs=None, key=None, rtol: float | None = None, reps: int = 5,
             compare: bool = True, max_seconds: float | None = None):
    """Decorator over a tile kernel (``@ft.kernel``): see the module docstring. ``configs``:
    ``ft.Config`` list (default ``ft.configs.default(kernel)``); ``key``: names of runtime
    parameters (default the tensor ones); ``rtol``: the comparison's tolerance (default 1e-2
    for 16-bit float outputs, 1e-5 for wider floats); ``reps``: timed replays per candidate;
    ``compare=False`` skips the comparison (outputs that may differ between runs: float
    atomics, atomic old values); ``max_seconds``: a bound on one tuning's wall-clock seconds.
    Raises AutotuneError for an empty or invalid config list, key or setting, naming it."""
    def wrap(kernel):
        return Autotuned(kernel, configs, key, rtol, reps, compare, max_seconds)
    return wrap


_CAPTURING = "tuning runs work now, which fl.capture() and running operations refuse"


def _tunes_on_cpu() -> bool:
    """Whether the cpu backend tunes: never, but tests say otherwise (they replace this)."""
    return False


class Autotuned:
    """A tile kernel with a config list; calling it runs the winner for the call's key."""

    def __init__(self, kernel, configs, key, rtol, reps, compare, max_seconds=None):
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
        if rtol is not None and not (_number(rtol) and rtol >= 0):
            raise AutotuneError(f"rtol is {rtol!r}; expected a number >= 0", kernel=self.name)
        if max_seconds is not None and not (_number(max_seconds) and 0 < max_seconds < math.inf):
            raise AutotuneError(f"max_seconds is {max_seconds!r}; expected a number of seconds "
                                f"> 0", kernel=self.name)
        self.max_seconds = max_seconds
        if configs is None:
            from fearless.tile.configs import default
            configs = default(kernel)
        elif isinstance(configs, (Config, str, bytes, dict)) or not hasattr(configs, "__iter__"):
            raise AutotuneError(f"configs is a {type(configs).__name__}; expected a list of "
                                f"ft.Config", kernel=self.name,
                                help="give configs=[ft.Config(...), ...], or leave it out for "
                                     "the default space (fearless.tile.configs)")
        self.configs = self._checked_configs(list(configs))
        self.key = self._checked_key(key)
        self._variants: dict = {}
        self._winners: dict = {}
        self._lock = threading.Lock()
        self._warned: set = set()
        self.report: Report | None = None   # the last tuning, None before one

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
            if cfg.tile is None and self.outs:
                raise AutotuneError(f"config {n} has no tile for the Out parameters",
                                    kernel=self.name)
            tiles = cfg.tile if isinstance(cfg.tile, dict) else \
                {name: cfg.tile for name in self.outs}
            for name, tile in tiles.items():
                if name not in self.outs:
                    raise AutotuneError(f"config {n} gives a tile for '{name}', which is not an "
                                        f"Out parameter", kernel=self.name)
                if not _extents(tile):
                    raise AutotuneError(f"config {n}'s tile {tile!r} for '{name}' is not one "
                                        f"extent (an int > 0, or None for the whole axis) per "
                                        f"axis", kernel=self.name, param=name)
            missing = [name for name in self.outs if name not in tiles]
            if missing:
                raise AutotuneError(f"config {n} gives no tile for the Out '{missing[0]}'",
                                    kernel=self.name)
        return configs

    def _checked_key(self, key) -> tuple:
        names = [p.name for p in self.runtime]
        if key is None:
            return tuple(p.name for p in self.runtime if p.kind is not P.SCALAR)
        key = (key,) if isinstance(key, str) else key
        if not hasattr(key, "__iter__"):
            raise AutotuneError(f"the key is a {type(key).__name__}; expected parameter names",
                                kernel=self.name, help=f"the parameters are {', '.join(names)}")
        key = tuple(key)
        for name in key:
            if name not in names:
                raise AutotuneError(f"the key names {name!r}, which is not a runtime "
                                    f"parameter", kernel=self.name,
                                    help=f"the parameters are {', '.join(names)}")
        return key

    def __repr__(self) -> str:
        return f"<fearless autotuned kernel {self.name}, {len(self.configs)} configs>"

    # -- calling ---------------------------------------------------------------------------
    @user_facing
    def __call__(self, *args, **kwargs):
        """The lazy operation of the winning config on these arguments (see the module
        docstring); the Out arguments are Tensors, which it partitions."""
        bound = self._bind(args, kwargs)
        fits, unfit = self._fits(bound)
        key, label = self._key(bound)
        ranking = self._winners.get(key)
        if ranking is not None:   # a key seen before: its best config, whose own checks run
            try:
                with STATS.quiet():   # a refusal here is not the caller's: it chooses again
                    return self._run(ranking[0], bound)
            except InternalError:
                raise
            except FearlessError:
                pass   # refused for these arguments (a requires= on a scalar): choose again
        return self._run(self._choose(key, label, bound, fits, unfit), bound)

    @user_facing
    def tune(self, *args, **kwargs) -> Report:
        """Tune now for the key of these arguments (a cached ranking is measured again, and
        ``FEARLESS_AUTOTUNE=0`` does not apply), store the ranking where calls find it, and
        return the report. Nothing runs on the arguments' own buffers. Raises AutotuneError
        where tuning cannot run (the cpu backend, inside ``fl.capture()``), and what a call
        raises."""
        bound = self._bind(args, kwargs)
        fits, unfit = self._fits(bound)
        key, label = self._key(bound)
        why = self._cannot_tune()
        if why is not None:
            raise AutotuneError(f"{why}; nothing was tuned", kernel=self.name,
                                help="tune on the GPU machine that will run the kernel")
        with self._lock:
            self._tune_key(key, label, bound, fits, unfit)
        return self.report

    def _bind(self, args, kwargs) -> dict:
        values = P.bind(self.name, self.runtime, args, kwargs)
        bound = {p.name: v for p, v in zip(self.runtime, values)}
        for name in self.outs:
            if not isinstance(bound[name], Tensor):
                raise AutotuneError(f"'{name}' takes a fearless Tensor here (the chosen config "
                                    f"partitions it), got {type(bound[name]).__name__}",
                                    kernel=self.name, help="pass the tensor itself; for a "
                                                           "torch tensor, fl.asarray(t)")
        return bound

    def _fits(self, bound: dict) -> tuple[list, dict]:
        """The configs whose tiles have the rank of every Out argument, and {n: why} for the
        others; none fitting raises AutotuneError (before anything runs)."""
        fits, unfit = [], {}
        for n, cfg in enumerate(self.configs):
            for name in self.outs:
                tile, shape = self._extents(cfg, name), bound[name].shape
                if len(tile) != len(shape):
                    unfit[n] = (f"its tile {tile} does not fit '{name}' of shape {shape}: one "
                                f"extent per axis")
                    break
            else:
                fits.append(n)
        if not fits:
            lines = "\n".join(f"  config {n} {self.configs[n]!r}: {why}"
                              for n, why in unfit.items())
            raise AutotuneError(f"no config fits these arguments:\n{lines}", kernel=self.name,
                                help="give configs whose tiles have one extent per axis of "
                                     "the Out arguments")
        return fits, unfit

    def _extents(self, cfg: Config, name: str) -> tuple:
        tile = cfg.tile[name] if isinstance(cfg.tile, dict) else cfg.tile
        return (tile,) if isinstance(tile, int) else tuple(tile)

    def _tile(self, n: int, name: str, tensor) -> tuple:
        """Config n's tile for the Out ``name`` holding ``tensor`` (None extents resolved)."""
        return tuple(1 << max(0, (extent - 1).bit_length()) if t is None else t
                     for t, extent in zip(self._extents(self.configs[n], name), tensor.shape))

    def _refusal(self, n: int, bound: dict) -> FearlessError | None:
        """Why config n's call on the real arguments fails a check (aliasing, ownership,
        dtypes, ``requires``), or None: built and cancelled, its partitions given back. Tuning
        runs on twins, which would hide a refusal."""
        made: list = []
        try:
            with STATS.quiet():
                self._run(n, bound, made=made).cancel()
            return None
        except InternalError:
            raise
        except FearlessError as exc:
            return exc
        finally:
            for part, tensor in made:
                part.abandon(tensor)

    def _accepted(self, bound: dict, order: list, first_only: bool = False) -> list:
        """The configs of ``order`` that accept the real arguments (only the first one with
        ``first_only``); none raises the first one's error."""
        first, accepted = None, []
        for n in order:
            exc = self._refusal(n, bound)
            if exc is None:
                accepted.append(n)
                if first_only:
                    break
            else:
                first = first or exc
        if not accepted and first is not None:
            raise first
        return accepted

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
                    part = v.partition(self._tile(n, p.name, v))
                    made.append((part, v))
                    v = part
                args[p.name] = v
            return self._variant(n)(**args)
        except BaseException:
            for part, tensor in made:
                part.abandon(tensor)
            raise

    # -- choosing --------------------------------------------------------------------------
    def _choose(self, key: str, label: str, bound: dict, fits: list, unfit: dict) -> int:
        """The best config for ``key`` among those that fit and accept the arguments: from
        this process's or the disk's ranking when they hold one, else tuned now (on cuda),
        else the first accepted (the cpu backend, FEARLESS_AUTOTUNE=0, inside fl.capture() or
        a running operation)."""
        with self._lock:
            for ranking in (self._winners.get(key), Store(self).get(key)):
                ranked = [n for n in ranking or () if n in fits]
                for n in ranked:
                    if self._refusal(n, bound) is None:
                        self._winners[key] = [n] + [m for m in ranking if m != n]
                        return n
            why = self._cannot_tune()
            if why is not None or not base.CONFIG.autotune:
                # the cpu backend compiling for GPUs too compiles every config, on twins
                every = why not in (None, _CAPTURING) and bool(
                    ahead.archs(base.CONFIG) or ahead.compiling_ahead())
                accepted = self._accepted(bound, fits, first_only=not every)
                if every:
                    self._compile_every_config(bound, accepted)
                if why is not None:
                    self._first(why)
                self._winners[key] = accepted   # in config order: not stored on disk
                return accepted[0]
            return self._tune_key(key, label, bound, fits, unfit)[0]

    def _tune_key(self, key: str, label: str, bound: dict, fits: list, unfit: dict) -> list:
        """Tune now (the lock held): the ranking, also remembered, stored and recorded."""
        budget = [b for b in (self.max_seconds, base.CONFIG.autotune_seconds) if b is not None]
        with STATS.quiet():   # trial runs and dropped configs are not the caller's
            ranking = tuner.tune(self, bound, fits, unfit, label,
                                 min(budget) if budget else None)
        self._winners[key] = ranking
        Store(self).put(key, ranking)
        if STATS.on:
            r, best = self.report, ranking[0]
            skipped = sum(c.skipped is not None for c in r)
            STATS.autotuned(self.name, label, f"config {best} {self.configs[best]!r}", r.seconds,
                            tried=len(r) - skipped, dropped=sum(c.dropped is not None for c in r),
                            skipped=skipped)
        return ranking

    def _cannot_tune(self) -> str | None:
        if current_stream().capture is not None or getattr(ownership._local, "executing", False):
            return _CAPTURING
        backend = device.current_backend()
        if backend != "cuda" and not _tunes_on_cpu():
            return f"the {backend} backend does not tune"
        return None

    def _first(self, why: str) -> None:
        if why not in self._warned:
            warnings.warn(f"autotuned kernel '{self.name}': {why}; it runs the first config "
                          f"that accepts the arguments", PerformanceWarning, stacklevel=5)
            self._warned.add(why)

    def _key(self, bound: dict) -> tuple[str, str]:
        """The key of these arguments, and its readable part (``a=f16(4096, 4096)``)."""
        parts, shown = [], []
        for name in self.key:
            v = bound[name]
            if isinstance(v, (bool, int, float)) or np.isscalar(v):
                parts.append((name, type(v).__name__, repr(v)))
                shown.append(f"{name}={v!r}")
                continue
            t = v if isinstance(v, Tensor) else as_tensor(v)
            ptr = t.data_ptr() if t.size else 0
            parts.append((name, t.shape, t.dtype.name, t.strides, min(ptr & -ptr, 16) if ptr
                          else 16))
            shown.append(f"{name}={t.dtype.name}{t.shape}")
        backend = device.current_backend()
        where = (device.cuda_device().name, device.cuda_arch(), device.multiprocessor_count()) \
            if backend == "cuda" else ("cpu",)
        key = repr((backend, where, __version__, cache.compiler_fingerprint(), tuple(parts)))
        return key, ", ".join(shown)

    def _compile_every_config(self, bound: dict, accepted: list) -> None:
        """When the cpu backend also compiles for GPUs (FEARLESS_CROSS_COMPILE, ``fearless
        compile``): every accepted config, on twins, so each is known to compile (once per
        key: the fallback choice is then remembered)."""
        for n in accepted[1:]:
            twins = {name: tuner.twin(bound[name], copy=True) for name in self.written}
            with STATS.quiet():
                self._run(n, bound, twins).sync()


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _extents(tile) -> bool:
    """Whether ``tile`` is an int > 0, or a non-empty tuple or list of ints > 0 and Nones."""
    tile = (tile,) if isinstance(tile, int) and not isinstance(tile, bool) else tile
    return isinstance(tile, (tuple, list)) and bool(tile) and all(
        t is None or (isinstance(t, int) and not isinstance(t, bool) and t > 0) for t in tile)
