"""The TileKernel behind ``@fearless.tile.kernel``: bind -> check -> compile (cached) -> lazy launch.

    @ft.kernel
    def add(z: ft.Out[f32], x: ft.In[f32], y: ft.In[f32]):
        z.store(ft.load_like(x, z) + ft.load_like(y, z))

    z = fl.zeros(n, f32).partition(1024)     # z's old handle is moved
    z, x, y = add(z, x, y).sync()            # nothing runs until sync(); ownership comes back

A call checks everything before it returns its ``DeviceOperation``: argument kinds, dtypes and
ranks (``ArgumentTypeError``), partitions (an Out must be one; its tile shape must match a shape
in the annotation, have power-of-two extents, and every Out must give the same grid:
``ContractError``), moved tensors (``MovedError``), aliasing between an Out or an Atomic
tensor and any other argument (``AliasError``) and the kernel's ``requires=`` relations
(``ContractError``). An Atomic tensor is held by the operation as written until it is synced.
The kernel is compiled once per specialisation (``kernel/params.py``, shared with SIMT kernels):
dtypes, ranks, tile shapes, ``ft.Const`` values and, on the GPU, the layout facts of each tensor
(``ir.types.Layout``: alignment and divisibility, which decide whether tileiras can use TMA and
tensor cores).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from math import prod
from typing import Any, Callable, overload

from fearless.backends.tileir.lower import is_grouped
from fearless.compiler import Compiled, compile_tile, show
from fearless.errors import ArgumentTypeError, ContractError, FearlessError, InternalError, \
    OccupancyWarning, PerformanceWarning
from fearless.ir import types as T
from fearless.kernel import base, params as P, tile_fast
from fearless.kernel.base import VERSION, BaseKernel, cached_compile
from fearless.observe import STATS
from fearless.passes.stream_k import FIXUP, I32_LIMIT, PIECES, WHOLE
from fearless.runtime import ahead, cache, device, launch as contracts, tile_launch
from fearless.runtime.args import library_streams, scalar
from fearless.runtime.contract import check_names, requirements
from fearless.runtime.lazy import DeviceOperation
from fearless.runtime.module import load_rebuilding
from fearless.runtime.partition import Partition, StreamK, splits_every_tile
from fearless.runtime.stream import check_order, follow
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.tracebacks import user_facing, warn_user


# the first tileiras whose persistent loops keep warp specialisation (benchmarks/RESULTS.md,
# session 8: tileiras 13.4.92 drops it, and the persistent GEMM runs at half speed)
PERSISTENT_RELEASE = (13, 5)


def lost_facts(params) -> list[str]:
    """Why tileiras cannot use TMA (bulk tensor copies) for a tensor parameter, one line per
    parameter that lost a fact TMA needs (CUDA programming guide, tensor memory access: a
    16-byte-aligned base address, a unit inner stride, the other strides multiples of 16
    bytes); such a tensor's loads and stores take the slower element path (``ir.types.Layout``;
    on the H200 a GEMM ran at 22 TFLOP/s without the facts, 667 with them)."""
    lines = []
    for name, t in params:
        if not isinstance(t, T.TensorView) or t.role is T.Role.ATOMIC or t.ndim == 0:
            continue
        lay, size = t.layout, t.dtype.itemsize
        lost = []
        if lay.align < 16:
            lost.append(f"its address is {lay.align}-byte aligned, not 16")
        if not lay.unit_inner:
            lost.append("its last axis is not contiguous (stride 1)")
        outer = [k for k, d in enumerate(lay.stride_div[:-1]) if d * size < 16]
        if outer:
            lost.append(f"the stride of axis {outer[0]} is not a multiple of 16 bytes")
        if lost:
            lines.append(f"parameter '{name}': {'; '.join(lost)}, so tileiras cannot use TMA for "
                         f"it (the slower element path is still right); for full speed pass a "
                         f"contiguous tensor in fresh memory whose rows are a multiple of 16 "
                         f"bytes (pad the last axis)")
    return lines


@dataclass
class _Entry:
    types: tuple          # IR types of the runtime parameters, in order
    names: list           # their names
    compiled: Compiled
    loaded: object        # runtime.module.LoadedKernel on cuda, None on cpu


class TileKernel(BaseKernel):
    """A compiled-on-demand tile kernel; calling it returns a lazy ``DeviceOperation``."""

    def __init__(self, fn, *, hints: dict | None = None, requires=()):
        super().__init__(fn)
        self.hints = dict(hints or {})
        self.requires = requirements(requires)
        check_names(self.name, self.requires, list(inspect.signature(fn).parameters))
        self._plans: dict = {}  # fast-path key -> tile_fast.TilePlan (cuda)
        # an OccupancyWarning advises the author of a kernel's tiles: fearless's own kernels
        # (fearless.nn) choose theirs, so their callers could not act on it
        self._advises = not getattr(fn, "__module__", "").startswith("fearless.")

    def __repr__(self) -> str:
        return f"<fearless tile kernel {self.name}>"

    def _read_params(self, cap):
        return P.read(cap, "tile")

    def _key_parts(self) -> list:
        # FEARLESS_TMA=0 compiles other cubins: keep them apart in the caches
        return [repr(sorted(self.hints.items()))] + ([] if base.CONFIG.tma else ["no tma"])

    # binding and checking --------------------------------------------------------------------

    def _tensor(self, p: P.Param, arg, backend: str) -> Tensor:
        def fail(msg, help=None):
            raise ArgumentTypeError(msg, kernel=self.name, param=p.name, help=help)

        if p.kind is P.OUT:
            if not isinstance(arg, Partition):
                fail(f"expects a partition (ft.Out), got {type(arg).__name__}",
                     help=f"pass t.partition(tile_shape); the kernel '{self.name}' writes one "
                          f"tile per tile block")
            t = arg._launch_tensor(f"pass it to kernel '{self.name}'")
        else:
            if isinstance(arg, Partition):
                fail("expects a shared read-only tensor (ft.In), got a partition"
                     if p.kind is P.IN else "expects a tensor (ft.Atomic), got a partition",
                     help="pass the tensor itself")
            try:
                t = arg if isinstance(arg, Tensor) else as_tensor(arg)
            except TypeError as exc:
                fail(str(exc))
            if t is None:
                fail(f"expects a tensor, got {type(arg).__name__}")
        if t.backend != backend:
            fail(f"is on the {t.backend} backend, but {backend} is current")
        return t

    def _layout(self, t: Tensor, backend: str, ahead: bool = False) -> T.Layout:
        if backend == "cpu" and not ahead:
            return T.Layout()
        for n in (*t.shape, *t.strides):
            if abs(n) >= tile_fast.INDEX_LIMIT:
                raise ContractError(f"an extent or stride of {t.shape}/{t.strides} does not fit "
                                    f"32 bits", kernel=self.name)
        # ahead of time the host copy stands in for a device buffer, whose allocations are
        # 256-byte aligned: only the view's own offset counts
        address = t.offset * t.itemsize if ahead else t.data_ptr()
        div = tile_fast.pow2_div
        return T.Layout(div(address), tuple(div(n) for n in t.shape),
                        tuple(div(s) for s in t.strides),
                        t.ndim > 0 and (t.strides[-1] == 1 or t.shape[-1] == 1))

    def _signature(self, values, backend: str, ahead: bool = False):
        """Check every argument; return (types, names, constants, tensors, grid)."""
        infos, names, tensors, constants = [], [], [], {}
        grid, grid_from, first = None, None, None
        for p, arg in zip(self.params, values):
            if p.kind is P.CONST:
                constants[p.name] = P.const_value(self.name, p, arg)
                continue
            names.append(p.name)
            if p.kind is P.SCALAR:
                if not P.is_scalar(arg):
                    raise ArgumentTypeError(f"expects a scalar, got {type(arg).__name__}",
                                            kernel=self.name, param=p.name)
                infos.append(P.scalar_info(arg, "tile"))
                tensors.append(None)
                continue
            t = self._tensor(p, arg, backend)
            tile_shape = schedule = None
            if p.kind is P.OUT:
                tile_shape, g = tuple(arg.tile_shape), tuple(arg.grid)
                if grid is not None and g != grid:
                    raise ContractError(f"its partition gives the grid {g}, but '{grid_from}'"
                                        f" gives {grid}", kernel=self.name, param=p.name,
                                        help="partition every output so that they have "
                                             "the same number of tiles along each axis")
                if grid is not None and arg.schedule != first.schedule:
                    raise ContractError(f"its partition's schedule {arg.schedule} differs from "
                                        f"'{grid_from}''s {first.schedule}", kernel=self.name,
                                        param=p.name, help="give every output partition the "
                                                           "same schedule= (or none)")
                grid, grid_from, first = g, p.name, arg
                schedule = _schedule_type(arg.schedule,
                                          arg.one_tile_each(self.per_sm(backend)))
            infos.append(P.ArgInfo(t.dtype, t.ndim, tile_shape=tile_shape,
                                   layout=self._layout(t, backend, ahead), schedule=schedule))
            tensors.append(t)
        types = P.specialise(self.name, self.runtime_params, infos)
        contracts.check_arguments(self.name, names, [p.written for p in self.runtime_params],
                                  tensors)
        if first is not None and isinstance(first.schedule, StreamK) \
                and prod(first.grid) >= I32_LIMIT:
            raise ContractError(f"a stream-K schedule counts its output's tiles in 32 bits, and "
                                f"its partition has {prod(first.grid)} tiles",
                                kernel=self.name, param=grid_from,
                                help="use larger tiles, or schedule=ft.persistent()")
        if first is not None and first.schedule is not None:
            grid = first.launch_grid(self.per_sm(backend))
        if first is not None:
            tile_launch.check_grid(self.name, grid, is_grouped(types))
        return types, names, constants, tensors, grid

    def per_sm(self, backend: str) -> int:
        """Tile blocks per SM that a persistent launch runs by default: the ``occupancy`` hint
        for this GPU's arch, else 1."""
        if backend != "cuda":
            return 1
        return int(self.hints.get(device.cuda_arch(), {}).get("occupancy", 1))

    # compiling -------------------------------------------------------------------------------

    def compile_for(self, types: tuple, constants: dict, backend: str,
                    arch: str | None = None, fresh: bool = False) -> Compiled:
        """The compiled specialisation (cached in memory and on disk). ``fresh``: compile again
        without reading either cache (the driver refused what the disk cache held)."""
        return self.compiled((types, P.const_keys(constants), backend, arch),
                             lambda: self._compile(types, constants, backend, arch, fresh), fresh)

    def _ir_params(self, types):
        return [(p.name, t) for p, t in zip(self.runtime_params, types)]

    def cache_key(self, types: tuple, constants: dict, arch: str | None) -> str:
        """The disk-cache key of one specialisation (``arch`` None: the cpu backend's IR).

        It leaves tileiras out, so that cubins compiled ahead of time on a machine without a GPU
        (``fearless compile``) are found on a GPU machine without tileiras; each entry records
        the tileiras that built it, and a machine with another tileiras recompiles.
        """
        return cache.digest([VERSION, cache.compiler_fingerprint(), "tile", arch or "cpu",
                             repr(types), repr(sorted(constants.items())), *self.fingerprint()])

    def _compile(self, types, constants, backend, arch, fresh: bool = False) -> Compiled:
        params = self._ir_params(types)
        what = f"tile kernel '{self.name}' ({', '.join(map(str, types))}"
        what += "".join(f", {k}={v!r}" for k, v in sorted(constants.items()))
        what += f") for {arch or 'cpu'}"
        try:
            if backend == "cpu":
                return cached_compile(base.CONFIG, self.cache_key(types, constants, None),
                                      self.captured, types,
                                      lambda: compile_tile(self.captured, params, constants,
                                                           None, "passes", dump=base.CONFIG.dump),
                                      what, keep_ir=True)
            from fearless.backends.tileir import tileiras
            for why in lost_facts(params):
                warn_user(f"tile kernel '{self.name}', {why}", PerformanceWarning)
            tc = tileiras.find()
            built_by = tc.fingerprint() if tc is not None else None
            if tc is not None and tc.release() < PERSISTENT_RELEASE and any(
                    getattr(t, "schedule", None) is not None and not t.schedule.single
                    for t in types):
                warn_user(f"tile kernel '{self.name}': {tc.fingerprint()} compiles the "
                          f"loop of a persistent kernel without warp specialisation or "
                          f"asynchronous MMA (an f16 GEMM 4096^3 on the H200: 335 TFLOP/s "
                          f"persistent against 704 without; 717, 100% of cuBLAS, with "
                          f"tileiras 13.5); pip install 'nvidia-cuda-tileiras>=13.5'",
                          PerformanceWarning)

            def run():
                compiled = compile_tile(self.captured, params, constants, arch, "cubin",
                                        self.hints, dump=base.CONFIG.dump, tma=base.CONFIG.tma)
                compiled.info = replace(compiled.info, built_by=built_by)
                return compiled

            return cached_compile(base.CONFIG, self.cache_key(types, constants, arch), self.captured,
                                  types, run, what, keep_ir=False, fresh=fresh,
                                  accept=lambda hit: hit.cubin is not None and (
                                      built_by is None or hit.info.built_by == built_by))
        except FearlessError as exc:
            raise exc.with_kernel(self.name) from None
        except Exception as exc:
            raise InternalError(f"compiling tile kernel '{self.name}' failed inside fearless: "
                                f"{type(exc).__name__}: {exc}") from exc

    @user_facing
    def inspect(self, stage: str, types: tuple, constants: dict | None = None,
                arch: str = "sm_90") -> str:
        """The text of one compile stage (ast, types, ir, passes, tileir, cubin, sass) for
        ``types`` and the ``ft.Const`` values ``constants`` (by name; one left out takes its
        default, as a call does). Raises ArgumentTypeError for an unknown name or a constant
        without a default left out."""
        constants = self._constants(constants or {})
        try:
            compiled = compile_tile(self.captured, self._ir_params(types), constants,
                                    arch if stage in ("tileir", "cubin", "sass") else None, stage,
                                    self.hints, tma=base.CONFIG.tma)
        except FearlessError as exc:
            raise exc.with_kernel(self.name) from None
        return show(compiled, stage)

    def _constants(self, given: dict) -> dict:
        """Every ``ft.Const``'s value: ``given``'s, else its default (``inspect``)."""
        consts = [p for p in self.params if p.kind is P.CONST]
        unknown = sorted(set(given) - {p.name for p in consts})
        if unknown:
            raise ArgumentTypeError(f"'{unknown[0]}' is not an ft.Const parameter",
                                    kernel=self.name, param=unknown[0],
                                    help=f"its constants: {[p.name for p in consts]}")
        out = {}
        for p in consts:
            if p.name not in given and p.default is P.NO_DEFAULT:
                raise ArgumentTypeError("this ft.Const has no default, so it needs a value",
                                        kernel=self.name, param=p.name,
                                        help=f"pass constants={{'{p.name}': ...}}")
            out[p.name] = given.get(p.name, p.default)
        return out

    # calling ---------------------------------------------------------------------------------

    @user_facing
    def __call__(self, *args, **kwargs) -> DeviceOperation:
        """Check the arguments and return the lazy operation (see the module docstring). A
        repeat signature on cuda builds it from a plan (``kernel/tile_fast.py``)."""
        if device._chosen == "cuda":
            full = args if not kwargs and len(args) == len(self.params) else \
                self._positional(args, kwargs)
            found = tile_fast.signature(self.params, full, self.per_sm) \
                if full is not None else None
            if found is not None:
                plan = self._plans.get(found[0])
                if plan is not None:
                    op = plan.operation(found[3], found[1], found[2])
                    if op is not None:
                        return op
        values = P.bind(self.name, self.params, args, kwargs)
        backend = device.current_backend()
        only = ahead.compiling_ahead()
        types, names, constants, tensors, grid = self._signature(values, backend, only)
        if self.requires:
            self._check_requires([p.name for p in self.params], values)
        runtime = [(p, v) for p, v in zip(self.params, values) if p.kind is not P.CONST]
        # the cpu backend interprets NumPy scalars; a cubin's slots take Python numbers
        scalars = [None if t is not None else
                   scalar(self.name, name, v, ty.dtype, slot=backend == "cuda")
                   for name, (_, v), ty, t in zip(names, runtime, types, tensors)]
        reads = [t for (p, _), t in zip(runtime, tensors) if p.kind is P.IN]
        foreign = library_streams([v for p, v in runtime if p.kind in (P.IN, P.ATOMIC)]) \
            if backend == "cuda" else ()
        writes = [t for (p, _), t in zip(runtime, tensors) if p.kind is P.ATOMIC]
        partitions = [v for p, v in runtime if p.kind is P.OUT]
        targets = ahead.archs(base.CONFIG) if backend == "cpu" or only else ()
        if targets:  # the specialisation a GPU would compile: with the tensors' layout facts
            gpu_types = types if only else tuple(  # the checks passed: only layouts differ
                ty if t is None else replace(ty, layout=self._layout(t, backend, True))
                for ty, t in zip(types, tensors))
            for each in _either_schedule(gpu_types, partitions):
                ahead.compile_each(self, each, constants, targets,
                                   lambda arch, each=each: self.compile_for(each, constants,
                                                                            "cuda", arch))
        if only:
            def enqueue(stream):
                pass  # compile-only: nothing runs
        else:
            # one launch, or a stream-K call's launches (one entry per phase, in order)
            entries = [self._entry(each, names, constants, backend)
                       for each in _launched(types, partitions, self.per_sm(backend))]
            entry = entries[0] if entries else self._entry(types, names, constants, backend)
            loaded, params = entry.loaded, entry.compiled.info.params
            written = [p.written for p in params]
            if loaded is None:   # the cpu backend's interpreter, imported when first needed
                from fearless.backends.cpu.tile import run as interpret

            def enqueue(stream):
                check_order(stream, self.name, names, tensors, written)
                for theirs in foreign:  # torch's or CuPy's work before the call, on any stream
                    follow(stream, theirs)
                if loaded is None:
                    partials: dict = {}   # a stream-K call's workspace, across its launches
                    for each in entries:
                        tile_launch.launch_cpu(each.compiled.fn, grid, params, tensors,
                                               scalars, base.CONFIG.racecheck,
                                               interpret=interpret, partials=partials)
                    if partials:
                        raise InternalError(f"stream-K call of '{self.name}': partial sums "
                                            f"{sorted(partials)} left over")
                else:
                    for each in entries:
                        tile_launch.launch_cuda(each.loaded, grid, tensors, scalars, stream)
            if loaded is not None:   # entries: none only for a stream-K call with no launch
                self._remember(values, types, constants,
                               [each.loaded for each in entries] or [loaded])
                if self._advises and entry.compiled.info.mma:
                    self._advise(partitions, self.per_sm(backend))
        return DeviceOperation(enqueue, tuple(v for _, v in runtime), reads=reads,
                               writes=writes, partitions=partitions,
                               label=f"kernel '{self.name}'")

    def _advise(self, partitions: list, per_sm: int) -> None:
        """The OccupancyWarning of a first launch whose tiles do not suit its output
        (``tile_launch.idle_sm_advice``), if any."""
        split = _splits_every_tile(partitions, per_sm)
        if split is None:
            return
        why = tile_launch.idle_sm_advice(partitions[0].shape, partitions[0].tile_shape,
                                         prod(partitions[0].grid),
                                         device.multiprocessor_count(), split)
        if why is not None:
            warn_user(f"tile kernel '{self.name}': {why}", OccupancyWarning)

    def _positional(self, args, kwargs) -> list | None:
        """Every parameter's value by position (keywords and ``ft.Const`` defaults filled in),
        as ``params.bind`` gives them, or None for what only ``bind`` reports (an unknown,
        repeated or missing argument): the fast path's key of a call with keywords."""
        params = self.params
        if len(args) > len(params):
            return None
        out, used = list(args), 0
        for p in params[len(args):]:
            v = kwargs.get(p.name, P.NO_DEFAULT)
            if v is P.NO_DEFAULT:
                if p.default is P.NO_DEFAULT:
                    return None
                v = p.default
            else:
                used += 1
            out.append(v)
        return out if used == len(kwargs) else None

    def _check_requires(self, names: list, values) -> None:
        """Every ``requires=`` relation holds for these arguments (ContractError)."""
        contracts.check_requires(self.name, self.requires, names, values,
                                 what="the kernel's requirement",
                                 fix="change the kernel's requires=")

    def _remember(self, args, types, constants: dict, launches: list) -> None:
        """Keep the plan of a call the slow path accepted, under its fast-path key (which
        holds the constants' values: the plan's ``requires`` check reuses them); ``launches``:
        its LoadedTile, or a stream-K call's, one per launch."""
        found = tile_fast.signature(self.params, args, self.per_sm)
        if found is None:
            return
        runtime = self.runtime_params
        scalar_dtypes = {k: ty.dtype for k, ty in enumerate(types) if isinstance(ty, T.Scalar)}
        requires = None
        if self.requires:
            names = [p.name for p in runtime] + list(constants)
            fixed = tuple(constants.values())
            requires = lambda values: self._check_requires(names, values + fixed)  # noqa: E731
        self._plans[found[0]] = tile_fast.TilePlan(self.name, runtime, launches,
                                                   scalar_dtypes, requires,
                                                   self.per_sm("cuda"))

    def _entry(self, types, names, constants, backend) -> _Entry:
        key = (types, P.const_keys(constants), backend)
        entry = self._entries.get(key)
        if entry is None:
            if backend == "cpu":
                entry = _Entry(types, names, self.compile_for(types, constants, "cpu"), None)
            else:
                arch = device.cuda_arch()
                compiled, loaded = load_rebuilding(
                    self.name, self.compile_for(types, constants, "cuda", arch),
                    lambda: self.compile_for(types, constants, "cuda", arch, fresh=True),
                    lambda c: tile_launch.load_tile(self.name, c.cubin, c.info))
                entry = _Entry(types, names, compiled, loaded)
            self._entries[key] = entry
        elif STATS.on:
            STATS.compile(self.name, entry.compiled.label, "memory")
        return entry


