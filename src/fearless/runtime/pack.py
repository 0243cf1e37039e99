"""One parameter buffer from a kernel's Abi, and the one ``cuLaunchKernel`` of both tracks.

``ParamBuffer(abi, offsets)`` lays the slots out at their byte offsets (given by the backend or
the driver, else each aligned to its size as in the PTX ``.param`` space) and keeps the array of
pointers to them that ``cuLaunchKernel`` takes. Its ``fill(args, word)`` is generated once per
Abi (``_filler``): a single ``struct.pack_into`` whose operands index straight into the launch's
arguments, so a launch creates no Python object per slot. ``args[i]`` is, for an array
parameter, its launch view (``runtime/args.py``: pointer, shape, strides at ``args.PTR``,
``args.SHAPE``, ``args.STRIDES``) and, for a scalar, its value already converted to the slot's
type (16-bit floats as their bits).

The driver copies the parameter values when the launch is enqueued (CUDA Driver API,
``cuLaunchKernel``: "kernelParams ... are copied"), so one buffer serves every launch of a kernel.
"""
from __future__ import annotations

import ctypes
import struct
import threading

from fearless.compiler.abi import ERROR_WORD, EXTENT, PTR, SCALAR, STRIDE, THREADS, Abi
from fearless.errors import BackendError
from fearless.runtime.args import PTR as V_PTR, SHAPE as V_SHAPE, STRIDES as V_STRIDES


class ParamBuffer:
    """A kernel's parameters packed at their ABI offsets; ``address`` is the ``void **`` that
    ``cuLaunchKernel`` takes. ``offsets``: byte offsets of the slots (None: natural
    alignment)."""

    def __init__(self, abi: Abi, offsets: list | None = None):
        self.abi = abi
        codes = [s.code for s in abi.slots]
        given = offsets if offsets is not None else abi.offsets
        fmt, at_list, offset = "<", [], 0
        for k, code in enumerate(codes):
            size = struct.calcsize(code)
            at = given[k] if given is not None else offset + (-offset % size)
            fmt, offset = fmt + "x" * (at - offset) + code, at
            at_list.append(offset)
            offset += size
        self.codes, self.offsets = codes, at_list
        self.struct = struct.Struct(fmt)
        self.buffer = ctypes.create_string_buffer(max(offset, 1))
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * max(len(at_list), 1))(*(base + o for o in at_list))
        self.address = ctypes.addressof(self.pointers)
        self.fill = _filler(abi, self.struct.pack_into, self.buffer, self.address)


def _operand(slot) -> str:
    """The Python expression of one slot's value over ``a`` (the launch's per-parameter
    arguments), ``word`` and ``threads``."""
    if slot.kind == PTR:
        return f"a[{slot.param}][{V_PTR}]"
    if slot.kind == EXTENT:
        return f"a[{slot.param}][{V_SHAPE}][{slot.axis}]"
    if slot.kind == STRIDE:
        return f"a[{slot.param}][{V_STRIDES}][{slot.axis}]"
    if slot.kind == SCALAR:
        return f"a[{slot.param}]"
    if slot.kind == ERROR_WORD:
        return "word"
    assert slot.kind == THREADS, slot
    return "threads"


def _filler(abi: Abi, pack_into, buffer, address):
    """``fill(a, word=0, threads=0) -> address``: pack one launch's values. Generated source,
    like ``collections.namedtuple``'s: the operands are slot expressions built above from the
    Abi (no user text), so each launch runs one ``pack_into`` call and nothing per slot."""
    operands = "".join(f", {_operand(s)}" for s in abi.slots)
    source = (f"def fill(a, word=0, threads=0):\n"
              f"    pack_into(buffer, 0{operands})\n"
              f"    return address\n")
    scope = {"pack_into": pack_into, "buffer": buffer, "address": address}
    exec(compile(source, f"<fearless parameter packer {abi.slots!r:.60}>", "exec"), scope)
    return scope["fill"]


_launch_kernel = _SUCCESS = None
OBSERVER = None  # fl.stats while it counts (runtime/stats.py): told of each launch, and
                 # while profiling it times each one
# per thread: (cuLaunchKernelEx, a CUlaunchConfig whose one attribute allows programmatic stream
# serialization), made at the thread's first such launch (the driver call reads the config
# without the GIL: threads must not share one)
_pdl = threading.local()


def launch(function: int, grid: tuple, block: tuple, shared: int, stream: int,
           params: int, kernel: str, pdl: bool = False) -> None:
    """Enqueue ``function`` (a CUfunction or CUkernel address) on ``stream`` (a CUstream
    address) with the packed ``params`` (a ``void **`` address): the one ``cuLaunchKernel`` of
    both tracks. ``grid`` and ``block`` have three axes. ``pdl``: a kernel compiled to wait
    for the grids it depends on before any memory access (``KernelInfo.pdl``), launched with
    ``cuLaunchKernelEx`` and CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so that it
    may start while the kernel before it on the stream finishes (CUDA programming guide,
    "Programmatic Dependent Launch"; stream capture keeps it as a programmatic graph edge).
    Raises BackendError naming ``kernel``."""
    global _launch_kernel, _SUCCESS
    observer = OBSERVER
    mark = observer.start(stream) if observer is not None else None
    if _launch_kernel is None:
        from cuda.bindings import driver
        # cuda.bindings' compiled wrapper, given plain ints: measured on the H200 2 us cheaper
        # per call than ctypes with fixed argument types (5.1 against 7.3 us)
        _launch_kernel, _SUCCESS = driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS
    err = _enqueue(function, grid, block, shared, stream, params, pdl)
    if err is not _SUCCESS and getattr(err, "name", "") == "CUDA_ERROR_INVALID_CONTEXT":
        # a thread's first launch through a plan made on another thread: the device is not
        # current here yet (device.cuda_device makes it so once per thread); nothing ran
        from fearless.runtime.device import cuda_device
        cuda_device()
        err = _enqueue(function, grid, block, shared, stream, params, pdl)
    if err is not _SUCCESS:
        raise BackendError(f"kernel '{kernel}': {'cuLaunchKernelEx' if pdl else 'cuLaunchKernel'}"
                           f" failed with {getattr(err, 'name', err)}",
                           help="run `fearless doctor`; `fearless sanitize` finds faults of "
                                "earlier kernels")
    if observer is not None:
        observer.launch(kernel)
        if mark is not None:
            observer.stop(kernel, stream, mark)


def _enqueue(function, grid, block, shared, stream, params, pdl):
    """One cuLaunchKernel(Ex); its CUresult."""
    if pdl:
        launch_ex, config = getattr(_pdl, "ex", None) or _pdl_config()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes, config.hStream = shared, stream
        return launch_ex(config, function, params, 0)[0]
    return _launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                          shared, stream, params, 0)[0]


def _pdl_config():
    """This thread's launch function and CUlaunchConfig that its PDL launches fill in (its
    fields are read by the call that takes it)."""
    from cuda.bindings import driver
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.attrs, config.numAttrs = [attr], 1
    _pdl.ex = (driver.cuLaunchKernelEx, config)
    return _pdl.ex
