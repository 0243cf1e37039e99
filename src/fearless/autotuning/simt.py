"""``fl.autotune``: a SIMT kernel's block shape and tuning values chosen by measurement, never at
the cost of the caller's data.

    @fl.autotune(configs=[fl.Config(block=128, chunk=4), fl.Config(block=256, chunk=4),
                          fl.Config(block=256, chunk=8)], key=("a",))
    @fl.kernel
    def row_sums(a: fl.Array[f32, 2], out: fl.DisjointSlice[f32], chunk: int): ...

    row_sums(a, out)       # enqueued as row_sums[row_sums.prepare(len(out), block=b)](a, out, c)
    row_sums[n](a, out)    # the launch size given: n threads (an int or a tuple, as prepare takes)

A ``fl.Config`` holds a ``block`` (an int or one int per axis, x first, as ``prepare`` takes it;
None: the contract's exact block, else the default of the launch's rank) and values of scalar
parameters of the kernel, which the call then leaves out (every config sets the same ones).
SIMT kernels have no compile-time constants: a value is a runtime argument, so every config
runs one compiled specialisation. Each block is checked when the kernel is decorated against
its contract (``fl.Contract``: dims, exact block, ``max_threads``), its index space and the
limits every sm_80+ GPU keeps: a refusal is an ``AutotuneError`` naming the config.

The launch size, in threads as ``prepare`` counts them: the one given in ``tuned[size](...)``,
else ``size=``'s (a function over parameter names, config values included, like a contract's
``requires`` lambda), else the shape of the first ``fl.DisjointSlice``/``DisjointArray``
argument (the output a launch must cover). It joins the key. A config whose block has another
rank than the launch is left out of that call (``tuned.report`` says why).

A call is an eager launch, like ``kernel[launch](...)``: on the current stream, returning None;
``tuned.op(...)`` is its lazy DeviceOperation. The rest is ``ft.autotune``'s
(``fearless/tile/tuning.py``, ``fearless/autotuning/``): the real call's own checks run first
(the contract's coverage and ``requires`` included); every written array (DisjointSlice,
AtomicSlice, UnsafeSlice) gets scratch twins and read-only arrays are shared; a DisjointSlice
the kernel reads, and every other written array, starts as a copy of the real contents, so
in-place and accumulating kernels see what the real run will see; any other DisjointSlice runs
from all-zero and all-one bytes and a config leaving an element unwritten is dropped, as is one
that fails to compile or launch, or refuses the arguments; survivors must agree (``compare``,
``rtol``); only the winner runs on the real arguments, once. Rankings persist per key in
``FEARLESS_CACHE_DIR/autotune/``; ``max_seconds``, ``FEARLESS_AUTOTUNE``, ``fl.stats()``,
the progress lines and ``tuned.tune(...)`` (``tuned[size].tune(...)``) work as there; the cpu
backend runs the first config that accepts the arguments and says so (``PerformanceWarning``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from fearless.autotuning import driver
from fearless.errors import AutotuneError, ContractError, FearlessError, InternalError
from fearless.ir import types as T
from fearless.ir.opdef import Op
from fearless.kernel import params as P
from fearless.kernel.simt import Kernel
from fearless.runtime import device, launch as contracts
from fearless.runtime.tensor import as_tensor
from fearless.tracebacks import user_facing

__all__ = ["Config", "autotune", "Autotuned"]

_SIZE = "launch size"   # where a bound call keeps an explicit size: no parameter has this name


@dataclass(frozen=True)
class Config:
    """One candidate: ``block`` (an int or a tuple of ints, x first; None: the contract's or
    the default block) and values of the kernel's scalar parameters."""

    block: object = None
    values: dict = field(default_factory=dict)

    def __init__(self, block=None, **values):
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "values", values)

    def __repr__(self) -> str:
        parts = [f"block={self.block!r}"] if self.block is not None else []
        parts += [f"{k}={v!r}" for k, v in sorted(self.values.items())]
        return f"Config({', '.join(parts)})"


def autotune(configs, key=None, size=None, rtol: float | None = None, reps: int = 5,
             compare: bool = True, max_seconds: float | None = None):
    """Decorator over a SIMT kernel (``@fl.kernel``): see the module docstring. ``configs``:
    a list of ``fl.Config``; ``key``: names of the parameters the call passes (default the
    non-scalar ones), or a dict from names to functions of the argument, as ``ft.autotune``'s;
    ``size``: a function of parameter names giving the launch size; ``rtol``, ``reps``,
    ``compare``, ``max_seconds``: as ``ft.autotune``'s. Raises AutotuneError for an empty or
    invalid config list (a value for something other than a scalar parameter, a block the
    contract refuses), key, size or setting, naming it."""
    def wrap(kernel):
        return Autotuned(kernel, configs, key, size, rtol, reps, compare, max_seconds)
    return wrap