def _schedule_type(schedule, single: bool) -> T.Persistent | None:
    """The compiled kernel's type of a partition's ``schedule`` (None: one tile per block). One
    tile per block (``single``) compiles alike whatever the order, so it has one type (stream-K's
    another: its compile also refuses a loop it could not split, so that whether a kernel
    compiles does not depend on the size of its output). A stream-K schedule's is its first
    launch's (whole tiles); ``_phase`` gives the others."""
    if schedule is None:
        return None
    stream_k = isinstance(schedule, StreamK)
    if single:
        return T.Persistent(stream_k=stream_k, single=True, phase=WHOLE if stream_k else 0)
    order = schedule.order
    return T.Persistent(order, schedule.group if order == "grouped" else 1, stream_k,
                        phase=WHOLE if stream_k else 0)


def _is_stream_k(partitions: list) -> bool:
    return bool(partitions) and isinstance(partitions[0].schedule, StreamK)


def _splits_every_tile(partitions: list, per_sm: int) -> bool | None:
    """``runtime/partition.splits_every_tile`` of a launch over ``partitions`` (None for no
    partition)."""
    if not partitions:
        return None
    return splits_every_tile(partitions[0].stream_k_phases(per_sm)
                             if _is_stream_k(partitions) else ())


def _phase(types: tuple, phase: int) -> tuple:
    """``types`` with the Out partitions' stream-K schedule set to launch ``phase``."""
    schedule = next(ty.schedule for ty in types if getattr(ty, "schedule", None) is not None)
    return _with_schedule(types, replace(schedule, phase=phase))


