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
call's Out is left out of that call (``tuned.report`` says why; none fitting is an error). An
``ft.Const`` that no config sets is the caller's (``causal=True``, say): a call passes it like
any argument (or leaves its default), and its value is part of the key. The
key, by default the tensor parameters' shapes, dtypes, strides and 16-byte alignment class (and
named scalars' values), with the device, its SM count and the compiler, selects a cached
winner; a new key tunes once. ``key`` may map names to functions of the argument
(``key={"q": lambda q: (q.dtype, q.shape[-1], (q.shape[1] - 1).bit_length()), "causal":
None}``; None: the argument's usual entry; names left out are not keyed): calls whose values
agree share one tuning (a bucket of sequence lengths tunes once, not per length). The values
must have a repr that is the same in every process (numbers, strings, dtypes, tuples of
them), or the disk ranking is not found again. The coverage check below then runs once per
exact layout of all the tensor arguments (and caller constants): the ranking's first config
that writes every element of the Outs for it runs, checked on twins before the real call
(none: the bucket tunes again; with tuning off, an AutotuneError naming the configs that
miss; inside ``fl.capture()``, where nothing may run, the bucket's choice runs unchecked, with
a ``PerformanceWarning``).

Safety by construction: tuning never runs a candidate on the caller's buffers. The real call's
own checks run first (a call every config refuses is refused before any tuning). Every Out
and Atomic argument gets scratch twins of its layout; In arguments are read-only anyway. An Out
a config reads (its own tile loaded, found in the compiled IR) or an Atomic starts as a copy of
the real contents, so in-place and accumulating kernels see what the real run will see; any
other Out runs twice, starting all zero bytes and all one bytes, and an element holding the
fill in both runs was never written: such a config is dropped. An Out whose own tile the
compiled IR stores on every path (an ``out.store`` in the kernel's body, no ``return`` before
it) is covered by construction and needs neither run (nor, under a bucket key, a check per
new layout). So is a config that fails to
compile or launch, and, unless ``compare=False``, the survivors' results must agree (each
element within ``rtol`` of the other, plus ``rtol`` times the output's mean magnitude; integers
exactly): survivors that disagree are an ``AutotuneError`` naming both, never a silent choice.
The rest are timed together, in rounds (``reps``, default 5) in which each runs once, in a turn
that moves each round (a CUDA graph of one run, replayed between CUDA events after an L2 flush
by a read; the median of its rounds counts: ``runtime/timing.interleaved_seconds``), and only
the winner runs on the real arguments, once; its lazy operation is returned. All candidates
failing is an ``AutotuneError`` listing each with why; ``tuned.report`` (a ``Report``) holds
the last tuning's candidates, its key and its cost in seconds, ``fl.stats()`` records each
tuning, and ``tuned.config_for(*args)`` names the config that calls with such arguments run.

Time: a tuning compiles its configs at once, in threads, before trying them, so a new key waits
about as long as its slowest compile. ``max_seconds`` (and ``FEARLESS_AUTOTUNE_SECONDS``; the
smaller applies) bounds one tuning, compiles included (under a bound they compile one by one,
as each is tried): once it is spent, the configs not yet tried are skipped (``skipped`` in the
report) and the best of those timed wins; at least one config is always tried (compiled and
run in its trial), so a tuning may overrun by one config's compile and trial, and by the
timing of those that passed. Only the winner's compile warnings (``PerformanceWarning``) reach
the caller, also when it wins a later key from the memory cache; every config's are in the
report. Progress goes to stderr (``fearless/autotuning/tuner.py``).

