"""The TileKernel behind ``@fearless.tile.kernel``: bind -> check -> compile (cached) -> lazy launch.

    @ft.kernel
    def add(z: ft.Out[f32], x: ft.In[f32], y: ft.In[f32]):
        z.store(ft.load_like(x, z) + ft.load_like(y, z))

    z = fl.zeros(n, f32).partition(1024)     # z's old handle is moved
    z, x, y = add(z, x, y).sync()            # nothing runs until sync(); ownership comes back

A call checks everything before it returns its ``DeviceOperation``: argument kinds, dtypes and
ranks (``ArgumentTypeError``), partitions (an Out must be one; its tile shape must match a shape
in the annotation, have power-of-two extents, and every Out must give the same grid:
``ContractError``), moved tensors (``MovedError``) and aliasing between an Out or an Atomic
tensor and any other argument (``AliasError``). An Atomic tensor is held by the operation as
written until it is synced. The kernel is compiled once per specialisation: dtypes, ranks, tile
shapes, ``ft.Const`` values and, on the GPU, the layout facts of each tensor (``ir.types.Layout``:
alignment and divisibility, which decide whether tileiras can use TMA and tensor cores).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, TypeVar, overload

import numpy as np

from fearless import dtypes
from fearless.compiler import Compiled, compile_tile, show
from fearless.errors import ArgumentTypeError, ContractError, FearlessError, InternalError
from fearless.frontend.tile_params import NO_DEFAULT, ConstParam, ScalarParam, TensorParam, \
    tile_params
from fearless.ir import types as T
from fearless.kernel import base
from fearless.kernel import tile_fast
from fearless.kernel.base import VERSION, BaseKernel, cached_compile
from fearless.runtime import ahead, cache, device, launch as contracts, tile_launch
from fearless.runtime.lazy import DeviceOperation
from fearless.runtime.module import load_rebuilding
from fearless.runtime.partition import Partition
from fearless.runtime.stream import check_order
from fearless.runtime.tensor import Tensor, as_tensor
from fearless.tracebacks import user_facing



@dataclass
class _Entry:
    types: tuple          # IR types of the runtime parameters, in order
    names: list           # their names
    compiled: Compiled
    loaded: object        # runtime.module.LoadedKernel on cuda, None on cpu


class TileKernel(BaseKernel):
    """A compiled-on-demand tile kernel; calling it returns a lazy ``DeviceOperation``."""

    def __init__(self, fn, *, hints: dict | None = None):
        super().__init__(fn)
        self.hints = dict(hints or {})
        self._plans: dict = {}  # fast-path key -> tile_fast.TilePlan (cuda)

    def __repr__(self) -> str:
        return f"<fearless tile kernel {self.name}>"

    def _read_params(self, cap):
        return tile_params(cap)

    def _key_parts(self) -> list:
        return [repr(sorted(self.hints.items()))]

    # binding and checking --------------------------------------------------------------------

    def _bind(self, args, kwargs) -> list:
        params = self.params
        if len(args) > len(params):
            raise ArgumentTypeError(f"takes {len(params)} arguments, got {len(args)}",
                                    kernel=self.name)
        bound = dict(zip((p.name for p in params), args))
        for k, v in kwargs.items():
            if k in bound or k not in {p.name for p in params}:
                raise ArgumentTypeError(f"unexpected or repeated argument '{k}'",
                                        kernel=self.name)
            bound[k] = v
        out = []
        for p in params:
            if p.name in bound:
                out.append(bound[p.name])
            elif isinstance(p, ConstParam) and p.default is not NO_DEFAULT:
                out.append(p.default)
            else:
                raise ArgumentTypeError(f"missing argument '{p.name}'", kernel=self.name)
        return out

    def _tensor(self, p: TensorParam, arg, backend: str) -> Tensor:
        def fail(msg, help=None):
            raise ArgumentTypeError(msg, kernel=self.name, param=p.name, help=help)

        if p.role == "out":
            if not isinstance(arg, Partition):
                fail(f"expects a partition (ft.Out), got {type(arg).__name__}",
                     help=f"pass t.partition(tile_shape); the kernel '{self.name}' writes one "
                          f"tile per tile block")
            t = arg._launch_tensor(f"pass it to kernel '{self.name}'")
        else:
            if isinstance(arg, Partition):
                fail("expects a shared read-only tensor (ft.In), got a partition"
                     if p.role == "in" else "expects a tensor (ft.Atomic), got a partition",
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
        """Check every argument; return (types, names, constants, tensors, scalars, grid)."""
        types, names, tensors, scalars, constants = [], [], [], [], {}
        grid, grid_from, bound = None, None, {}
        for p, arg in zip(self.params, values):
            if isinstance(p, ConstParam):
                constants[p.name] = _const(self.name, p, arg)
                continue
            names.append(p.name)
            if isinstance(p, TensorParam):
                t = self._tensor(p, arg, backend)
                dt = self._bind_dtype(p, t.dtype, bound)
                tile_shape = None
                if p.role == "out":
                    tile_shape = tuple(arg.tile_shape)
                    _check_partition(self.name, p, t, tile_shape)
                    g = tuple(arg.grid)
                    if grid is not None and g != grid:
                        raise ContractError(f"its partition gives the grid {g}, but '{grid_from}'"
                                            f" gives {grid}", kernel=self.name, param=p.name,
                                            help="partition every output so that they have "
                                                 "the same number of tiles along each axis")
                    grid, grid_from = g, p.name
                types.append(T.TensorView(dt, t.ndim, T.Role(p.role), tile_shape,
                                          self._layout(t, backend, ahead)))
                tensors.append(t)
                scalars.append(None)
            else:
                dt = self._scalar_dtype(p, arg, bound)
                types.append(T.Scalar(dt))
                tensors.append(None)
                scalars.append(_scalar_value(self.name, p, arg, dt))
        contracts.check_arguments(self.name, names, [isinstance(t, T.TensorView) and
                                                     t.role.written for t in types], tensors)
        return tuple(types), names, constants, tensors, scalars, grid

    def _bind_dtype(self, p: TensorParam, dt, bound: dict):
        want = p.dtype
        if isinstance(want, TypeVar):
            if want in bound and bound[want] is not dt:
                raise ArgumentTypeError(f"has dtype {dt}, but {want.__name__} is already "
                                        f"{bound[want]}", kernel=self.name, param=p.name)
            bound[want] = dt
        elif want is not None and want is not dt:
            help = (f"partition a tensor of dtype {want}, e.g. fl.empty(shape, fl.{want})"
                    f".partition(tile)" if p.role == "out" else
                    f"convert it: fl.asarray({p.name}, fl.{want})")
            raise ArgumentTypeError(f"expects dtype {want}, got {dt}", kernel=self.name,
                                    param=p.name, help=help)
        return dt

    def _scalar_dtype(self, p: ScalarParam, arg, bound: dict):
        if not isinstance(arg, (bool, int, float, np.generic)):
            raise ArgumentTypeError(f"expects a scalar, got {type(arg).__name__}",
                                    kernel=self.name, param=p.name)
        if isinstance(p.dtype, TypeVar):
            return bound.get(p.dtype) or _tile_scalar_dtype(arg)
        return p.dtype or _tile_scalar_dtype(arg)

    # compiling -------------------------------------------------------------------------------

    def compile_for(self, types: tuple, constants: dict, backend: str,
                    arch: str | None = None, fresh: bool = False) -> Compiled:
        """The compiled specialisation (cached in memory and on disk). ``fresh``: compile again
        without reading either cache (the driver refused what the disk cache held)."""
        return self.compiled((types, tuple(sorted(constants.items())), backend, arch),
                             lambda: self._compile(types, constants, backend, arch, fresh), fresh)

    def _ir_params(self, types):
        names = [p.name for p in self.params if not isinstance(p, ConstParam)]
        return list(zip(names, types))

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
            tc = tileiras.find()
            built_by = tc.fingerprint() if tc is not None else None

            def run():
                compiled = compile_tile(self.captured, params, constants, arch, "cubin",
                                        self.hints, dump=base.CONFIG.dump)
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
        ``types``."""
        try:
            compiled = compile_tile(self.captured, self._ir_params(types), constants or {},
                                    arch if stage in ("tileir", "cubin", "sass") else None, stage,
                                    self.hints)
        except FearlessError as exc:
            raise exc.with_kernel(self.name) from None
        return show(compiled, stage)

    # calling ---------------------------------------------------------------------------------

    @user_facing
    def __call__(self, *args, **kwargs) -> DeviceOperation:
        """Check the arguments and return the lazy operation (see the module docstring). A
        repeat signature on cuda builds it from a plan (``kernel/tile_fast.py``)."""
        if not kwargs and device._chosen == "cuda":
            found = tile_fast.signature(self.params, args)
            if found is not None:
                plan = self._plans.get(found[0])
                if plan is not None:
                    op = plan.operation(found[3], found[1], found[2])
                    if op is not None:
                        return op
        values = self._bind(args, kwargs)
        backend = device.current_backend()
        only = ahead.compiling_ahead()
        types, names, constants, tensors, scalars, grid = self._signature(values, backend, only)
        runtime = [(p, v) for p, v in zip(self.params, values) if not isinstance(p, ConstParam)]
        reads = [t for (p, _), t in zip(runtime, tensors) if t is not None and p.role == "in"]
        writes = [t for (p, _), t in zip(runtime, tensors) if t is not None and
                  p.role == "atomic"]
        partitions = [v for p, v in runtime if isinstance(p, TensorParam) and p.role == "out"]
        targets = ahead.archs(base.CONFIG) if backend == "cpu" or only else ()
        if targets:  # the specialisation a GPU would compile: with the tensors' layout facts
            gpu_types = types if only else tuple(  # the checks passed: only layouts differ
                ty if t is None else replace(ty, layout=self._layout(t, backend, True))
                for ty, t in zip(types, tensors))
            ahead.compile_each(self, gpu_types, constants, targets,
                               lambda arch: self.compile_for(gpu_types, constants, "cuda", arch))
        if only:
            def enqueue(stream):
                pass  # compile-only: nothing runs
        else:
            entry = self._entry(types, names, constants, backend)
            fn, loaded, params = entry.compiled.fn, entry.loaded, entry.compiled.info.params
            written = [p.written for p in params]

            def enqueue(stream):
                check_order(stream, self.name, names, tensors, written)
                if loaded is None:
                    tile_launch.launch_cpu(fn, grid, params, tensors, scalars,
                                           base.CONFIG.racecheck)
                else:
                    tile_launch.launch_cuda(loaded, grid, tensors, scalars, stream)
            if loaded is not None and not kwargs:
                self._remember(args, types, entry)
        return DeviceOperation(enqueue, tuple(v for _, v in runtime), reads=reads,
                               writes=writes, partitions=partitions,
                               label=f"kernel '{self.name}'")

    def _remember(self, args, types, entry) -> None:
        """Keep the plan of a call the slow path accepted, under its fast-path key."""
        found = tile_fast.signature(self.params, args)
        if found is None:
            return
        runtime = [p for p in self.params if not isinstance(p, ConstParam)]
        scalar_dtypes = {k: ty.dtype for k, ty in enumerate(types) if isinstance(ty, T.Scalar)}
        self._plans[found[0]] = tile_fast.TilePlan(self.name, runtime, entry.loaded,
                                                   scalar_dtypes)

    def _entry(self, types, names, constants, backend) -> _Entry:
        key = (types, tuple(sorted(constants.items())), backend)
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
        return entry