def _with_schedule(types: tuple, schedule: T.Persistent) -> tuple:
    """``types`` with the Out partitions' compiled schedule replaced by ``schedule``."""
    return tuple(replace(ty, schedule=schedule) if getattr(ty, "schedule", None) is not None
                 else ty for ty in types)


def _launched(types: tuple, partitions: list, per_sm: int) -> list[tuple]:
    """The types of each launch a call makes, in order: ``types``, or a stream-K call's
    phases (``Partition.stream_k_phases``) unless it runs one block per tile (an empty output
    too: its launch runs no block)."""
    if not _is_stream_k(partitions) or partitions[0].one_tile_each(per_sm):
        return [types]   # one block per tile: the persistent form (``_schedule_type``)
    return [_phase(types, ph) for ph in partitions[0].stream_k_phases(per_sm)]


def _either_schedule(types: tuple, partitions: list) -> list[tuple]:
    """``types`` in each compiled form its launch may take: a compile ahead of the GPU
    (``fearless compile``, the cpu backend's cross-compile) does not know the GPU's SM count,
    which decides whether each block has one tile (``Partition.one_tile_each``), so for a
    persistent launch it builds both forms; for a stream-K call, also its pieces and fixup
    launches (whether they run depends on the SM count too)."""
    schedule = partitions[0].schedule if partitions else None
    if schedule is None:
        return [types]
    forms = [_schedule_type(schedule, False), _schedule_type(schedule, True)]
    if isinstance(schedule, StreamK):
        forms += [replace(forms[0], phase=ph) for ph in (PIECES, FIXUP)]
    return [_with_schedule(types, form) for form in forms]


@overload
def kernel(fn: Callable[..., Any], *, hints: dict | None = None,
           requires: Any = ()) -> TileKernel: ...


@overload
def kernel(fn: None = None, *, hints: dict | None = None,
           requires: Any = ()) -> Callable[[Callable[..., Any]], TileKernel]: ...


@user_facing
def kernel(fn=None, *, hints: dict | None = None, requires=()):
    """Decorator: make ``fn`` a tile kernel. ``hints``: Tile IR optimisation hints per arch,
    for example ``{"sm_90": {"num_cta_in_cga": 2, "occupancy": 1}}``. ``requires``: size
    relations between parameters (one, or a tuple), as in ``fl.Contract(requires=...)``: a
    comparison over parameter names, ``len(tensor)`` (its first extent), integer literals and
    ``+ - * //``, as a string or a lambda; checked at every call before anything is enqueued, a
    failure is a ContractError showing both sides. Raises ContractError at decoration for a
    relation outside that grammar or naming something other than a parameter."""
    if fn is None:
        return lambda f: kernel(f, hints=hints, requires=requires)
    return TileKernel(fn, hints=hints, requires=requires)