class Autotuned(driver.Tuned):
    """A SIMT kernel with a config list; calling it launches the winner for the call's key."""

    API = "fl"
    CONFIG = Config
    FIT_HELP = "give configs whose blocks have one extent per axis of the launch size"

    def __init__(self, kernel, configs, key, size, rtol, reps, compare, max_seconds=None):
        if not isinstance(kernel, Kernel):
            raise AutotuneError("fl.autotune decorates a SIMT kernel (@fl.kernel); for a tile "
                                "kernel use ft.autotune")
        self.kernel, self.params = kernel, kernel.params
        names = [p.name for p in self.params]
        if hasattr(configs, "__iter__") and not isinstance(configs, (str, bytes, dict, Config)):
            configs = list(configs)   # a generator is read once, here
        first = next((c for c in configs if isinstance(c, Config)), None) \
            if isinstance(configs, list) else None
        self.set = set(first.values) & set(names) if first is not None else set()
        self.runtime = [p for p in self.params if p.name not in self.set]
        self.written = [p.name for p in self.params if p.written]
        self.outs = [p.name for p in self.params if p.access is T.Access.DISJOINT]
        self._launches: dict = {}
        super().__init__(configs, key, rtol, reps, compare, max_seconds)
        self.size, self._size_names = size, self._checked_size(size, names)

    def _checked_configs(self, configs: list) -> list:
        params = {p.name: p for p in self.params}
        for n, cfg in enumerate(configs):
            if not isinstance(cfg, Config):
                raise AutotuneError(f"config {n} is a {type(cfg).__name__}, not an fl.Config",
                                    kernel=self.name)
            for name, value in sorted(cfg.values.items()):
                p = params.get(name)
                if p is None or p.kind not in (P.SCALAR, P.ANY):
                    what = "not a parameter" if p is None else f"the {p.family} parameter"
                    raise AutotuneError(f"config {n} sets '{name}', which is {what}: a config "
                                        f"sets scalar parameters", kernel=self.name,
                                        help=f"the parameters are {', '.join(params)}")
                if not P.is_scalar(value):
                    raise AutotuneError(f"config {n} sets '{name}' to {value!r}; expected a "
                                        f"number", kernel=self.name, param=name)
            if set(cfg.values) != self.set:
                diff = sorted(set(cfg.values) ^ self.set)[0]
                raise AutotuneError(f"config {n} {'sets' if diff in cfg.values else 'leaves'} "
                                    f"'{diff}' {'unlike' if diff in cfg.values else 'set by'} "
                                    f"config 0: every config sets the same parameters",
                                    kernel=self.name, help="the call passes the others")
            self._check_block(n, cfg.block)
        return configs

    def _check_block(self, n: int, block) -> None:
        """Refuse config n's block where the contract, index space or sm_80+ rules would."""
        contract = self.kernel.contract
        if block is None:
            return
        dims = len(block) if isinstance(block, tuple) else 1
        try:
            contracts.plan(self.kernel, self.kernel._launch_space, (1,) * dims, block, "cpu",
                           None, contract, on_device=False)
        except ContractError as exc:
            why = exc.reason.replace(f" (size {(1,) * dims})", "")   # the size is ours
            raise AutotuneError(f"config {n}'s block {block!r} is refused: {why}",
                                kernel=self.name) from None

    def _checked_size(self, size, names: list) -> list:
        if size is None:
            return []
        if not callable(size):
            raise AutotuneError(f"size is a {type(size).__name__}; expected a function of "
                                f"parameter names (lambda out: len(out))", kernel=self.name)
        wanted = list(inspect.signature(size).parameters)
        for name in wanted:
            if name not in names:
                raise AutotuneError(f"size names {name!r}, which is not a parameter",
                                    kernel=self.name, help=f"the parameters are "
                                                           f"{', '.join(names)}")
        return wanted

    # -- calling ---------------------------------------------------------------------------
    @user_facing
    def __call__(self, *args, **kwargs) -> None:
        """Launch the winning config over these arguments (see the module docstring)."""
        self._winner(self._bind(args, kwargs)).enqueue()

    @user_facing
    def op(self, *args, **kwargs):
        """The lazy DeviceOperation of the winning config over these arguments (tuning, when
        the key is new, runs now)."""
        return self._winner(self._bind(args, kwargs))

    def __getitem__(self, size) -> "Sized":
        """The launch over ``size`` threads (an int or a tuple, as ``prepare`` takes)."""
        return Sized(self, size)

    @user_facing
    def tune(self, *args, **kwargs):
        """Tune now for the key of these arguments; see ``ft.autotune``'s ``tune``."""
        return self._tune_now(self._bind(args, kwargs))

    def _bind(self, args, kwargs, size=None) -> dict:
        values = P.bind(self.name, self.runtime, args, kwargs)
        bound = {p.name: v for p, v in zip(self.runtime, values)}
        if size is not None:
            bound[_SIZE] = size
        elif self.size is None and not self.outs:
            raise AutotuneError("the launch size is not known: the kernel has no "
                                "fl.DisjointSlice or DisjointArray to cover", kernel=self.name,
                                help=f"give it: {self.name}[n](...), or "
                                     f"fl.autotune(..., size=lambda ...: n)")
        return bound

    def _size(self, n: int, bound: dict):
        """Config n's launch size over ``bound``."""
        if _SIZE in bound:
            return bound[_SIZE]
        if self.size is not None:
            env = {**bound, **self.configs[n].values}
            return _launch_size(self.size(*(env[name] for name in self._size_names)))
        shape = as_tensor(bound[self.outs[0]]).shape
        return shape[0] if len(shape) == 1 else shape

    def _key_extra(self, bound: dict) -> tuple:
        return ("size", self._size(0, bound))

    def _unfit(self, n: int, bound: dict) -> str | None:
        block, size = self.configs[n].block, self._size(n, bound)
        dims = len(size) if isinstance(size, tuple) else 1
        if block is not None and (len(block) if isinstance(block, tuple) else 1) != dims:
            return f"its block {block!r} does not fit a {dims}-d launch (size {size!r})"
        return None

    def _launch(self, n: int, size) -> contracts.PreparedLaunch:
        """Config n's PreparedLaunch over ``size`` (kept: its plans make later launches
        fast)."""
        key = (n, size, device.current_backend())
        launch = self._launches.get(key)
        if launch is None:
            if len(self._launches) > 256:   # many sizes: keep the memory bounded
                self._launches.clear()
            launch = self._launches[key] = self.kernel.prepare(size, block=self.configs[n].block)
        return launch

    def _run(self, n: int, bound: dict, twins: dict | None = None):
        """The lazy operation of config ``n`` over ``bound`` (twins replacing the real written
        arrays when given)."""
        values, twins = self.configs[n].values, twins or {}
        args = [values[p.name] if p.name in values else twins.get(p.name, bound[p.name])
                for p in self.params]
        return self.kernel.op(self._launch(n, self._size(n, bound)), *args)

    def _dry_run(self, n: int, bound: dict) -> None:
        self._run(n, bound).cancel()

    def _enqueue(self, n: int, bound: dict, twins: dict) -> None:
        self._run(n, bound, twins).enqueue()

    def _outs_read(self, bound: dict, n: int) -> set:
        """The DisjointSlices the kernel uses other than by storing to them or taking their
        length (a load, a view, a copy: each counts as a read), in the IR compiled for these
        arguments and config ``n``'s values; every one when it does not compile (then the
        config's trial fails)."""
        values = self.configs[n].values
        args = [values[p.name] if p.name in values else bound[p.name] for p in self.params]
        kernel, backend = self.kernel, device.current_backend()
        try:
            _, tensors = kernel._tensors(args, backend)
            fn = kernel.compile_for(kernel._types(args, tensors, backend), "cpu").fn
        except InternalError:
            raise
        except FearlessError:
            return set(self.outs)
        outs = {id(q.value): q.name for q in fn.params if q.name in self.outs}
        return {outs[id(v)] for op in fn.walk() for k, v in enumerate(op.operands)
                if id(v) in outs and op.name != Op.MEM_DIM
                and not (op.name == Op.MEM_STORE and k == 0)}

    def _precompile(self, todo: list, bound: dict) -> dict:
        """Compiles nothing ahead (so keeps no warnings: {}): a SIMT specialisation compiles
        in-process (LLVM, nvJitLink) and serves every config (block shapes and scalars are
        launch arguments)."""
        return {}

    def _outs_stored(self, bound: dict, n: int) -> set:
        """None: a SIMT thread's stores depend on its index and the launch size, so every
        DisjointSlice's coverage is checked by the trial."""
        return set()


class Sized:
    """``tuned[size]``: calls with the launch size given."""

    def __init__(self, tuned: Autotuned, size):
        self.tuned, self.size = tuned, _launch_size(size)

    @user_facing
    def __call__(self, *args, **kwargs) -> None:
        t = self.tuned
        t._winner(t._bind(args, kwargs, self.size)).enqueue()

    @user_facing
    def op(self, *args, **kwargs):
        t = self.tuned
        return t._winner(t._bind(args, kwargs, self.size))

    @user_facing
    def tune(self, *args, **kwargs):
        t = self.tuned
        return t._tune_now(t._bind(args, kwargs, self.size))


def _launch_size(size):
    """A size as ``prepare`` takes it, hashable (a list or array becomes a tuple)."""
    return tuple(int(s) for s in size) if isinstance(size, (list, np.ndarray)) else size
