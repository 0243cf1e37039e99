"""What ``ft.autotune`` (tile kernels, ``tile/tuning.py``) and ``fl.autotune`` (SIMT kernels,
``autotuning/simt.py``) share: the settings' checks, the key of a call, and choosing its config:
the best of a ranking remembered in this process or stored on disk (``rankings.py``) that
accepts the arguments, else a tuning now (``tuner.py``), else the first config that accepts
them (the cpu backend, ``FEARLESS_AUTOTUNE=0``, inside ``fl.capture()`` or a running operation).

A track subclasses ``Tuned``. Before ``Tuned.__init__`` it sets ``kernel``, ``params``,
``runtime`` (the parameters a call passes), ``written`` (the arguments tuning gives scratch
twins) and ``outs`` (those whose every element a config must write: the coverage check); it
defines ``_checked_configs``, ``_bind``, ``_unfit`` (why config n does not fit a call, or None),
``_run`` (config n's lazy operation, twins replacing the written arguments when given),
``_dry_run`` (config n's checks on the real arguments, nothing run), ``_enqueue`` (config n
on twins, no wait, twins taken back), ``_outs_read`` (the ``outs`` a config reads, whose
twins start as copies), ``_outs_stored`` (the ``outs`` a config is known to write whole,
from its compiled IR, whose coverage needs no trial) and ``_precompile`` (compile the configs a
tuning will try, at once where that pays).
"""
from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Mapping

import numpy as np

from fearless.autotuning import tuner
from fearless.autotuning.rankings import Store
from fearless.autotuning.tuner import Report
from fearless.errors import AutotuneError, FearlessError, InternalError, PerformanceWarning
from fearless.kernel import base
from fearless.kernel import params as P
from fearless.observe import STATS
from fearless.runtime import ahead, cache, device, ownership
from fearless.runtime.stream import current_stream
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.version import __version__
from fearless.tracebacks import user_stacklevel

CAPTURING = "tuning runs work now, which fl.capture() and running operations refuse"


def _tunes_on_cpu() -> bool:
    """Whether the cpu backend tunes: never, but tests say otherwise (they replace this)."""
    return False


def tunes_on(backend: str) -> bool:
    """Whether calls on ``backend`` tune (outside ``fl.capture()``): the GPU's do; the cpu
    backend runs the first config that accepts the arguments."""
    return backend == "cuda" or _tunes_on_cpu()