def _tile_scalar_dtype(arg) -> dtypes.DType:
    """The dtype of an unannotated scalar argument of a tile kernel: NumPy scalars keep theirs;
    a Python float is f32 and a Python int i32 (i64 when it does not fit), as in Triton, so
    that ``t * s`` keeps an f32 tile in f32 on the GPU."""
    if isinstance(arg, np.generic) or isinstance(arg, bool):
        return dtypes.of_python_scalar(arg)
    if isinstance(arg, float):
        return dtypes.f32
    return dtypes.i32 if -(1 << 31) <= arg < (1 << 31) else dtypes.i64


def _check_partition(kernel: str, p: TensorParam, t: Tensor, tile_shape: tuple) -> None:
    if len(tile_shape) != t.ndim:
        raise ContractError(f"a {t.ndim}-d tensor partitioned into {len(tile_shape)}-d tiles",
                            kernel=kernel, param=p.name)
    if p.tile_shape is not None and tuple(p.tile_shape) != tile_shape:
        raise ContractError(f"the partition's tile shape {tile_shape} disagrees with the "
                            f"kernel's static tile shape {tuple(p.tile_shape)}",
                            kernel=kernel, param=p.name,
                            help=f"partition it with t.partition({tuple(p.tile_shape)})")
    if any(n & (n - 1) for n in tile_shape):
        raise ContractError(f"tile shape {tile_shape} has an extent that is not a power of two",
                            kernel=kernel, param=p.name,
                            help="Tile IR tiles have power-of-two extents; the edge tiles of a "
                                 "tensor may be partial, so any tensor shape works")