The configs that refuse the real arguments (their ``requires=``, say) are not tried. A key's
ranking (the timed configs, fastest first) persists in ``FEARLESS_CACHE_DIR/autotune/`` per
kernel (its source fingerprint) and config list; a later call runs the best ranked config that
accepts its arguments. ``tuned.tune(*args)`` (and ``fearless tune``) tunes ahead of time for the
key of its arguments, running nothing on them. ``FEARLESS_AUTOTUNE=0`` uses a cached ranking or
the first config that accepts the arguments, and so does a call inside ``fl.capture()`` or a
running operation (with a ``PerformanceWarning``). The cpu backend does not tune: it runs the
first config that accepts the arguments and says so once; when it compiles kernels for GPUs too
(``FEARLESS_CROSS_COMPILE``, ``fearless compile``) every accepted config is compiled, on twins.
SIMT kernels (``@fl.kernel``) are tuned over block shapes and scalar values by ``fl.autotune``
(``fearless/autotuning/simt.py``); what both share is ``fearless/autotuning/``.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from fearless.autotuning import driver
from fearless.autotuning.tuner import Candidate, Report
from fearless.dtypes import DType
from fearless.errors import ArgumentTypeError, AutotuneError, FearlessError, InternalError
from fearless.ir.opdef import Op
from fearless.kernel import base
from fearless.kernel import params as P
from fearless.kernel.tile import TileKernel
from fearless.runtime import device, progress
from fearless.runtime.partition import Persistent
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.tracebacks import deferred_warnings, user_facing

__all__ = ["Config", "Candidate", "Report", "autotune", "Autotuned"]


@dataclass(frozen=True)
class Config:
    """One candidate: ``tile`` (a tuple for every Out, or ``{out name: tuple}``; an extent None
    covers the axis, rounded up to a power of two), ``schedule`` (None, or
    ``ft.persistent(...)``: the Outs are partitioned with it), ``hints`` (``{arch: {hint:
    value}}``, merged over the kernel's own) and ``ft.Const`` values."""

    tile: object = None
    hints: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)
    schedule: object = None

    def __init__(self, tile=None, hints: dict | None = None, schedule=None, **consts):
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "hints", dict(hints or {}))
        object.__setattr__(self, "consts", consts)
        object.__setattr__(self, "schedule", schedule)

    def __repr__(self) -> str:
        parts = [f"tile={self.tile!r}"] if self.tile is not None else []
        parts += [f"{k}={v!r}" for k, v in sorted(self.consts.items())]
        if self.schedule is not None:
            parts.append(f"schedule={self.schedule!r}")
        if self.hints:
            parts.append(f"hints={self.hints!r}")
        return f"Config({', '.join(parts)})"


def autotune(configs=None, key=None, rtol: float | None = None, reps: int = 5,
             compare: bool = True, max_seconds: float | None = None):
    """Decorator over a tile kernel (``@ft.kernel``): see the module docstring. ``configs``:
    ``ft.Config`` list (default ``ft.configs.default(kernel)``); ``key``: names of runtime
    parameters (default the tensor ones), or a dict from names to functions of the argument (or
    None) whose values key the tuning instead; ``rtol``: the comparison's tolerance (default
    1e-2 for f16 outputs, 2^-5 for bf16, 1e-5 for wider floats: ``agreement.default_rtol``);
    ``reps``: timed rounds, in each of which every candidate runs once after an L2 flush (its
    median wins); ``compare=False`` skips the comparison (outputs that may differ between runs:
    float atomics, atomic old values); ``max_seconds``: a bound on one tuning's wall-clock
    seconds. Raises AutotuneError for an empty or invalid config list, key or setting, naming
    it."""
    def wrap(kernel):
        return Autotuned(kernel, configs, key, rtol, reps, compare, max_seconds)
    return wrap


