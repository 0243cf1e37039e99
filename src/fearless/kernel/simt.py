"""The Kernel object behind ``@fearless.kernel``: specialise -> compile (cached) -> prepare -> launch.

    @fl.kernel
    def saxpy(a: f32, x: fl.Slice[f32], y: fl.Slice[f32], out: fl.DisjointSlice[f32]): ...

    launch = saxpy.prepare(n)        # PreparedLaunch, checked against kernel and device
    saxpy[launch](2.0, x, y, out)    # checked arguments, compiled on first use, enqueued
    saxpy.op(launch, 2.0, x, y, out).sync()  # the same, lazy: a DeviceOperation (runtime/lazy.py)

A kernel is compiled once per *specialisation*: the dtypes, ranks and contiguity of its array
arguments and the dtypes of its scalars. Module globals and closure values are frozen into the
code at the first compile (like numba). ``@fearless.func`` marks device functions, inlined where
they are called.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, overload

import numpy as np

from fearless.backends.llvm.shared_pool import pooled_bytes
from fearless.compiler import Compiled, compile_simt, show
from fearless.errors import ArgumentTypeError, ContractError, FearlessError, \
    InternalError, LaunchError
from fearless.ir import types as T
from fearless.passes import PassOptions
from fearless.kernel import base, params as P
from fearless.kernel.base import VERSION, BaseKernel, _called, _walk_functions, cached_compile
from fearless.observe import STATS
from fearless.runtime import ahead, args as args_, cache, device, dispatch, \
    launch as contracts, ownership, pack
from fearless.runtime.contract import Contract
from fearless.runtime.lazy import DeviceOperation
from fearless.runtime.module import allow_dynamic_shared, load, load_rebuilding, \
    nvjitlink_version
from fearless.runtime.ownership import refuse_while_executing
from fearless.runtime.partition import Partition
from fearless.runtime.plan import LaunchPlan
from fearless.runtime.stream import current_stream
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.simt import thread
from fearless.simt.safety import in_unsafe, unsafe  # noqa: F401 (re-exported)
from fearless.tracebacks import hide_internal_frames, user_facing



@dataclass
class _Entry:
    """What a launch needs for one argument signature: types, names, code, loaded function."""

    types: tuple
    names: list
    compiled: Compiled
    loaded: object  # runtime.module.LoadedKernel on cuda, None on cpu


class Kernel(BaseKernel):
    """A compiled-on-demand SIMT kernel. See the module docstring for use."""

    def __init__(self, fn, *, bounds_checks: bool = True, contract: Contract | None = None):
        super().__init__(fn)
        self.bounds_checks = bounds_checks
        if contract is not None and not isinstance(contract, Contract):
            raise ContractError(f"contract= takes a fl.Contract, got {contract!r}",
                                kernel=self.name)
        if contract is not None:
            contract.bind(self.name, list(inspect.signature(fn).parameters))
        self.contract = contract

    def __repr__(self) -> str:
        return f"<fearless kernel {self.name}>"

    # facts independent of argument types -----------------------------------------------------

    def _read_params(self, cap):
        return P.read(cap, "simt")

    @functools.cached_property
    def index_space(self) -> int:
        """1, 2 or 3 when the kernel (or a function it calls) uses index_1d / _2d / _3d, else 0.

        A kernel using both gets 0 here; compiling it raises the CompileError with the lines.
        Computed once (an AST walk), not at every ``prepare()``; names are frozen anyway.
        """
        spaces = self._index_spaces
        return next(iter(spaces)) if len(spaces) == 1 else 0

    @functools.cached_property
    def _index_spaces(self) -> frozenset:
        called = [o for c in _walk_functions(self.captured) for o in _called(c)]
        return frozenset(s for s, f in ((1, thread.index_1d), (2, thread.index_2d),
                                        (3, thread.index_3d)) if f in called)

    @property
    def _launch_space(self) -> int:
        """The index space ``prepare``/``launch_raw`` hold a launch to: a kernel mixing
        ``index_3d`` with another may still be launched 3-d, so that compiling it reports the
        mix with its lines (passes/contract.py)."""
        return self.index_space or (3 if 3 in self._index_spaces else 0)

    # compiling -------------------------------------------------------------------------------

    def _options(self, prove: bool = True) -> PassOptions:
        block = self.contract.block if self.contract is not None else None
        block = (block,) if isinstance(block, int) else (tuple(block) if block else None)
        return PassOptions(bounds_checks=self.bounds_checks, prove_bounds=prove, block=block)

    def compile_for(self, types: tuple, backend: str, arch: str | None = None,
                    prove: bool = True, fresh: bool = False) -> Compiled:
        """The compiled specialisation for parameter ``types`` (cached in memory and on disk).
        ``prove=False``: the variant with every read checked, run when one of the first one's
        ``bounds_preconditions`` fails at a launch (see passes/inbounds.py). ``fresh``: compile
        again without reading either cache (the driver refused what the disk cache held)."""
        return self.compiled((types, backend, arch, prove),
                             lambda: self._compile(types, backend, arch, prove, fresh), fresh)

    def _compile(self, types, backend, arch, prove: bool = True, fresh: bool = False) -> Compiled:
        params = [(p.name, t) for p, t in zip(self.params, types)]
        tools = ["cpu"] if backend == "cpu" else [_llvm_version(), nvjitlink_version(), arch]
        try:
            key = cache.digest([VERSION, cache.compiler_fingerprint(), *tools, repr(types),
                                self.bounds_checks, prove, self._contract_key(),
                                *self.fingerprint()])
            # a GPU compile continues from the cpu compile's IR when there is one (resume)
            cpu = self._compiled.get((types, "cpu", None, prove)) if backend != "cpu" else None
            return cached_compile(
                base.CONFIG, key, self.captured, types,
                lambda: compile_simt(self.captured, params, self._options(prove), arch,
                                     "passes" if backend == "cpu" else "cubin", self.contract,
                                     resume=cpu, dump=base.CONFIG.dump),
                f"kernel '{self.name}' ({', '.join(map(str, types))}) for {arch or 'cpu'}",
                keep_ir=backend == "cpu", fresh=fresh)
        except FearlessError as exc:
            raise exc.with_kernel(self.name) from None
        except Exception as exc:
            raise InternalError(f"compiling kernel '{self.name}' failed inside fearless: "
                                f"{type(exc).__name__}: {exc}") from exc

    # launching -------------------------------------------------------------------------------

    def _contract_key(self) -> str:
        return self.contract.key() if self.contract is not None else ""

    @user_facing
    def prepare(self, size, block=None, shared: int | None = None) -> contracts.PreparedLaunch:
        """Check a launch over ``size`` (``n``, ``(rows, cols)`` or ``(n0, n1, n2)``) and return
        its ticket.

        ``block``: threads per block, ``n``, ``(cols, rows)`` or ``(x, y, z)``; default the
        contract's exact block, else 256 (1-d), (32, 8) or (32, 4, 2). A 3-d size needs a
        kernel that uses ``index_3d()``. ``shared``: bytes of dynamic shared memory per block
        (``fl.shared.dynamic``); default the contract's lower bound, else 0.
        Checks, in order: the launch's rank against the contract and the kernel's index space,
        the block against the contract and the device's limits, the grid, the dynamic shared
        memory against the contract and the device, the compute capability. The registers and
        static shared memory of the compiled code depend on the argument dtypes, which the
        contract does not fix, so they are checked at the first launch of each signature.
        Raises ContractError, or CompileError when the kernel's source cannot be read.
        """
        return contracts.plan(self, self._launch_space, size, block, device.current_backend(),
                              shared, self.contract)

    def __getitem__(self, launch: contracts.PreparedLaunch) -> Callable[..., None]:
        try:  # a user-error boundary written inline, as in _call: this is the hot path too
            if not isinstance(launch, contracts.PreparedLaunch):
                raise LaunchError(f"kernel[...] takes a PreparedLaunch, got {launch!r}",
                                  kernel=self.name, help=f"launch = {self.name}.prepare(n); "
                                                         f"{self.name}[launch](...)")
            if launch.kernel is not self:
                raise contracts.ContractError(f"this PreparedLaunch was made for kernel "
                                              f"'{launch.kernel.name}'", kernel=self.name,
                                              help=f"call {self.name}.prepare(...) for this "
                                                   f"kernel")
        except FearlessError as exc:
            hide_internal_frames(exc)
            raise
        return functools.partial(self._call, launch)  # no Python frame of its own: see _call

    def _by_name(self, args: tuple, kwargs: dict) -> tuple:
        """Positional arguments with keyword arguments put in their parameters' places."""
        return tuple(P.bind(self.name, self.params, args, kwargs)) if kwargs else args

    @user_facing
    def launch_raw(self, grid, block, *args, shared: int = 0) -> None:
        """Launch ``grid`` blocks of ``block`` threads (each an int or a tuple of 1 to 3 ints, x
        first; more than one along z only for a kernel using ``index_3d()``) with ``shared`` bytes
        of dynamic shared memory, skipping the contract: the kernel's index space, exact block,
        coverage of the outputs and ``requires``. Only inside ``with fl.unsafe():`` (LaunchError
        otherwise). Still checked: the geometry's types and the device's limits
        (``runtime.launch.plan_raw``; ContractError), the arguments (ArgumentTypeError, AliasError,
        MovedError) and shared memory."""
        if not in_unsafe():
            raise LaunchError("launch_raw skips the launch checks and needs `with fl.unsafe():`",
                              kernel=self.name, help=f"use {self.name}.prepare(...) instead")
        raw = contracts.plan_raw(self, grid, block, device.current_backend(), shared,
                                 self._launch_space)
        self._launch(raw, args, checked=False)

    @user_facing
    def __call__(self, *args, **kwargs):
        raise LaunchError("a kernel is launched through a PreparedLaunch",
                          kernel=self.name,
                          help=f"launch = {self.name}.prepare(n); {self.name}[launch](...)")

    def _tensors(self, args, backend: str):
        """The key of the argument signature, and each argument as a Tensor (None for scalars).

        The fast path of every launch: a Tensor or a Python/NumPy scalar costs a few type checks.
        """
        key, tensors = [], []
        for arg in args:
            if isinstance(arg, Tensor):
                t = arg
            elif isinstance(arg, (bool, int, float, np.generic)):
                key.append((type(arg), getattr(arg, "dtype", None)))
                tensors.append(None)
                continue
            else:
                try:
                    t = as_tensor(arg)
                except TypeError:
                    t = None  # _entry() reports it with the parameter's name
                if t is None:
                    key.append(("foreign", type(arg)))
                    tensors.append(None)
                    continue
            key.append((t.dtype, t.ndim, t.is_contiguous(), t.backend))
            tensors.append(t)
        return (tuple(key), backend), tensors

    def _entry(self, args, tensors, backend: str, prove: bool = True) -> _Entry:
        """Check the arguments against the parameters and compile (the slow path, once)."""
        types = self._types(args, tensors, backend)
        names = [p.name for p in self.params]
        if backend == "cpu":
            compiled = self.compile_for(types, "cpu", None, prove)
            # for the GPUs of FEARLESS_CROSS_COMPILE or `fearless compile` too
            ahead.compile_each(self, types, {}, ahead.archs(base.CONFIG),
                               lambda arch: self.compile_for(types, "cuda", arch, prove))
            return _Entry(types, names, compiled, None)
        arch = device.cuda_arch()
        compiled, loaded = load_rebuilding(
            self.name, self.compile_for(types, "cuda", arch, prove),
            lambda: self.compile_for(types, "cuda", arch, prove, fresh=True),
            lambda c: load(self.name, c.cubin, c.ptx))
        loaded.pooled_shared = pooled_bytes(compiled.info.shared)
        if loaded.pooled_shared:  # static arrays over 48 KB live in dynamic shared memory
            allow_dynamic_shared(loaded, contracts.device_limits("cuda").max_shared_optin
                                 - loaded.static_shared_bytes)
        elif self.contract is not None and \
                self.contract.shared_range[1] > contracts.SHARED_LIMIT:
            allow_dynamic_shared(loaded, self.contract.shared_range[1])
        loaded.params = pack.ParamBuffer(compiled.info.abi)
        return _Entry(types, names, compiled, loaded)

    def _types(self, args, tensors, backend: str) -> tuple:
        """The specialisation of ``args`` (``tensors``: each as a Tensor, None for scalars):
        ArgumentTypeError for a wrong count, a scalar for an array or the reverse, an array
        not on ``backend``, a dtype or rank the annotations refuse."""
        params = self.params
        P.arity(self.name, params, len(args))
        infos = []
        for p, arg, t in zip(params, args, tensors):
            if P.is_scalar(arg):
                infos.append(P.scalar_info(arg, "simt"))
                continue
            if p.kind is P.SCALAR:
                raise ArgumentTypeError(f"expects a scalar, got {type(arg).__name__}",
                                        kernel=self.name, param=p.name)
            if t is None or t.backend != backend:
                try:
                    as_tensor(arg)
                except TypeError as exc:
                    raise ArgumentTypeError(str(exc), kernel=self.name, param=p.name) from None
                where = "host memory" if isinstance(arg, np.ndarray) else type(arg).__name__
                raise ArgumentTypeError(f"got {where}, which is not an array on the {backend} "
                                        f"backend", kernel=self.name, param=p.name,
                                        help="pass fl.asarray(x), or a CUDA array (PyTorch, "
                                             "CuPy) when the backend is cuda")
            infos.append(P.ArgInfo(t.dtype, t.ndim, t.is_contiguous()))
        return P.specialise(self.name, params, infos)

    @user_facing
    def op(self, launch, *args) -> DeviceOperation:
        """The lazy form of ``kernel[launch](*args)``: every check runs now (a bad launch raises
        here), nothing is enqueued until the returned DeviceOperation's ``.sync()``, which
        returns ``args``. A written parameter may take a Partition (moved into the operation);
        see ``fearless.runtime.lazy`` for what the operation holds while pending."""
        self[launch]  # the same ticket checks as an eager launch
        plain = [_launched(self.name, a) for a in args]
        enqueue, entry, tensors = self._checked(launch, plain, checked=True)
        reads, writes, partitions = contracts.operation_roles(self.name, entry.compiled.info.params,
                                                              args, tensors)
        return DeviceOperation(enqueue, args, reads=reads, writes=writes, partitions=partitions,
                               label=f"kernel '{self.name}'")

    def _call(self, launch, *args, **kwargs) -> None:
        """``kernel[launch](*args)``: the hot path (``runtime/plan.py``). A repeat signature
        reads each argument once and launches through its plan; anything new or unusual goes
        through ``_launch``, which checks everything and refreshes the plan. The user-error
        boundary is written inline: each call saved is ~70 ns a launch."""
        try:
            fast = launch._last[0]
            if fast is not None and not kwargs and fast(args):
                return
            if getattr(ownership._local, "executing", False):
                refuse_while_executing(f"an eager launch of kernel '{self.name}'")
            if kwargs:
                args = self._by_name(args, kwargs)
            if launch.backend == "cuda" and device._chosen == "cuda":
                readers, views, key = args_.READERS_CUDA, [], []
                for arg in args:
                    kind = type(arg)
                    if kind in args_.SCALAR_TYPES:
                        views.append(arg)
                        key.append(kind)
                        continue
                    read = readers.get(kind) or args_.reader(kind, "cuda")
                    view = read(arg, 0)
                    if view is None:
                        break
                    views.append(view)
                    key.append(view[0])
                else:
                    plan = launch._plans.get(tuple(key))
                    stream = current_stream()
                    if plan is not None and stream.capture is None and plan.admits(views):
                        launch._last[0] = plan.fast_for(args, views)
                        plan.run(args, views, stream)
                        return
            self._launch(launch, args, True)
        except FearlessError as exc:
            hide_internal_frames(exc)
            raise

    def _launch(self, launch, args, checked: bool) -> None:
        refuse_while_executing(f"an eager launch of kernel '{self.name}'")
        enqueue, entry, tensors = self._checked(launch, args, checked)
        stream = current_stream()
        if stream.capture is None:
            enqueue(stream)
            return
        written = [p.written for p in entry.compiled.info.params]  # fl.capture(): recorded
        stream.capture.add(stream, enqueue, [t for t, w in zip(tensors, written)
                                             if t is not None and not w],
                           [t for t, w in zip(tensors, written) if t is not None and w], args)

    def _checked(self, launch, args, checked: bool):
        """Every host-side check of one launch, then ``(enqueue, entry, tensors)``: calling
        ``enqueue(stream)`` puts the launch on ``stream``. On cuda it also makes the launch's
        plan, which later launches with this signature and these shapes reuse."""
        backend = device.current_backend()
        if launch.backend != backend:
            raise contracts.ContractError(f"the launch was prepared for the {launch.backend} "
                                          f"backend, but {backend} is current", kernel=self.name)
        key, tensors = self._tensors(args, backend)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._entry(args, tensors, backend)
        elif STATS.on:
            STATS.compile(self.name, entry.compiled.label, "memory")
        info = entry.compiled.info
        written = [p.written for p in info.params]
        contracts.check_arguments(self.name, info.names, written, tensors)
        pre = info.bounds_preconditions
        if pre and not dispatch.preconditions_hold(pre, info.names, tensors, launch):
            # a read proven in bounds only under this launch's sizes: run every check instead
            full = self._entries.get((key, "all checked"))
            if full is None:
                full = self._entries[(key, "all checked")] = self._entry(args, tensors, backend,
                                                                         prove=False)
            entry, info = full, full.compiled.info
        if checked:
            if self.contract is not None and self.contract.requires:
                contracts.check_requires(self.name, self.contract.requires, info.names, args)
            contracts.check_coverage(self.name, launch, info.params, tensors, info.covered())
            contracts.check_warps(self.name, launch, info.warp_full)
        contracts.check_shared(self.name, launch, info.shared, self.contract)
        if backend == "cpu":
            return self._cpu_enqueue(launch, entry, args, tensors), entry, tensors
        loaded = entry.loaded
        contracts.check_compiled(self.name, launch, loaded.registers, loaded.max_threads_per_block)
        requires = None
        if checked and self.contract is not None and self.contract.requires:
            relations, names = self.contract.requires, info.names
            requires = lambda a: contracts.check_requires(self.name, relations, names, a)  # noqa: E731
        axis = max(self.index_space, 1) - 1  # the axis a coarsened kernel repeats along
        grid = dispatch.physical_grid(launch.grid, info.coarsen, axis)
        plan = LaunchPlan(self.name, info, loaded.function, grid, launch.block,
                          launch.shared + loaded.pooled_shared, loaded.params,
                          launch.grid[axis] * launch.block[axis] if info.coarsen > 1 else 0,
                          requires)
        views = [arg if t is None else args_.of_tensor(t) for arg, t in zip(args, tensors)]
        plan.shapes = tuple(views[k][args_.SHAPE] for k in plan.arrays)
        if checked:  # a raw launch skips the contract's checks: it gets no plan
            launch._plans[tuple(type(a) if t is None else v[0]
                                for a, t, v in zip(args, tensors, views))] = plan
            launch._last[0] = plan.fast_for(args, views)
        return (lambda stream: plan.run(args, views, stream)), entry, tensors

    def _cpu_enqueue(self, launch, entry: _Entry, args, tensors):
        """``enqueue(stream)`` of a checked launch on the cpu backend: the IR interpreted."""
        values = self._scalars(entry, args)
        if ahead.compiling_ahead():
            return lambda stream: None  # `fearless compile`: no run
        sites = entry.compiled.info.bounds_sites
        from fearless.backends.cpu.simt import interpret   # imported when first needed
        return lambda stream: dispatch.launch_cpu(self.name, entry.compiled.fn, launch, values,
                                                  tensors, sites, stream, base.CONFIG.racecheck,
                                                  interpret=interpret)

    def _scalars(self, entry: _Entry, args) -> list:
        """Scalar arguments as NumPy scalars of their parameter's dtype (None for arrays), for
        the cpu backend (``args.converter``: a float never silently becomes an integer)."""
        return [args_.scalar(self.name, name, arg, ty.dtype) if isinstance(ty, T.Scalar)
                else None for name, ty, arg in zip(entry.names, entry.types, args)]

    # inspection ------------------------------------------------------------------------------

    @user_facing
    def inspect(self, stage: str, types: tuple, arch: str = "sm_90") -> str:
        """The text of one compile stage (ast, types, ir, passes, llvm, ptx, cubin, sass) for
        ``types``; sass needs nvdisasm or cuobjdump (``BackendError`` without)."""
        params = [(p.name, t) for p, t in zip(self.params, types)]
        try:
            compiled = compile_simt(self.captured, params, self._options(),
                                    arch if stage in ("llvm", "ptx", "cubin", "sass") else None,
                                    stage,
                                    self.contract)
        except FearlessError as exc:
            raise exc.with_kernel(self.name) from None
        return show(compiled, stage)


