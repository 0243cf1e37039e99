"""An L2 flush by a read, for timing kernels: before each timed run, ``l2_flush()``'s function
enqueues a kernel that reads twice the GPU's L2 cache (``runtime/timing.l2_flush_bytes``), so
the run starts with none of the last run's lines in L2, and none of them dirty. The read also
covers the host's enqueue of the timed run after it: on the H200 it lasts about 90 us (108 us
between CUDA events around it, its host enqueue 18 us included), where an event record and a
graph launch take tens of us, so the timed window holds no gap of host time.

Why a read and not a memset: a memset leaves L2 full of dirty lines, and the timed kernel's own
reads then evict them, writing them back inside its timed window. On the H200 that cost the
decode GEMV 7 of its 41 us at 117 MB of weights, and a device copy 3 (benchmarks/RESULTS.md,
2026-12-03): a write flush ranks kernels partly by how they bear the write-back.
"""
from __future__ import annotations

from collections.abc import Callable

from fearless.dtypes import u32
from fearless.kernel import kernel
from fearless.runtime import device, memory, timing
from fearless.runtime.contract import Contract
from fearless.runtime.tensor import empty, zeros
from fearless.simt import thread
from fearless.simt.params import DisjointSlice, Slice
from fearless.simt.static import static_range

BLOCK = 256
UNROLL = 8          # loads in flight per thread and step: one alone reads at about 1 TB/s
BLOCKS_PER_SM = 8   # 2048 threads: a full Hopper SM


@kernel(contract=Contract(dims=1, block=BLOCK))
def read_words(words: Slice[u32], seen: DisjointSlice[u32]):
    """seen[i] = the OR of words[i], words[i + T], words[i + 2 T], ... (T = len(seen), the
    launch's threads) where that OR is not zero; otherwise seen[i] is left as it was (the
    flush's words are zero, so it writes nothing: no dirty line of its own for the timed run
    to write back). Every word is read once, in coalesced steps of T words."""
    i = thread.index_1d()
    if i < len(seen):
        n = len(words)
        step = len(seen)
        a0 = u32(0)
        a1 = u32(0)
        j = i
        while j + (UNROLL - 1) * step < n:
            for k in static_range(UNROLL // 2):
                a0 = a0 | words[j + (2 * k) * step]
                a1 = a1 | words[j + (2 * k + 1) * step]
            j += UNROLL * step
        while j < n:
            a0 = a0 | words[j]
            j += step
        if (a0 | a1) != 0:
            seen[i] = a0 | a1


_made: list = []   # [(words, seen, launch)] for GPU 0 (the cuda backend's), kept for the process


def l2_flush() -> Callable[[], None] | None:
    """A function that enqueues the flush on the current stream without waiting (None on the
    cpu backend, which has no L2 to empty). The first call allocates twice the L2 (64 MiB at
    least; zeroed, so the reads see written memory) and compiles the kernel (disk cached).
    Raises BackendError from the driver."""
    if device.current_backend() != "cuda":
        return None
    if not _made:
        n = timing.l2_flush_bytes() // 4
        words = empty(n, u32)
        memory.memset(words.data_ptr(), 0, 4 * n)
        threads = device.multiprocessor_count() * BLOCKS_PER_SM * BLOCK
        _made.append((words, zeros(threads, u32), read_words.prepare(threads)))
    words, seen, launch = _made[0]
    return lambda: read_words[launch](words, seen)
