"""``fearless.tile``: tile kernels (the cutile-rs model). One tile block's view of the work.

    from fearless import tile as ft, f32

    @ft.kernel
    def add(z: ft.Out[f32], x: ft.In[f32], y: ft.In[f32]):
        z.store(ft.load_like(x, z) + ft.load_like(y, z))

    z = fl.zeros(1 << 20, f32).partition(1024)   # z is moved into the partition
    z, x, y = add(z, x, y).sync()                # lazy until sync(); ownership comes back
    out = z.unpartition()

The parameter kinds and the functions a kernel body may call are documented in
``fearless.tile.lang``; the kernel object in ``fearless.kernel.tile``. ``ft.sum``, ``ft.max`` and
``ft.min`` keep the builtins' names but stay out of ``__all__``, so ``from fearless.tile import *``
never replaces the builtins.
"""
from typing import TYPE_CHECKING

from fearless.tile.lang import (Atomic, Const, In, Out, arange, argmax, broadcast, cdiv, exp,
                                exp2, full, gather, load, load_like, log, max, maximum, min,
                                minimum, mma, permute, reshape, rsqrt, scatter, sqrt, sum, tanh,
                                transpose, where, zeros)

if TYPE_CHECKING:
    from fearless.kernel.tile import TileKernel, kernel


def __getattr__(name: str):
    # The kernel object sits above the compiler, which imports this package's stubs; importing
    # it on first use (PEP 562) keeps that cycle out of import time.
    if name in ("kernel", "TileKernel"):
        from fearless.kernel import tile
        return getattr(tile, name)
    if name in ("autotune", "Config"):
        from fearless.tile import tuning
        return getattr(tuning, name)
    if name in ("persistent", "Persistent", "stream_k", "StreamK"):   # the runtime's schedules (runtime/partition.py)
        from fearless.runtime import partition
        return getattr(partition, name)
    if name == "configs":   # the default search spaces of ft.autotune (a submodule)
        import importlib
        return importlib.import_module("fearless.tile.configs")
    raise AttributeError(f"module 'fearless.tile' has no attribute {name!r}")


def __dir__() -> list:
    # the names __getattr__ imports on first use, for dir() and tab completion
    return sorted(set(globals()) | set(__all__))


__all__ = ["kernel", "TileKernel", "autotune", "Config", "configs", "persistent", "stream_k",
           "In", "Out", "Atomic", "Const", "load", "load_like", "gather",
           "scatter", "zeros", "full", "arange", "cdiv", "mma", "broadcast", "reshape", "permute",
           "transpose", "where", "exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "maximum",
           "minimum", "argmax"]
