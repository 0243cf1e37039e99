"""DLPack and ``__cuda_array_interface__``: handing tensors to other libraries and taking theirs.

Sits between ``memory.py`` and ``tensor.py`` and knows the protocols only, never the Tensor class:
producers take any object with ``backend``, ``shape``, ``strides`` (elements), ``dtype``
(fearless DType) and ``data_ptr()``; the consumer returns a ``Foreign`` record that
``tensor.py`` turns into a zero-copy Tensor.

Producer: DLPack's legacy ``"dltensor"`` capsule, built with ctypes (DLPack 0.8 ABI: kDLCPU and
kDLCUDA, dtype codes Int/UInt/Float/Bfloat/Bool). The capsule holds a Python reference to the
tensor until the consumer calls the deleter, or until the capsule dies unconsumed. CAI v3 dicts
for cuda tensors. Consumer: ``cuda.core.utils.StridedMemoryView`` (DLPack first, then CAI; it
orders the producer's stream before ours and keeps the producer alive).
Spec: https://dmlc.github.io/dlpack/latest/ and
https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

from fearless import dtypes
from fearless.dtypes import DType, Kind
from fearless.runtime import memory

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_MANAGED = 13
_KDL_BFLOAT = 4
_DL_CODES = {Kind.INT: 0, Kind.UINT: 1, Kind.FLOAT: 2, Kind.BOOL: 6}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_CAPSULE_NAME = b"dltensor"
# Private prototypes (argument types set here, not on ctypes.pythonapi, which others share). The
# capsule is passed as a bare address: its destructor runs at refcount zero, so no new reference
# may be taken to it.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# address of a DLManagedTensor -> (the struct, its shape/strides arrays, the tensor): the Python
# references that the deleter releases.
_LIVE: dict[int, tuple] = {}


@_DELETER
def _release(managed: int) -> None:
    _LIVE.pop(managed, None)


@_DELETER  # a PyCapsule destructor has the deleter's C signature, void (*)(void *)
def _capsule_destructor(capsule: int) -> None:
    # Still named "dltensor": nobody consumed it, so the producer must release the tensor.
    # Known limit of a ctypes destructor: CPython calls it without saving a pending exception,
    # so when a consumer raises while dropping the capsule (NumPy refusing bf16), Python code
    # cannot run here; the consumer's error turns into a SystemError (its text printed as
    # "Exception ignored") and that one export stays referenced. Only a C destructor avoids it.
    if _capsule_is_valid(capsule, _CAPSULE_NAME):
        _LIVE.pop(_capsule_pointer(capsule, _CAPSULE_NAME), None)


# A consumer may free a capsule during interpreter shutdown, after this module's globals are
# gone: the capsule name, both callbacks and the live table must outlive it, so each keeps one
# reference that is never released.
for _immortal in (_CAPSULE_NAME, _release, _capsule_destructor, _LIVE):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_immortal))
del _immortal


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-contiguous strides, in elements, for ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def dlpack_device(t) -> tuple[int, int]:
    """``(device_type, device_id)`` of a tensor: ``(1, 0)`` on cpu, ``(2, gpu)`` on cuda."""
    if t.backend == "cpu":
        return (KDL_CPU, 0)
    from fearless.runtime.device import cuda_device
    return (KDL_CUDA, cuda_device().device_id)


def _dl_dtype(dtype: DType) -> _DLDataType:
    code = _KDL_BFLOAT if dtype is dtypes.bf16 else _DL_CODES[dtype.kind]
    return _DLDataType(code=code, bits=dtype.bits, lanes=1)


def to_dlpack(t, *, stream: int | None = None, dl_device=None):
    """A legacy ``"dltensor"`` capsule describing tensor ``t`` (no copy).

    ``stream`` is the consumer's CUDA stream (an int; None or 1: legacy default, 2: per-thread,
    -1: no ordering); for cuda tensors, work already enqueued on fearless's stream is ordered
    before anything the consumer later enqueues on ``stream``. cpu tensors accept only None or
    -1. Raises BufferError when ``dl_device`` asks for another device or the stream is invalid.
    """
    device = dlpack_device(t)
    if dl_device is not None and tuple(dl_device) != device:
        raise BufferError(f"cannot export a {t.backend} tensor to DLPack device {dl_device} "
                          "without a copy")
    if t.backend == "cpu" and stream not in (None, -1):
        raise BufferError(f"stream must be None for a cpu tensor, got {stream!r}")
    if t.backend == "cuda" and stream not in (None, -1):
        if stream == 0:
            raise BufferError("stream 0 is ambiguous in DLPack; pass 1 for the legacy default")
        ours = memory.cuda_stream()
        if stream != ours.handle:
            from cuda.core import Stream as CoreStream
            CoreStream.from_handle(stream).wait(ours.core)
    ndim = len(t.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*t.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*t.strides)
    managed = _DLManagedTensor()
    managed.dl_tensor = _DLTensor(
        data=t.data_ptr(), device=_DLDevice(*device), ndim=ndim, dtype=_dl_dtype(t.dtype),
        shape=shape, strides=strides, byte_offset=0)
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, shape, strides, t)
    return _capsule_new(address, _CAPSULE_NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def exported(storage) -> bool:
    """Whether a DLPack consumer still holds an export of a tensor over ``storage``."""
    return any(entry[3]._storage is storage for entry in list(_LIVE.values()))


def cuda_array_interface(t) -> dict:
    """The CAI v3 dict of cuda tensor ``t``: byte strides, ``data`` 0 when empty, our stream.

    Raises TypeError for bf16, which has no standard CAI typestr (use DLPack instead).
    """
    if t.dtype is dtypes.bf16:
        raise TypeError("bf16 has no standard __cuda_array_interface__ typestr; "
                        "use DLPack (torch.from_dlpack / cupy.from_dlpack) instead")
    itemsize = t.dtype.itemsize
    size = 1
    for n in t.shape:
        size *= n
    return {"shape": tuple(t.shape), "strides": tuple(s * itemsize for s in t.strides),
            "typestr": t.dtype.numpy.str, "data": (t.data_ptr() if size else 0, False),
            "version": 3, "stream": memory.cuda_stream().handle}


def foreign_device(obj) -> str | None:
    """``"cuda"`` for a CUDA DLPack or CAI producer, ``"cpu"`` for a CPU DLPack producer, else None.

    Reads only ``__dlpack_device__`` / ``__cuda_array_interface__``; exports nothing.
    """
    get_device = getattr(obj, "__dlpack_device__", None)
    if callable(get_device) and hasattr(obj, "__dlpack__"):
        kind = int(get_device()[0])
        if kind in (KDL_CUDA, KDL_CUDA_MANAGED):
            return "cuda"
        if kind == KDL_CPU:
            return "cpu"
        return None
    return "cuda" if hasattr(obj, "__cuda_array_interface__") else None


class Foreign(NamedTuple):
    """Another library's array as seen through DLPack or CAI.

    ``ptr``: address of element [0,...,0]; ``strides`` in elements; ``device_id`` -1 for host
    memory; ``owner`` keeps the memory alive (the StridedMemoryView, which holds the producer).
    """
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    device_id: int
    readonly: bool
    owner: object


def view_foreign(obj, stream_ptr: int) -> Foreign:
    """View ``obj`` (DLPack or CAI producer) without a copy.

    ``stream_ptr``: the consumer stream the producer's pending work is ordered before (-1: no
    ordering, the value to use for host memory). Raises TypeError when ``obj`` speaks neither
    protocol or its dtype is one fearless does not support.
    """
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_any_interface(obj, stream_ptr)
        np_dtype = view.dtype
    except (BufferError, NotImplementedError) as exc:
        raise TypeError(f"cannot view {type(obj).__name__} through DLPack or "
                        f"__cuda_array_interface__: {exc}") from exc
    if np_dtype is None:
        raise TypeError(f"{type(obj).__name__} exports an element type fearless does not know")
    dt = dtypes.from_numpy(np_dtype)
    shape = tuple(int(n) for n in view.shape)
    strides = view.strides
    strides = (c_strides(shape) if strides is None
               else tuple(_signed_stride(int(s), dt.itemsize) for s in strides))
    return Foreign(int(view.ptr), shape, strides, dt, int(view.device_id), bool(view.readonly),
                   view)


def _signed_stride(stride: int, itemsize: int) -> int:
    # CuPy 14's DLPack export writes a negative stride as its unsigned 64-bit byte count divided
    # by the itemsize (-6 arrives as 2**61 - 6 for int64). No address space holds such a stride,
    # so read it back as the negative it was.
    nbytes = stride * itemsize
    return (nbytes - 2**64) // itemsize if nbytes >= 2**63 else stride