def _launched(kernel: str, arg):
    """A Partition argument's tensor (MovedError when it is held or ended); others as given."""
    if isinstance(arg, Partition):
        try:
            return arg._launch_tensor("pass it to a kernel")
        except FearlessError as exc:
            raise exc.with_kernel(kernel) from None
    return arg


def _llvm_version() -> str:
    from fearless.backends.llvm.ptx import llvm_version
    return llvm_version()


@overload
def kernel(fn: Callable[..., Any], *, unchecked: bool = False,
           contract: Contract | None = None) -> Kernel: ...


@overload
def kernel(fn: None = None, *, unchecked: bool = False,
           contract: Contract | None = None) -> Callable[[Callable[..., Any]], Kernel]: ...


@user_facing
def kernel(fn=None, *, unchecked: bool = False, contract: Contract | None = None):
    """Decorator: make ``fn`` a fearless SIMT kernel (``unchecked=True``: no read bounds checks;
    ``contract``: a ``fl.Contract`` every launch must keep, see ``runtime/contract.py``)."""
    if fn is None:
        return lambda f: kernel(f, unchecked=unchecked, contract=contract)
    return Kernel(fn, bounds_checks=not unchecked, contract=contract)


def unchecked(k: Kernel | Callable[..., Any]) -> Kernel:
    """``fl.unchecked(kernel)`` (or ``@fl.unchecked`` above ``@fl.kernel``): the same kernel with
    read bounds checks turned off. Writes stay confined to the thread's own element. Raises
    ArgumentTypeError for a foreign kernel (``fl.foreign``: fearless compiled none of its
    reads, so it has no checks to turn off)."""
    if isinstance(k, Kernel) and k.fn is None:
        raise ArgumentTypeError(f"fl.unchecked takes a @fl.kernel; '{k.name}' is a foreign "
                                f"kernel, whose reads fearless never checked",
                                kernel=k.name, help="launch it as it is, inside fl.unsafe()")
    fn = k.fn if isinstance(k, Kernel) else k
    return Kernel(fn, bounds_checks=False, contract=getattr(k, "contract", None))
