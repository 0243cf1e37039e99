"""Running a compiled kernel: argument packing, the bounds-error word, cuda and cpu execution.

The error word: every bounds-checked cuda launch gets a 32-byte slot (site, index, extent, axis as
i64) in one zeroed device buffer per stream. After the next synchronisation the used slots are
read back in one copy; the first non-zero site becomes a ``KernelBoundsError`` and the slots are
zeroed again. A full buffer forces that synchronisation early (every 4096 launches at most).
The cpu backend reports the same event directly and defers the error to the same point.
"""
from __future__ import annotations

import ctypes
import functools
import struct

import numpy as np

from fearless.errors import KernelBoundsError, RaceError
from fearless.ir import types as T
from fearless.runtime import memory
from fearless.runtime.stream import Stream

SLOTS = 4096
MISALIGNED = 7  # the axis code of a misaligned ldmatrix row or async copy
SLOT_BYTES = 32


def bounds_error(kernel: str, sites, site: int, index: int, extent: int, axis: int
                 ) -> KernelBoundsError:
    param, span = sites[site - 1]
    if axis == MISALIGNED:  # ldmatrix rows and async copies move 16-byte-aligned chunks
        return KernelBoundsError(
            f"misaligned access: address offset {index} is not a multiple of {extent} bytes",
            kernel=kernel, param=param, span=span, index=index, length=extent, axis=axis,
            help="ldmatrix rows start at a multiple of 8 elements; async copies of `size` bytes "
                 "start at a multiple of `size` bytes (a sliced view may shift the base); this "
                 "access was skipped")
    where = f" along axis {axis}" if axis else ""
    return KernelBoundsError(
        f"read out of bounds: index {index}{where}, but the length is {extent}",
        kernel=kernel, param=param, span=span, index=index, length=extent, axis=axis,
        help="guard the read (if i < len(x): ...) or launch with a size that fits the inputs; "
             "this read was skipped and gave 0")


class ErrorWords:
    """The error-word slots of one stream and the launches that own them since the last sync."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self.buffer = memory.allocate(SLOTS * SLOT_BYTES, stream)
        self.base = int(self.buffer.handle)
        memory.memset(self.base, 0, SLOTS * SLOT_BYTES, stream)
        self.owners: list[tuple[str, tuple]] = []  # (kernel name, bounds sites) per used slot

    def acquire(self, kernel: str, sites, shapes: dict) -> int:
        """The device address of a fresh slot for one launch of ``kernel``; ``shapes`` maps
        array parameter names to the shapes of this launch's arguments (for the message)."""
        if len(self.owners) == SLOTS:
            self.stream.synchronize()  # runs check(), which frees every slot
        if not self.owners:
            self.stream.defer(self.check)
        self.owners.append((kernel, sites, shapes))
        return self.base + (len(self.owners) - 1) * SLOT_BYTES

    def check(self) -> None:
        used, self.owners = self.owners, []
        if not used:
            return
        words = np.zeros((len(used), 4), np.int64)
        memory.copy_device_to_host(words, self.base, words.nbytes, self.stream)
        hit = np.flatnonzero(words[:, 0])
        if hit.size:
            memory.memset(self.base, 0, words.nbytes, self.stream)
            k = int(hit[0])
            kernel, sites, shapes = used[k]
            code, index = int(words[k, 0]), int(words[k, 1])
            site, axis = code // 8, code % 8
            shape = shapes.get(sites[site - 1][0])  # None for a shared array
            if axis == MISALIGNED:  # the device writes offset * 32 + the alignment it needed
                index, extent = index // 32, index % 32
            else:
                extent = shape[axis] if shape is not None and axis < len(shape) else -1
            raise bounds_error(kernel, sites, site, index, extent, axis)


_words: dict[int, ErrorWords] = {}


def error_words(stream: Stream) -> ErrorWords:
    words = _words.get(id(stream))
    if words is None:
        words = _words[id(stream)] = ErrorWords(stream)
    return words


def forget_stream(stream: Stream) -> None:
    """Free the error-word slots of a stream that will not be used again (a graph's)."""
    _words.pop(id(stream), None)


_CODES = {"bool": "B", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "f16": "H", "bf16": "H",
          "i32": "i", "u32": "I", "f32": "f", "i64": "q", "u64": "Q", "f64": "d"}


def scalar_code(dtype) -> str:
    """The ``struct`` code of a scalar kernel parameter of ``dtype`` (16-bit floats as bits)."""
    return _CODES[dtype.name]


class ParamBuffer:
    """A kernel's parameters packed at their ABI offsets, with the array of pointers to them that
    ``cuLaunchKernel`` takes: filling it is one ``struct.pack_into``, with no Python objects per
    argument (``cuda.core.launch`` converts each argument on every call)."""

    def __init__(self, types: tuple, checked: bool, coarsened: bool):
        codes = []
        for ty in types:
            if isinstance(ty, T.Array):
                codes += ["Q"] + ["q"] * ty.ndim * (1 if ty.contiguous else 2)
            else:
                codes.append(scalar_code(ty.dtype))
        codes += (["Q"] if checked else []) + (["q"] if coarsened else [])
        self._lay_out(codes, None)

    @classmethod
    def of_codes(cls, codes: list, offsets: list | None = None) -> "ParamBuffer":
        """Parameters of struct ``codes`` at byte ``offsets`` (None: each aligned to its size,
        as in the PTX .param space). Tile kernels pass the offsets the driver reports."""
        buf = cls.__new__(cls)
        buf._lay_out(list(codes), offsets)
        return buf

    def _lay_out(self, codes: list, given: list | None) -> None:
        self.codes = codes
        fmt, offsets, offset = "<", [], 0
        for k, code in enumerate(codes):
            size = struct.calcsize(code)
            at = given[k] if given is not None else offset + (-offset % size)
            fmt, offset = fmt + "x" * (at - offset) + code, at
            offsets.append(offset)
            offset += size
        self.struct = struct.Struct(fmt)
        self.buffer = ctypes.create_string_buffer(max(offset, 1))
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * max(len(offsets), 1))(*(base + o for o in offsets))
        self.address = ctypes.addressof(self.pointers)

    def fill(self, values: list) -> int:
        self.struct.pack_into(self.buffer, 0, *values)
        return self.address

    def numpy_scalars(self, values: list) -> list:
        """The same values as NumPy scalars of exactly each parameter's width (for
        ``cuda.core.launch``, which sizes arguments by their type)."""
        return [np.dtype(code).type(v) for code, v in zip(self.codes, values)]


