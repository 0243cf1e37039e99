"""``fearless.shared``: block-shared scratch memory (CUDA ``__shared__``).

    tile = fl.shared.array((32, 33), fl.f32)   # static shape: constant ints; one copy per block
    buf = fl.shared.dynamic(fl.f32)            # 1-d; its length is the launch's dynamic shared
                                               # bytes // itemsize: kernel.prepare(n, shared=B)

Rules the compiler proves (else it asks for ``with fl.unsafe():``): a thread writes only its own
slot, ``tile[fl.thread.index_in_block()]`` (or ``tile[ty, tx]`` from ``index_in_block_2d()``);
every read of another thread's slot is separated from the writes by ``fl.sync_threads()``,
and the next write after such a read is separated from it by a barrier too. Reads are
bounds-checked like array parameters; a write outside the array is skipped. Shared memory starts
uninitialised (poison on the cpu backend). Shared arrays also have the atomic methods of an
AtomicSlice (``tile.add(i, v)``, scope ``"block"`` by default). Only valid inside kernels.
"""
from __future__ import annotations

from fearless.simt.stub import intrinsic
from fearless.simt.views import DTypeLike, SharedArray

_intrinsic = intrinsic("fearless.shared")

__all__ = ["array", "dynamic"]


@_intrinsic
def array(shape: int | tuple[int, ...], dtype: DTypeLike) -> SharedArray:
    """A shared array of ``shape`` (positive constant ints) and ``dtype``, one copy per block.

    Static arrays of a kernel over 48 KB in all move to dynamic shared memory and opt in to the
    device's limit (227 KB per block on sm_90); a launch whose shared memory exceeds the device
    is a ContractError. A shape that is not constant is a CompileError (use ``dynamic``).
    """


@_intrinsic
def dynamic(dtype: DTypeLike) -> SharedArray:
    """The launch's dynamic shared memory as a 1-d array of ``dtype``: its length is the bytes
    given to ``kernel.prepare(n, shared=BYTES)`` divided by the itemsize. A launch without
    ``shared=`` is a ContractError."""
