"""Launch views: what a launch reads from each array argument, through one reader per type.

A repeat launch must cost time proportional to its arguments and nothing else, so an array
argument is read once into a *view*, a plain tuple indexed by the constants below, by a reader
chosen by the argument's type (``reader(type)``, cached): a fearless Tensor hands out the view it
cached when it was made (its layout never changes); a torch tensor and a CuPy array are read
through their own attributes (pointer, shape, strides, dtype, device) without a DLPack or
``__cuda_array_interface__`` round trip, and like an export to the launch's stream the reader
orders that stream after the library's current one when they differ (``stream.follow``), so
the kernel sees what the library's pending work writes; anything else goes through ``tensor.as_tensor`` (the
protocols) once per launch.

View fields: ``KEY`` (dtype, ndim, C-contiguous: the specialisation it needs), ``PTR`` (address of
element [0,...,0]), ``SHAPE``, ``STRIDES`` (elements), ``LO``/``HI`` (the byte range the elements
span, half-open), ``OBJ`` (the object to keep alive while the GPU uses it, and the fearless
Tensor whose ownership a launch checks; the foreign array itself otherwise), ``FLAGS`` (READONLY
and OVERLAP bits: memory the producer marked read-only, elements sharing memory).

A reader returns None when the argument is not an array on ``device`` (the launcher then reports
it with the parameter's name) and raises TypeError for an array fearless cannot take.

Scalar arguments convert to their parameter's dtype in one place, ``converter`` (both tracks,
both backends, the fast and the slow path).
"""
from __future__ import annotations

import functools
import math
import sys

import numpy as np

from fearless import dtypes
from fearless.errors import ArgumentTypeError
from fearless.runtime.stream import current_stream, follow
from fearless.runtime.tensor import Tensor, _extent as element_extent, as_tensor, \
    overlaps

KEY, PTR, SHAPE, STRIDES, LO, HI, OBJ, FLAGS = range(8)
# scalar arguments a fast path takes as they are: Python's and NumPy's numbers, keyed by type
SCALAR_TYPES = frozenset((bool, int, float, *(np.dtype(c).type for c in "?bBhHiIlLqQefd")))
READONLY, OVERLAP = 1, 2


def of_tensor(t: Tensor, device: int = 0):
    """A fearless Tensor's view (cached on it: a Tensor's layout never changes). A moved
    tensor's view is still returned; the launcher checks ``_moved`` with the parameter's name."""
    view = t._launch_view
    if view is None:
        contiguous, (lo, hi), overlap = t._layout()
        flags = (READONLY if t.readonly else 0) | (OVERLAP if overlap and t.size > 1 else 0)
        view = t._launch_view = ((t.dtype, len(t.shape), contiguous),
                                 t._base_ptr + t.offset * t.dtype.itemsize, t.shape, t.strides,
                                 lo, hi, t, flags)
    return view


def _extent(ptr: int, shape, strides, itemsize: int) -> tuple[int, int]:
    """The byte range ``[lo, hi)`` the elements span (``tensor._extent`` in bytes)."""
    lo, hi = element_extent(shape, strides)
    return ptr + lo * itemsize, ptr + hi * itemsize


_TORCH_DTYPES: dict = {}


