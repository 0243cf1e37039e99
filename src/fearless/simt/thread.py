"""``fearless.thread``: the calling thread's unique index in the launch.

``index_1d()`` returns a ThreadIndex: ``blockIdx.x * blockDim.x + threadIdx.x``, unique per thread
of a launch prepared 1-d. ``index_2d()`` returns ``(row, col)``, ThreadIndex coordinates of a launch
prepared 2-d: ``col`` runs along x (fast, consecutive threads of a warp), ``row`` along y. Both are
64-bit. A ThreadIndex is the only index a DisjointSlice accepts; any arithmetic on it gives a
plain integer. Only valid inside ``@fearless.kernel`` / ``@fearless.func`` bodies.
"""
from __future__ import annotations

from fearless.errors import CompileError


def _stub(name: str):
    def stub(*args, **kwargs):
        raise CompileError(f"fearless.thread.{name}() can only be called inside a "
                           f"@fearless.kernel or @fearless.func",
                           help="launch the kernel through kernel.prepare(...) instead")
    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = __doc__
    return stub


index_1d = _stub("index_1d")
index_2d = _stub("index_2d")