def number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class Tuned:
    """A kernel with a checked config list; a call runs the winner for the call's key."""

    API = "ft"   # how messages spell the decorator's module: ft.autotune, ft.Config
    CONFIG: type   # the track's Config class
    FIT_HELP = ""  # the help of "no config fits these arguments"

    def __init__(self, configs, key, rtol, reps, compare, max_seconds):
        self.name = self.kernel.name
        self.rtol, self.reps, self.compare = rtol, reps, compare
        if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
            raise AutotuneError(f"reps is {reps!r}; expected an int >= 1", kernel=self.name)
        if rtol is not None and not (number(rtol) and rtol >= 0):
            raise AutotuneError(f"rtol is {rtol!r}; expected a number >= 0", kernel=self.name)
        if max_seconds is not None and not (number(max_seconds) and 0 < max_seconds < math.inf):
            raise AutotuneError(f"max_seconds is {max_seconds!r}; expected a number of seconds "
                                f"> 0", kernel=self.name)
        self.max_seconds = max_seconds
        # {config: [(message, category)]}: its compiles' warnings, kept across tunings (a
        # config compiled while losing one key may win the next from the memory cache)
        self.compile_warnings: dict = {}
        config = f"{self.API}.Config"
        if isinstance(configs, (str, bytes, dict, self.CONFIG)) or \
                not hasattr(configs, "__iter__"):
            raise AutotuneError(f"configs is a {type(configs).__name__}; expected a list of "
                                f"{config}", kernel=self.name,
                                help=f"give configs=[{config}(...), ...]")
        configs = list(configs)
        if not configs:
            raise AutotuneError("the config list is empty", kernel=self.name,
                                help=f"give {self.API}.autotune(configs=[{config}(...), ...])")
        self.configs = self._checked_configs(configs)
        self.key_fns: dict = {}   # key parameter -> function of its argument (buckets)
        self.key = self._checked_key(key)
        self._consts = {p.name for p in self.runtime if p.kind is P.CONST}   # keyed by value
        self._winners: dict = {}
        # key functions (buckets): (bucket key, exact key) -> the config chosen for those
        # arguments, and (bucket key, exact key, config) -> whether it writes all of the Outs
        self._covering: dict = {}
        self._coverage: dict = {}
        self._lock = threading.Lock()
        self._warned: set = set()
        self.report: Report | None = None   # the last tuning, None before one

    def _checked_key(self, key) -> tuple:
        names = [p.name for p in self.runtime]
        if key is None:
            return tuple(p.name for p in self.runtime if p.kind is not P.SCALAR)
        key = (key,) if isinstance(key, str) else key
        if isinstance(key, Mapping):
            for name, fn in key.items():
                if fn is not None and not callable(fn):
                    raise AutotuneError(f"the key maps {name!r} to {fn!r} "
                                        f"({type(fn).__name__}), not a function",
                                        kernel=self.name,
                                        help=f"map it to a function of the argument "
                                             f"(key={{{name!r}: lambda a: a.shape[0]}}) or "
                                             f"to None for its shape, dtype and strides")
            self.key_fns = {name: fn for name, fn in key.items() if fn is not None}
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

    # -- a call ----------------------------------------------------------------------------
    def _winner(self, bound: dict):
        """The lazy operation of the winning config over the real arguments ``bound``."""
        fits, unfit = self._fits(bound)
        key, label = self._key(bound)
        ranking = self._winners.get(key)
        if ranking is not None and self.key_fns:   # a bucket: the config chosen for this shape
            n = self._covering.get((key, self._exact(bound)))
            ranking = None if n is None else [n]
        if ranking is not None:   # a key seen before: its best config, whose own checks run
            try:
                with STATS.quiet():   # a refusal here is not the caller's: it chooses again
                    return self._run(ranking[0], bound)
            except InternalError:
                raise
            except FearlessError:
                pass   # refused for these arguments (a requires= on a scalar): choose again
        return self._run(self._choose(key, label, bound, fits, unfit), bound)

    def _chosen(self, bound: dict):
        """The config this process's calls with the key of ``bound`` run first (tuned,
        read from a stored ranking, or the first accepted one where nothing tunes), or None
        before the first call with that key. Runs nothing."""
        key = self._key(bound)[0]
        if self.key_fns:   # a bucket: the config chosen for this shape, once one was
            n = self._covering.get((key, self._exact(bound)))
            return None if n is None else self.configs[n]
        ranking = self._winners.get(key)
        return self.configs[ranking[0]] if ranking else None

    def _tune_now(self, bound: dict) -> Report:
        """``tune()``: tune for the key of ``bound`` now, store the ranking, return the report.
        Raises AutotuneError where tuning cannot run."""
        fits, unfit = self._fits(bound)
        key, label = self._key(bound)
        why = self._cannot_tune()
        if why is not None:
            raise AutotuneError(f"{why}; nothing was tuned", kernel=self.name,
                                help="tune on the GPU machine that will run the kernel")
        with self._lock:
            self._tune_key(key, label, bound, fits, unfit)
        return self.report

    def _fits(self, bound: dict) -> tuple[list, dict]:
        """The configs that fit the arguments, and {n: why} for the others; none fitting
        raises AutotuneError (before anything runs)."""
        fits, unfit = [], {}
        for n in range(len(self.configs)):
            why = self._unfit(n, bound)
            if why is None:
                fits.append(n)
            else:
                unfit[n] = why
        if not fits:
            lines = "\n".join(f"  config {n} {self.configs[n]!r}: {why}"
                              for n, why in unfit.items())
            raise AutotuneError(f"no config fits these arguments:\n{lines}", kernel=self.name,
                                help=self.FIT_HELP)
        return fits, unfit

    def _refusal(self, n: int, bound: dict) -> FearlessError | None:
        """Why config n's call on the real arguments fails a check (aliasing, ownership,
        dtypes, ``requires``, the launch), or None. Tuning runs on twins, which would hide a
        refusal."""
        try:
            with STATS.quiet():
                self._dry_run(n, bound)
            return None
        except InternalError:
            raise
        except FearlessError as exc:
            return exc

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
                    if self._refusal(n, bound) is None and self._covers(key, n, bound):
                        if self.key_fns:   # the bucket's ranking stays; this shape's choice
                            self._winners.setdefault(key, list(ranking))
                            self._covering[(key, self._exact(bound))] = n
                        else:
                            self._winners[key] = [n] + [m for m in ranking if m != n]
                        return n
            why = self._cannot_tune()
            if why is not None or not base.CONFIG.autotune:
                # the cpu backend compiling for GPUs too compiles every config, on twins
                every = why not in (None, CAPTURING) and bool(
                    ahead.archs(base.CONFIG) or ahead.compiling_ahead())
                accepted = self._accepted(bound, self._not_missing(key, bound, fits),
                                          first_only=not every)
                if every:
                    self._compile_every_config(bound, accepted)
                if why is not None:
                    self._first(why)
                if self.key_fns:
                    n = next((n for n in accepted if self._covers(key, n, bound)), None)
                    if n is None:
                        self._not_missing(key, bound, [])   # raises, naming each
                    self._covering[(key, self._exact(bound))] = n
                    return n
                self._winners[key] = accepted   # in config order: not stored on disk
                return accepted[0]
            return self._tune_key(key, label, bound, fits, unfit)[0]

    def _covers(self, key: str, n: int, bound: dict) -> bool:
        """Whether config n may serve these exact arguments under the bucket ``key`` (a key
        with functions): it writes every element of each Out, checked once per exact layout
        (``_exact``) on twins as a tuning checks it, and remembered either way. True without
        key functions, when the config's IR shows each Out it does not read stored whole
        (``_outs_stored``: nothing runs), and where nothing may run now (the cpu backend;
        inside fl.capture(), with a warning that the config runs unchecked)."""
        if not self.key_fns:
            return True
        exact = self._exact(bound)
        known = self._coverage.get((key, exact, n))
        if known is not None:
            return known
        read, stored = self._outs_read(bound, n), self._outs_stored(bound, n)
        if all(o in read or o in stored for o in self.outs):
            self._coverage[(key, exact, n)] = True
            return True
        why = self._cannot_tune()
        if why is not None:
            if why == CAPTURING:
                self._first(f"{why}: config {n}, this bucket's choice, runs on argument shapes "
                            f"it was not checked to cover (call it once outside first)",
                            runs="runs unchecked")
            return True
        with STATS.quiet():
            known = self._coverage[(key, exact, n)] = tuner.covers(self, n, bound)
        return known

    def _not_missing(self, key: str, bound: dict, order: list) -> list:
        """``order`` without the configs known to leave part of an Out unwritten for these
        exact arguments (bucket keys); none left (of a non-empty order, or given none) raises
        AutotuneError naming the configs that miss."""
        if not self.key_fns:
            return order
        exact = self._exact(bound)
        missing = [n for n in range(len(self.configs))
                   if self._coverage.get((key, exact, n)) is False]
        left = [n for n in order if n not in missing]
        if not left:
            raise AutotuneError(
                f"no config writes every element of the outputs for these arguments (configs "
                f"{', '.join(map(str, missing))} were checked and leave some unwritten)",
                kernel=self.name, help="a config must cover every shape of its key's bucket; "
                                       "fix the kernel, or key these shapes apart")
        return left

    def _tune_key(self, key: str, label: str, bound: dict, fits: list, unfit: dict) -> list:
        """Tune now (the lock held): the ranking, also remembered, stored and recorded."""
        budget = [b for b in (self.max_seconds, base.CONFIG.autotune_seconds) if b is not None]
        with STATS.quiet():   # trial runs and dropped configs are not the caller's
            ranking = tuner.tune(self, bound, fits, unfit, label,
                                 min(budget) if budget else None)
        self._winners[key] = ranking
        if self.key_fns:   # a new ranking: each shape of the bucket chooses again
            for k in [k for k in self._covering if k[0] == key]:
                del self._covering[k]
            for k in [k for k in self._coverage if k[0] == key]:
                del self._coverage[k]
            exact = self._exact(bound)   # the tuning checked every ranked config here
            self._covering[(key, exact)] = ranking[0]
            self._coverage.update({(key, exact, n): True for n in ranking})
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
            return CAPTURING
        backend = device.current_backend()
        if not tunes_on(backend):
            return f"the {backend} backend does not tune"
        return None

    def _first(self, why: str, runs: str = "it runs the first config that accepts the "
                                             "arguments") -> None:
        if why not in self._warned:
            warnings.warn(f"autotuned kernel '{self.name}': {why}; {runs}", PerformanceWarning,
                          stacklevel=user_stacklevel())
            self._warned.add(why)

    def _exact(self, bound: dict) -> str:
        """The exact layout of these arguments under a bucket: every non-scalar runtime
        parameter's shape, dtype, strides and alignment (or value: a caller's ft.Const), the
        key's scalars, and what the track adds (a SIMT launch size)."""
        names = [p.name for p in self.runtime if p.kind is not P.SCALAR]
        return self._key(bound, names + [n for n in self.key if n not in names])[0]

    def _key(self, bound: dict, exact: list | None = None) -> tuple[str, str]:
        """The key of these arguments, and its readable part (``a=f16(4096, 4096)``); a key
        parameter with a function contributes its value (``s~2048``). ``exact``: the names
        to describe instead, none through its function (``_exact``)."""
        parts, shown = [], []
        for name in self.key if exact is None else exact:
            v = bound[name]
            fn = None if exact is not None else self.key_fns.get(name)
            if fn is not None:
                try:
                    value = fn(v)
                except Exception as exc:  # noqa: BLE001 - the user's function, named
                    raise AutotuneError(f"the key function of '{name}' raised "
                                        f"{type(exc).__name__}: {exc}", kernel=self.name,
                                        param=name) from None
                parts.append((name, "by function", repr(value)))
                shown.append(f"{name}~{value!r}")
                continue
            if name in self._consts or isinstance(v, (bool, int, float)) or np.isscalar(v):
                parts.append((name, type(v).__name__, repr(v)))
                shown.append(f"{name}={v!r}")
                continue
            t = v if isinstance(v, Tensor) else as_tensor(v)
            ptr = t.data_ptr() if t.size else 0
            parts.append((name, t.shape, t.dtype.name, t.strides, min(ptr & -ptr, 16) if ptr
                          else 16))
            shown.append(f"{name}={t.dtype.name}{t.shape}")
        # a bucket leaves the track's extra (an exact SIMT launch size) to the exact key
        extra = self._key_extra(bound) if exact is not None or not self.key_fns else None
        if extra is not None:
            parts.append(extra)
            shown.append(f"{extra[0]}={extra[1]!r}")
        backend = device.current_backend()
        where = (device.cuda_device().name, device.cuda_arch(), device.multiprocessor_count()) \
            if backend == "cuda" else ("cpu",)
        key = repr((backend, where, __version__, cache.compiler_fingerprint(), tuple(parts)))
        return key, ", ".join(shown)

    def _key_extra(self, bound: dict) -> tuple | None:
        """A (name, value) the key holds besides the key parameters (a SIMT launch size)."""
        return None

    def _compile_every_config(self, bound: dict, accepted: list) -> None:
        """When the cpu backend also compiles for GPUs (FEARLESS_CROSS_COMPILE, ``fearless
        compile``): every accepted config, on twins, so each is known to compile (once per
        key: the fallback choice is then remembered)."""
        for n in accepted[1:]:
            twins = {name: tuner.twin(bound[name], copy=True) for name in self.written}
            with STATS.quiet():
                self._run(n, bound, twins).sync()