def _const(kernel: str, p: ConstParam, arg):
    want = p.type
    if want in (int, float, bool) and not isinstance(arg, want) or \
            (want is int and isinstance(arg, bool)):
        raise ArgumentTypeError(f"expects a compile-time {getattr(want, '__name__', want)}, "
                                f"got {arg!r}", kernel=kernel, param=p.name)
    return arg


def _scalar_value(kernel: str, p: ScalarParam, arg, dt):
    if not dt.is_float and isinstance(arg, (float, np.floating)):
        raise ArgumentTypeError(f"got the float {arg!r} for a {dt} parameter", kernel=kernel,
                                param=p.name)
    try:  # floats round once (dtypes.cast); an int that does not fit is refused
        return dtypes.cast(arg, dt) if dt.is_float else dt.numpy.type(arg)
    except (OverflowError, ValueError, TypeError) as exc:
        raise ArgumentTypeError(f"{arg!r} does not fit {dt}: {exc}", kernel=kernel,
                                param=p.name) from None


@overload
def kernel(fn: Callable[..., Any], *, hints: dict | None = None) -> TileKernel: ...


@overload
def kernel(fn: None = None, *,
           hints: dict | None = None) -> Callable[[Callable[..., Any]], TileKernel]: ...


@user_facing
def kernel(fn=None, *, hints: dict | None = None):
    """Decorator: make ``fn`` a tile kernel. ``hints``: Tile IR optimisation hints per arch,
    for example ``{"sm_90": {"num_cta_in_cga": 2, "occupancy": 1}}``."""
    if fn is None:
        return lambda f: kernel(f, hints=hints)
    return TileKernel(fn, hints=hints)
