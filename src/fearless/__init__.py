"""fearless: safe CUDA kernels in plain Python.

Public surface only; see ``fearless.kernel`` (SIMT kernels), ``fearless.runtime.tensor`` (tensors),
``fearless.runtime.lazy`` (DeviceOperation, ``zip``), ``fearless.runtime.graph`` (CUDA graphs),
``fearless.runtime.capture`` (``fl.capture``), ``fearless.kernel.foreign`` (``fl.foreign``:
CUDA C++, PTX and cubins launched with the same checks), ``fearless.autotuning.simt``
(``fl.autotune``, ``fl.Config``: a SIMT kernel's block and scalar values tuned) and
``fearless.errors`` (the errors).
``fl.zip`` combines operations; it keeps the builtin's name only as ``fl.zip``: no name in
``__all__`` is a builtin's, so ``from fearless import *`` replaces none. To a type checker the
dtypes are Python number types (``fl.f32`` is ``float``; see ``fearless.simt.views``), so
annotations such as ``a: fl.f32`` check.
"""
from typing import TYPE_CHECKING

from fearless import errors
from fearless.autotuning.simt import Config, autotune
# fl.math: the math functions Python's math and NumPy lack; not in __all__, where it would hide
# the math module of a ``from fearless import *``
from fearless import math
from fearless.dtypes import DType
from fearless.kernel import DeviceFunction, Kernel, func, kernel, unchecked, unsafe
from fearless.kernel import foreign  # fl.foreign.cuda / .ptx / .cubin
from fearless.runtime.contract import Contract
from fearless.runtime.device import current_backend, multiprocessor_count, set_backend
from fearless.runtime.capture import capture
from fearless.runtime.graph import Graph, graph
from fearless.runtime.lazy import DeviceOperation, zip
from fearless.runtime.launch import PreparedLaunch
from fearless.runtime.stream import Event, Stream, current_stream, stream, synchronize
from fearless.runtime.partition import Partition
from fearless.observe import STATS as stats
profile = stats.profile  # ``with fl.profile():`` times each launch (fearless/observe.py)
from fearless.runtime import stats as _stats  # registers the launch paths it counts
from fearless.runtime.tensor import Tensor, asarray, empty, full, ones, zeros
from fearless.simt import mma, shared, thread, warp
from fearless.simt.asynccopy import async_commit, async_copy, async_wait
from fearless.simt.static import static_range
from fearless.simt.params import (Array, AtomicSlice, DisjointArray, DisjointSlice, Slice,
                                  UnsafeSlice)
from fearless.simt.thread import sync_threads

if TYPE_CHECKING:
    from fearless.simt.views import (bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u16,
                                     u32, u64)
else:
    from fearless.dtypes import (bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32,
                                 u64)

from fearless.config import CONFIG as _CONFIG
from fearless.version import __version__

__all__ = [
    "kernel", "func", "unchecked", "unsafe", "foreign", "Kernel", "DeviceFunction",
    "PreparedLaunch", "Contract", "autotune", "Config",
    "thread", "shared", "warp", "mma", "sync_threads", "async_copy", "async_commit",
    "async_wait", "static_range", "Slice", "DisjointSlice", "Array", "DisjointArray",
    "AtomicSlice", "UnsafeSlice",
    "Tensor", "asarray", "empty", "zeros", "ones", "full", "Partition",
    "DeviceOperation", "graph", "Graph", "capture",
    "Stream", "Event", "stream", "current_stream", "synchronize", "current_backend", "set_backend",
    "multiprocessor_count", "stats", "profile",
    "errors", "DType", "bool_", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
    "f16", "bf16", "f32", "f64",
]

if _CONFIG.stats or _CONFIG.profile:  # FEARLESS_STATS=1: count from the first launch
    stats.enable()
    stats.profiling = _CONFIG.profile   # FEARLESS_PROFILE=1: and time each one
