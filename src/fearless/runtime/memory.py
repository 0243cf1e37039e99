"""Device memory: allocation, host<->device copies and memset on a CUDA stream.

The layer under ``tensor.py``: it knows byte addresses and byte counts, never shapes or dtypes.
Allocation goes through cuda.core (``Device.allocate``, stream-ordered, from the device's memory
pool); copies and memset go straight to ``cuda.bindings.driver`` so a pointer into the middle of
a buffer (a view) needs no wrapper object. Every driver failure becomes a ``BackendError`` that
names the call and its ``CUresult``.

Host buffers passed in must be C-contiguous NumPy arrays; their size is checked against the byte
count so a bad call cannot read or write past them.
"""
from __future__ import annotations

import numpy as np

from fearless.errors import BackendError
from fearless.runtime import device
from fearless.runtime.stream import Stream, current_stream, default_stream


OBSERVER = None  # fl.stats while it counts (runtime/stats.py): told of each allocation

def cuda_stream() -> Stream:
    """The stream cuda tensors' copies are ordered on.

    The current stream while the cuda backend is current; inside ``fl.capture()``, the stream
    that was current when the block began (memory allocated, filled or copied on the capturing
    stream would become nodes of the graph: ``capture.py``); after a switch to the cpu
    backend (a cuda tensor made earlier is still used), the device's default stream, where
    that tensor's work was enqueued. Raises BackendError when no usable GPU is present.
    """
    if device.current_backend() == "cuda":
        stream = current_stream()
        return stream if stream.capture is None else stream.capture.origin
    return default_stream("cuda")


def check_result(result, call: str) -> None:
    """Raise BackendError unless the driver call's ``CUresult`` (first item of ``result``) is 0."""
    from cuda.bindings import driver

    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", None) or f"CUresult {int(err)}"
        raise BackendError(f"{call} failed with {name}",
                           help="an earlier kernel may have faulted; `fearless sanitize` finds it")


def allocate(nbytes: int, stream: Stream | None = None):
    """Allocate ``nbytes`` bytes of device memory; returns the cuda.core ``Buffer`` that owns it.

    The memory is stream-ordered on ``stream`` (default: ``cuda_stream()``) and freed when the
    Buffer is garbage collected, so keep a reference for as long as the address is used. Zero
    bytes still allocate one byte, so every tensor has a real, distinct address. Raises
    BackendError (no GPU, out of memory).
    """
    if nbytes < 0:
        raise ValueError(f"cannot allocate {nbytes} bytes")
    stream = stream or cuda_stream()
    try:
        buffer = device.cuda_device().allocate(max(nbytes, 1), stream=stream.core)
    except BackendError:
        raise
    except Exception as exc:  # cuda.core raises CUDAError / MemoryError with the driver's text
        raise BackendError(f"allocating {nbytes} bytes of device memory failed: {exc}",
                           help="free tensors you no longer need, or use smaller ones") from exc
    if OBSERVER is not None:
        OBSERVER.allocation(buffer, max(nbytes, 1))
    return buffer


class StreamOrdered:
    """A tensor's device memory, freed behind the work of the stream it was allocated on:
    dropping the last reference calls ``Buffer.close(stream)`` (``cuMemFreeAsync`` on that
    stream), so the pool hands the memory out again only to work ordered after every launch
    enqueued on that stream before the drop. A buffer used only on its own stream therefore
    needs nothing else kept alive while the GPU catches up (``lazy.py``'s leases)."""

    __slots__ = ("buffer", "stream")

    def __init__(self, buffer, stream: Stream):
        self.buffer, self.stream = buffer, stream

    def __del__(self):
        try:
            self.buffer.close(self.stream.core)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the context is already gone
            pass


def _host_ptr(arr: np.ndarray, nbytes: int, writable: bool) -> int:
    if not arr.flags.c_contiguous or arr.nbytes < nbytes:
        raise ValueError(f"host buffer must be C-contiguous with at least {nbytes} bytes, "
                         f"got {arr.nbytes} bytes (contiguous={arr.flags.c_contiguous})")
    if writable and not arr.flags.writeable:
        raise ValueError("host destination buffer is read-only")
    return arr.ctypes.data


def copy_host_to_device(dst: int, src: np.ndarray, nbytes: int, stream: Stream | None = None
                        ) -> None:
    """Copy ``nbytes`` bytes from the C-contiguous host array ``src`` to device address ``dst``.

    Synchronous: returns after the copy completed (waits for ``stream``), so ``src`` may be freed
    or changed at once. Raises ValueError (bad host buffer) or BackendError.
    """
    from cuda.bindings import driver

    src_ptr = _host_ptr(src, nbytes, writable=False)
    if nbytes == 0:
        return
    stream = stream or cuda_stream()
    device.cuda_device()  # current on this thread (a worker thread's first copy)
    check_result(driver.cuMemcpyHtoDAsync(dst, src_ptr, nbytes, stream.handle),
                 "cuMemcpyHtoDAsync")
    stream.core.sync()


def copy_device_to_host(dst: np.ndarray, src: int, nbytes: int, stream: Stream | None = None
                        ) -> None:
    """Copy ``nbytes`` bytes from device address ``src`` into the C-contiguous host array ``dst``.

    Synchronous: waits for ``stream`` (and so for the kernels enqueued before the copy). Deferred
    kernel checks are not run here; ``Tensor.numpy()`` runs them first. Raises ValueError (bad
    host buffer) or BackendError.
    """
    from cuda.bindings import driver

    dst_ptr = _host_ptr(dst, nbytes, writable=True)
    if nbytes == 0:
        return
    stream = stream or cuda_stream()
    device.cuda_device()  # current on this thread (a worker thread's first copy)
    check_result(driver.cuMemcpyDtoHAsync(dst_ptr, src, nbytes, stream.handle),
                 "cuMemcpyDtoHAsync")
    stream.core.sync()


def copy_device_to_device(dst: int, src: int, nbytes: int, stream: Stream | None = None) -> None:
    """Enqueue a copy of ``nbytes`` bytes from device address ``src`` to ``dst`` (asynchronous)."""
    from cuda.bindings import driver

    if nbytes == 0:
        return
    stream = stream or cuda_stream()
    device.cuda_device()  # current on this thread (a worker thread's first copy)
    check_result(driver.cuMemcpyDtoDAsync(dst, src, nbytes, stream.handle), "cuMemcpyDtoDAsync")


def memset(dst: int, byte: int, nbytes: int, stream: Stream | None = None) -> None:
    """Enqueue setting ``nbytes`` bytes at device address ``dst`` to ``byte`` (0..255)."""
    from cuda.bindings import driver

    if not 0 <= byte <= 255:
        raise ValueError(f"memset byte must be in 0..255, got {byte}")
    if nbytes == 0:
        return
    stream = stream or cuda_stream()
    device.cuda_device()  # current on this thread (a worker thread's first copy)
    check_result(driver.cuMemsetD8Async(dst, byte, nbytes, stream.handle), "cuMemsetD8Async")