def preconditions_hold(preconditions, names, tensors, launch) -> bool:
    """Whether a launch's array extents meet a kernel's ``bounds_preconditions`` (see
    passes/inbounds.py): ``(array, axis, other, other axis)``, ``(array, axis, None, c)`` or
    ``(array, axis, "<threads>", grid axis)``."""
    shapes = {n: t.shape for n, t in zip(names, tensors) if t is not None}
    for name, axis, other, bound in preconditions:
        if other is None:
            need = bound
        elif other == "<threads>":
            need = launch.grid[bound] * launch.block[bound] if bound < len(launch.grid) else 1
        else:
            need = shapes[other][bound]
        if shapes[name][axis] < need:
            return False
    return True


def flat_values(types: tuple, values: list, tensors: list, dummy: int) -> list:
    """The kernel ABI's parameter values as Python numbers (see backends/llvm/lower.py).

    An empty array is passed as ``dummy``, a valid device address: bounds-checked kernels read
    element 0 in place of an out-of-bounds element and discard it, and an empty tensor's own
    pointer may be null.
    """
    out = []
    for ty, value, tensor in zip(types, values, tensors):
        if isinstance(ty, T.Array):
            out.append(tensor.data_ptr() if tensor.size else dummy)
            out.extend(tensor.shape)
            if not ty.contiguous:
                out.extend(tensor.strides)
        elif ty.dtype.bits == 16 and ty.dtype.is_float:
            out.append(int(value.view(np.uint16)))
        else:
            out.append(value.item())
    return out


@functools.lru_cache(maxsize=256)
def _config(grid: tuple, block: tuple, shared: int = 0):
    from cuda.core import LaunchConfig
    return LaunchConfig(grid=grid, block=block, shmem_size=shared)


def physical_grid(grid: tuple, coarsen: int) -> tuple:
    """The grid of a kernel whose threads each run ``coarsen`` logical threads: the last axis of
    the problem (x for 1-d, y, the rows, for 2-d) needs that many times fewer blocks."""
    if coarsen == 1:
        return grid
    axis = len(grid) - 1
    return grid[:axis] + (-(-grid[axis] // coarsen),)


def launch_cuda(kernel: str, loaded, launch, names, types, values, tensors, sites,
                stream: Stream, coarsen: int = 1):
    """Enqueue one launch on ``stream`` (asynchronous)."""
    from cuda.core import launch as core_launch

    if 0 in launch.grid:
        return
    word = 0
    if sites:
        shapes = {n: t.shape for n, t in zip(names, tensors) if t is not None}
        word = error_words(stream).acquire(kernel, sites, shapes)
    grid = physical_grid(launch.grid, coarsen)
    tail = ([word] if sites else []) + ([launch.grid[-1] * launch.block[-1]] if coarsen > 1 else [])
    flat = flat_values(types, values, tensors, word) + tail
    params = loaded.params
    shared = launch.shared + loaded.pooled_shared  # the pooled static arrays come first
    if loaded.direct:
        try:
            _driver_launch(loaded, grid, launch.block, stream, params.fill(flat), shared)
            return
        except Exception:  # this driver binding takes the call differently: use cuda.core's
            loaded.direct = False
    core_launch(stream.core, _config(grid, launch.block, shared), loaded.handle,
                *params.numpy_scalars(flat))


def _driver_launch(loaded, grid: tuple, block: tuple, stream: Stream, params: int,
                   shared: int = 0) -> None:
    from cuda.bindings import driver

    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    (err,) = driver.cuLaunchKernel(loaded.handle.handle, *g, *b, shared, stream.core.handle,
                                   params, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel: {err}")


def launch_cpu(kernel: str, fn, launch, types, values, tensors, sites, stream: Stream,
               racecheck: bool):
    """Interpret the kernel now; a bounds error is raised at the next synchronisation, a race
    (with ``racecheck``: the kernel layer passes FEARLESS_RACECHECK's) when the launch ends, a
    barrier error as it happens."""
    from fearless.backends.cpu.simt import run

    args = [t._raw_view() if t is not None else v for v, t in zip(values, tensors)]
    events = []
    races = None
    if 0 not in launch.grid:
        races = run(fn, launch.grid, launch.block, args, lambda *event: events.append(event),
                    launch.shared, racecheck)
    if races is not None and races.race is not None:
        from fearless.backends.cpu.block import launch_lanes
        lanes = launch_lanes(1, launch.grid, launch.block, 0, 1)
        text, span = races.describe(lanes.thread_name)
        raise RaceError(text, kernel=kernel, span=span,
                        help="separate the accesses with fl.sync_threads(), give each "
                             "thread its own element, or use an atomic method")
    if events:
        error = bounds_error(kernel, sites, *events[0])

        def raise_it():
            raise error
        stream.defer(raise_it)