def _torch_dtypes():
    import torch
    names = {torch.bool: "bool", torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16",
             torch.int32: "i32", torch.int64: "i64", torch.float16: "f16",
             torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64"}
    for unsigned, name in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64")):
        if hasattr(torch, unsigned):
            names[getattr(torch, unsigned)] = name
    _TORCH_DTYPES.update({k: dtypes.from_name(v) for k, v in names.items()})


def of_torch(t, device: int):
    """A torch tensor's view, read through its attributes; None when it is not on GPU
    ``device``. The current stream is ordered after torch's current one (``stream.follow``).
    TypeError for a dtype fearless lacks or a negated view (``torch._neg_view``), whose memory
    does not hold its values."""
    dt = _TORCH_DTYPES.get(t.dtype)
    if t.get_device() != device:
        return None
    if dt is None or t.is_neg():
        if dt is None and not _TORCH_DTYPES:
            _torch_dtypes()
            return of_torch(t, device)
        raise TypeError(f"a torch tensor of dtype {t.dtype}" if dt is None else
                        "a negated torch view (its memory does not hold its values; "
                        "call .resolve_neg())")
    follow(current_stream(), sys.modules["torch"]._C._cuda_getCurrentRawStream(device))
    shape, strides, ptr = t.shape, t.stride(), t.data_ptr()
    contiguous = t.is_contiguous()
    size = dt.itemsize
    if contiguous:
        lo, hi, flags = ptr, ptr + t.numel() * size, 0
    else:
        lo, hi = _extent(ptr, shape, strides, size)
        flags = OVERLAP if overlaps(shape, strides) else 0
    return (dt, len(shape), contiguous), ptr, shape, strides, lo, hi, t, flags


def library_streams(objs) -> tuple[int, ...]:
    """The current streams (CUstream handles) of the libraries whose arrays are among
    ``objs`` (torch tensors, CuPy arrays; anything else is skipped), read now: a lazy
    operation's enqueue orders its stream after them (``stream.follow``), as a launch at the
    call would have been."""
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is None and cupy is None:
        return ()   # the common case of a tile operation's call: nothing to read
    handles = []
    for obj in objs:
        if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
            handles.append(torch._C._cuda_getCurrentRawStream(obj.get_device()))
        elif cupy is not None and isinstance(obj, cupy.ndarray):
            handles.append(cupy.cuda.get_current_stream().ptr)
    return tuple(dict.fromkeys(handles))


def of_cupy(a, device: int):
    """A CuPy array's view; None when it is not on GPU ``device``. The current stream is
    ordered after CuPy's current one (``stream.follow``). TypeError for a dtype fearless lacks
    or byte strides that are not whole elements."""
    if a.device.id != device:
        return None
    follow(current_stream(), sys.modules["cupy"].cuda.get_current_stream().ptr)
    dt = dtypes.from_numpy(a.dtype)
    size = dt.itemsize
    if any(s % size for s in a.strides):
        raise TypeError(f"CuPy strides {a.strides} are not multiples of the itemsize {size}")
    shape, strides, ptr = a.shape, tuple(s // size for s in a.strides), a.data.ptr
    contiguous = a.flags.c_contiguous
    if contiguous:
        lo, hi, flags = ptr, ptr + math.prod(shape) * size, 0
    else:
        lo, hi = _extent(ptr, shape, strides, size)
        flags = OVERLAP if overlaps(shape, strides) else 0
    return (dt, len(shape), contiguous), ptr, shape, strides, lo, hi, a, flags


def of_any(obj, device: int):
    """Any other array (DLPack or ``__cuda_array_interface__`` producers, NumPy arrays on the
    cpu backend), wrapped as a Tensor; None when it is not an array on the current backend."""
    t = as_tensor(obj)
    return None if t is None else of_tensor(t)


_READERS: dict = {"cuda": {Tensor: of_tensor}, "cpu": {Tensor: of_tensor}}
READERS_CUDA = _READERS["cuda"]  # the launch fast path reads it directly


def reader(kind: type, backend: str):
    """The view reader of arguments of type ``kind`` on ``backend`` (cached per type)."""
    found = _READERS[backend].get(kind)
    if found is None:
        found = _READERS[backend][kind] = _reader_of(kind, backend)
    return found


def _reader_of(kind: type, backend: str):
    if backend == "cuda":
        torch = sys.modules.get("torch")
        if torch is not None and issubclass(kind, torch.Tensor):
            return of_torch
        cupy = sys.modules.get("cupy")
        if cupy is not None and issubclass(kind, cupy.ndarray):
            return of_cupy
    return of_any


@functools.cache
def converter(dt: dtypes.DType, slot: bool = True):
    """``convert(param name, value)``: a scalar argument converted to ``dt`` by the rules of
    assignment in a kernel: a float never silently becomes an integer or a bool; floats round
    once (``dtypes.cast``); an integer, Python's or NumPy's, that ``dt`` cannot hold is refused
    (a bool parameter takes any integer: ``x != 0``). ``slot``: the value as its ABI slot takes
    it (a Python number; 16-bit floats as their bits), else a NumPy scalar of ``dt`` (what the
    cpu backend interprets). Raises ArgumentTypeError naming the parameter (the caller adds the
    kernel). One converter per (dtype, slot), made once."""
    np_type = dt.numpy.type
    is_float, is_bool = dt.is_float, dt.is_bool
    bits16 = slot and is_float and dt.bits == 16

    def convert(name, value):
        if not is_float and isinstance(value, (float, np.floating)):
            raise ArgumentTypeError(f"got the float {value!r} for a {dt} parameter", param=name,
                                    help="convert it on the host, e.g. int(x), or declare "
                                         "the parameter as a float")
        try:
            if is_float:
                v = dtypes.cast(value, dt)
            elif type(value) is int or is_bool:
                v = np_type(value)  # NumPy refuses a Python int out of range
            else:  # a NumPy integer would wrap: refuse it as its Python int is refused
                v = np_type(int(value))
        except (OverflowError, ValueError, TypeError) as exc:
            raise ArgumentTypeError(f"{value!r} does not fit {dt}: {exc}", param=name) from None
        if bits16:
            return int(v.view(np.uint16))
        return v.item() if slot else v
    return convert


def scalar(kernel: str, name: str, value, dt: dtypes.DType, slot: bool = False):
    """``converter(dt, slot)(name, value)``, its errors naming ``kernel`` too."""
    try:
        return converter(dt, slot)(name, value)
    except ArgumentTypeError as exc:
        raise exc.with_kernel(kernel) from None