class Autotuned(driver.Tuned):
    """A tile kernel with a config list; calling it runs the winner for the call's key."""

    CONFIG = Config
    FIT_HELP = "give configs whose tiles have one extent per axis of the Out arguments"

    def __init__(self, kernel, configs, key, rtol, reps, compare, max_seconds=None):
        if not isinstance(kernel, TileKernel):
            raise AutotuneError("ft.autotune decorates a tile kernel (@ft.kernel)")
        self.kernel, self.params = kernel, kernel.params
        if configs is None:
            from fearless.tile.configs import default
            configs = default(kernel)
        if hasattr(configs, "__iter__") and not isinstance(configs, (str, bytes, dict, Config)):
            configs = list(configs)   # a generator is read once (the driver checks the rest)
        # the ft.Const parameters no config sets are the caller's (causal=True, say): call
        # arguments like the tensors, part of the key
        self.set = {name for cfg in (configs if isinstance(configs, list) else ())
                    for name in getattr(cfg, "consts", ())}
        self.runtime = [p for p in self.params if p.kind is not P.CONST or p.name not in self.set]
        self.outs = [p.name for p in self.params if p.kind is P.OUT]
        self.written = [p.name for p in self.params if p.kind in (P.OUT, P.ATOMIC)]
        self._variants: dict = {}
        self._facts: dict = {}
        super().__init__(configs, key, rtol, reps, compare, max_seconds)

    def _checked_configs(self, configs: list) -> list:
        consts = {p.name: p for p in self.params if p.kind is P.CONST}
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
                     and c in self.set and c not in cfg.consts]
            if unset:
                raise AutotuneError(f"config {n} leaves the ft.Const '{unset[0]}' without a "
                                    f"value (it has no default)", kernel=self.name)
            if cfg.tile is None and self.outs:
                raise AutotuneError(f"config {n} has no tile for the Out parameters",
                                    kernel=self.name)
            if cfg.schedule is not None and not isinstance(cfg.schedule, Persistent):
                raise AutotuneError(f"config {n}'s schedule is a {type(cfg.schedule).__name__}, "
                                    f"not ft.persistent(...)", kernel=self.name)
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
                odd = [t for t in ((tile,) if isinstance(tile, int) else tile)
                       if t is not None and t & (t - 1)]
                if odd:
                    raise AutotuneError(f"config {n}'s tile {tile!r} for '{name}' has the "
                                        f"extent {odd[0]}, not a power of two", kernel=self.name,
                                        param=name, help="tile extents are powers of two; None "
                                                         "covers the whole axis")
            missing = [name for name in self.outs if name not in tiles]
            if missing:
                raise AutotuneError(f"config {n} gives no tile for the Out '{missing[0]}'",
                                    kernel=self.name)
        return configs

    # -- calling ---------------------------------------------------------------------------
    @user_facing
    def __call__(self, *args, **kwargs):
        """The lazy operation of the winning config on these arguments (see the module
        docstring); the Out arguments are Tensors, which it partitions."""
        return self._winner(self._bind(args, kwargs))

    @user_facing
    def config_for(self, *args, **kwargs) -> Config | None:
        """The ``Config`` that calls with arguments like these (the same key) run: the one
        tuned, read from a stored ranking, or, where nothing tunes (the cpu backend), the
        first that accepts them; None before such a call in this process. Tunes and runs
        nothing. Raises what binding a call's arguments raises."""
        return self._chosen(self._bind(args, kwargs))

    @user_facing
    def tune(self, *args, **kwargs) -> Report:
        """Tune now for the key of these arguments (a cached ranking is measured again, and
        ``FEARLESS_AUTOTUNE=0`` does not apply), store the ranking where calls find it, and
        return the report. Nothing runs on the arguments' own buffers. Raises AutotuneError
        where tuning cannot run (the cpu backend, inside ``fl.capture()``), and what a call
        raises."""
        return self._tune_now(self._bind(args, kwargs))

    def _bind(self, args, kwargs) -> dict:
        for name in sorted(self.set & set(kwargs)):
            setters = [n for n, cfg in enumerate(self.configs) if name in cfg.consts]
            raise ArgumentTypeError(
                f"'{name}' is set by the configs ({', '.join(f'config {n}' for n in setters)}),"
                f" not by the call", kernel=self.name, param=name,
                help="drop it from the call, or from every config to make it the caller's "
                     "(an ft.Const no config sets is an argument of the call)")
        values = P.bind(self.name, self.runtime, args, kwargs)
        bound = {p.name: v for p, v in zip(self.runtime, values)}
        for p in self.runtime:
            if p.kind is P.CONST:   # checked before the key reads it, as a plain call checks
                bound[p.name] = P.const_value(self.name, p, bound[p.name])
        for name in self.outs:
            if not isinstance(bound[name], Tensor):
                raise AutotuneError(f"'{name}' takes a fearless Tensor here (the chosen config "
                                    f"partitions it), got {type(bound[name]).__name__}",
                                    kernel=self.name, help="pass the tensor itself; for a "
                                                           "torch tensor, fl.asarray(t)")
        return bound

    def _unfit(self, n: int, bound: dict) -> str | None:
        """Why config n's tiles do not fit the Out arguments (another rank), or None."""
        for name in self.outs:
            tile, shape = self._extents(self.configs[n], name), bound[name].shape
            if len(tile) != len(shape):
                return (f"its tile {tile} does not fit '{name}' of shape {shape}: one "
                        f"extent per axis")
        return None

    def _extents(self, cfg: Config, name: str) -> tuple:
        tile = cfg.tile[name] if isinstance(cfg.tile, dict) else cfg.tile
        return (tile,) if isinstance(tile, int) else tuple(tile)

    def _tile(self, n: int, name: str, tensor) -> tuple:
        """Config n's tile for the Out ``name`` holding ``tensor`` (None extents resolved)."""
        return tuple(1 << max(0, (extent - 1).bit_length()) if t is None else t
                     for t, extent in zip(self._extents(self.configs[n], name), tensor.shape))

    def _dry_run(self, n: int, bound: dict) -> None:
        """Config n's call on the real arguments built and cancelled, its partitions given
        back: what a refusal raises (``driver.Tuned._refusal``)."""
        made: list = []
        try:
            self._run(n, bound, made=made).cancel()
        finally:
            for part, tensor in made:
                part.abandon(tensor)

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
        made = [] if made is None else made
        try:
            return self._variant(n)(**self._args(n, bound, twins, made))
        except BaseException:
            for part, tensor in made:
                part.abandon(tensor)
            raise

    def _args(self, n: int, bound: dict, twins: dict | None, made: list) -> dict:
        """Config n's call arguments by name: its constants, the caller's, and ``bound``'s
        (or the twins') tensors, each Out partitioned with the config's tile and schedule
        (appended to ``made`` as (partition, tensor))."""
        cfg, args = self.configs[n], {}
        for p in self.params:
            if p.kind is P.CONST:
                if p.name in cfg.consts:
                    args[p.name] = cfg.consts[p.name]
                elif p.name not in self.set:
                    args[p.name] = bound[p.name]
                continue
            v = (twins or {}).get(p.name, bound[p.name])
            if p.kind is P.OUT:
                part = v.partition(self._tile(n, p.name, v), schedule=cfg.schedule)
                made.append((part, v))
                v = part
            args[p.name] = v
        return args

    def _precompile(self, todo: list, bound: dict) -> dict:
        """Compile configs ``todo`` for these arguments at once, in threads (tileiras runs
        outside Python), before the tuning tries them one by one: a new key's first call waits
        about as long as its slowest compile, not the sum. Each config's types come from its own
        checks on the real arguments (the Outs partitioned and given back, nothing run); one
        that refuses them or fails to compile is left to the tuning, which reports it. Returns
        {config: [(message, category)]}, the warnings of its compile (``deferred_warnings``):
        the tuning gives only the winner's."""
        backend = device.current_backend()
        arch = device.cuda_arch() if backend == "cuda" else None
        jobs = []
        for n in todo:
            made: list = []
            kernel = self._variant(n)
            try:
                values = P.bind(kernel.name, kernel.params, (), self._args(n, bound, None, made))
                types, _, constants, _, _ = kernel._signature(values, backend)
            except FearlessError:
                continue
            finally:
                for part, tensor in made:
                    part.abandon(tensor)
            jobs.append((n, kernel, types, constants))
        if len(jobs) < 2:
            return {}

        def build(job) -> list:
            _, kernel, types, constants = job
            with progress.quiet(), deferred_warnings() as said:
                try:
                    kernel.compile_for(types, constants, backend, arch)
                except FearlessError:
                    pass   # the tuning's own compile of this config reports it
            return said
        what = f"{len(jobs)} configs of tile kernel '{self.name}' for {arch or backend}"
        with progress.compiling(what, base.CONFIG.progress), \
                ThreadPoolExecutor(min(len(jobs), os.cpu_count() or 1)) as pool:
            said = list(pool.map(build, jobs))
        return {job[0]: ws for job, ws in zip(jobs, said)}

    def _enqueue(self, n: int, bound: dict, twins: dict) -> None:
        """Enqueue config n on the twins (no wait) and take the twins back."""
        result = self._run(n, bound, twins).enqueue()
        for p, v in zip(self.kernel.runtime_params, result):
            if p.name in twins:
                twins[p.name] = v.unpartition() if p.kind is P.OUT else v

    def _outs_read(self, bound: dict, n: int) -> set:
        """The Out parameters config ``n`` loads (``out.load()``, ``ft.load``/``load_like`` or
        ``ft.gather`` of its own tile: TILE_LOAD_OWN, TILE_LOAD or TILE_GATHER of the Out in
        the IR compiled for these
        arguments' dtypes and ranks and its constants: a Const may fold a read away); none when
        that IR cannot be made (``_out_facts``)."""
        return self._out_facts(bound, n)[0]

    def _outs_stored(self, bound: dict, n: int) -> set:
        """The Out parameters config ``n`` stores whole on every path (``_stored_whole``), in
        the same IR as ``_outs_read``: their coverage needs no trial run; none when it does
        not compile."""
        return self._out_facts(bound, n)[1]

    def _out_facts(self, bound: dict, n: int) -> tuple:
        """(``_outs_read``, ``_outs_stored``) of config n, compiled once per specialisation:
        the dtypes, ranks and tiles of the tensor arguments and the constants' values."""
        from fearless.compiler import compile_tile
        cfg, signature = self.configs[n], {}
        for p in self.kernel.runtime_params:
            v = bound[p.name]
            if p.kind is P.SCALAR or (p.kind is P.ANY and P.is_scalar(v)):
                if not isinstance(p.dtype, DType):   # unannotated or generic: as a call types it
                    signature[p.name] = (P.scalar_info(v, "tile").dtype, None, None)
                continue
            t = v if isinstance(v, Tensor) else as_tensor(v)
            tile = self._tile(n, p.name, t) if p.kind is P.OUT else None
            signature[p.name] = (t.dtype, t.ndim, tile)
        consts = {p.name: cfg.consts.get(p.name, bound.get(p.name, p.default))
                  for p in self.params if p.kind is P.CONST}
        memo = (n, tuple(signature.items()), P.const_keys(consts))
        facts = self._facts.get(memo)
        if facts is not None:
            return facts
        kernel = self._variant(n)
        try:
            infos = P.signature_infos(kernel.runtime_params, signature)
            types = P.specialise(kernel.name, kernel.runtime_params, infos)
            fn = compile_tile(kernel.captured, kernel._ir_params(types), consts, None,
                              "passes").fn
        except InternalError:
            raise
        except (FearlessError, P.Unspecified):
            # unknown: no Out counts as read or stored, so the trial checks every one's
            # coverage (from zero and from one bytes); the config's own trial fails if it
            # does not compile at all
            return set(), set()
        outs = {id(q.value): q.name for q in fn.params if q.name in self.outs}
        read = {outs[id(op.operands[0])] for op in fn.walk()
                if op.name in (Op.TILE_LOAD_OWN, Op.TILE_LOAD, Op.TILE_GATHER)
                and id(op.operands[0]) in outs}
        facts = self._facts[memo] = (read, _stored_whole(fn, outs))
        return facts


