"""``fearless.shared``: block-shared scratch memory (CUDA ``__shared__``).

    tile = fl.shared.array((32, 33), fl.f32)   # static shape: constant ints; one copy per block
    buf = fl.shared.dynamic(fl.f32)            # 1-d; its length is the launch's dynamic shared
                                               # bytes // itemsize: kernel.prepare(n, shared=B)

Rules the compiler proves (else it asks for ``with fl.unsafe():``): a thread writes only its own
slot, ``tile[fl.thread.index_in_block()]`` (or ``tile[ty, tx]`` from ``index_in_block_2d()``);
every read of another thread's slot is separated from the writes by ``fl.sync_threads()``,
and the next write after such a read is separated from it by a barrier too. Reads are
bounds-checked like array parameters; a write outside the array is skipped. Shared memory starts
uninitialised (zero on the cpu backend). Shared arrays also have the atomic methods of an
AtomicSlice (``tile.add(i, v)``, scope ``"block"`` by default). Only valid inside kernels.
"""
from __future__ import annotations

from fearless.simt.thread import _stub

array = _stub("shared.array")
dynamic = _stub("shared.dynamic")
