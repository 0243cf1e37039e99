"""``fearless.thread``: the calling thread's position in the launch and in its block.

``index_1d()`` returns a ThreadIndex: ``blockIdx.x * blockDim.x + threadIdx.x``, unique per thread
of a launch prepared 1-d. ``index_2d()`` returns ``(row, col)``, ThreadIndex coordinates of a launch
prepared 2-d: ``col`` runs along x (fast, consecutive threads of a warp), ``row`` along y. Both are
64-bit. A ThreadIndex is the only index a DisjointSlice accepts; any arithmetic on it gives a
plain integer.

Block level (for shared memory): ``index_in_block()`` is the thread's linear slot in its block
(``threadIdx.y * blockDim.x + threadIdx.x``), the only index at which a thread may write shared
memory without ``fl.unsafe()``; ``index_in_block_2d()`` gives ``(threadIdx.y, threadIdx.x)`` as
the own-slot proof for a 2-d shared array. ``block_index(axis=0)``, ``block_dim(axis=0)``,
``grid_dim(axis=0)`` and ``thread_in_block(axis=0)`` are plain i64 values of
``blockIdx``/``blockDim``/``gridDim``/``threadIdx`` along x (0) or y (1); ``lane()`` is the lane
within the warp (0..31) and ``WARP_SIZE`` is 32. ``sync_threads()`` is ``__syncthreads()``: a
barrier every thread of the block must reach (a barrier under a condition that differs between
threads is refused at compile time).

Only valid inside ``@fearless.kernel`` / ``@fearless.func`` bodies.
"""
from __future__ import annotations

from fearless.errors import CompileError

WARP_SIZE = 32


def _stub(name: str):
    def stub(*args, **kwargs):
        where = name if "." in name else f"thread.{name}"
        raise CompileError(f"fearless.{where}() can only be called inside a "
                           f"@fearless.kernel or @fearless.func",
                           help="launch the kernel through kernel.prepare(...) instead")
    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = __doc__
    return stub


index_1d = _stub("index_1d")
index_2d = _stub("index_2d")
index_in_block = _stub("index_in_block")
index_in_block_2d = _stub("index_in_block_2d")
block_index = _stub("block_index")
block_dim = _stub("block_dim")
grid_dim = _stub("grid_dim")
thread_in_block = _stub("thread_in_block")
lane = _stub("lane")
sync_threads = _stub("sync_threads")