def _stored_whole(fn, outs: dict) -> set:
    """The Outs (``outs``: id of the parameter's value -> name) whose own tile ``fn`` stores on
    every path: an ``out.store`` (TILE_STORE, which writes the whole tile, clipped only at the
    tensor's edge) directly in the kernel's body, with no way out of the kernel before it (a
    ``return`` outside an inlined function). A block that selects another tile as its own
    (TILE_SELECT) proves nothing. Every tile block runs the body for its own tile (the grid
    follows the partition; a persistent schedule deals each tile to exactly one block), so each
    element of such an Out is written."""
    if any(op.name == Op.TILE_SELECT for op in fn.walk()):
        return set()
    stored = set()
    for op in fn.body.ops:
        if op.name == Op.TILE_STORE and id(op.operands[0]) in outs:
            stored.add(outs[id(op.operands[0])])
        elif _exits(op):
            break
    return stored


def _exits(op) -> bool:
    """Whether ``op`` may leave the kernel: a ``return`` in it that no inlined function holds."""
    if op.name == Op.CF_RETURN:
        return True
    return op.name != Op.SCF_INLINE and any(_exits(o) for r in op.regions for o in r.ops)


def _extents(tile) -> bool:
    """Whether ``tile`` is an int > 0, or a non-empty tuple or list of ints > 0 and Nones."""
    tile = (tile,) if isinstance(tile, int) and not isinstance(tile, bool) else tile
    return isinstance(tile, (tuple, list)) and bool(tile) and all(
        t is None or (isinstance(t, int) and not isinstance(t, bool) and t > 0) for t in tile)
