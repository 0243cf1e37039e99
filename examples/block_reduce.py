"""Sum of a large f32 vector: each block reduces its tile in shared memory, then one atomic add.

Each thread first sums ``ITEMS`` elements strided by the grid (so a block reads whole coalesced
rows), stores the partial sum in its own shared slot, and the block halves the active threads
at each step, with a barrier between steps, until slot 0 holds the block's sum; thread 0 adds it
to the result with a device-scope atomic. Each step reads the partner's slot into a register,
waits at a barrier, then adds it into the thread's own slot and waits again: the compiler proves
every read of another thread's slot is separated from the writes by barriers that every thread
reaches, so no ``unsafe`` is needed. The shared-memory pass also accepts the one-barrier form
``if t < stride: s[t] += s[t + stride]`` (tests/simt/test_shared.py); this example keeps the
two-barrier form that was measured on the H200 (benchmarks/RESULTS.md).
Tree reduction: M. Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007).
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

BLOCK = 256
ITEMS = 8  # elements each thread sums before the tree (several loads in flight per thread)


@fl.kernel
def block_reduce(x: fl.Slice[f32], total: fl.AtomicSlice[f32]):
    t = fl.thread.index_in_block()
    n = len(x)
    threads = fl.thread.grid_dim() * BLOCK
    base = fl.thread.block_index() * BLOCK + t
    acc = 0.0
    for k in range(ITEMS):
        j = base + k * threads
        if j < n:
            acc += x[j]
    s = fl.shared.array(BLOCK, f32)
    s[t] = acc
    fl.sync_threads()
    stride = BLOCK // 2
    while stride > 0:
        v = s[t + stride] if t < stride else 0.0
        fl.sync_threads()
        s[t] = s[t] + v
        fl.sync_threads()
        stride //= 2
    if t == 0:
        total.add(0, s[t])


def run(n: int | None = None, repeat: int = 20) -> Result:
    n = n or sizes(1 << 26, 1 << 20)
    xh = np.random.default_rng(4).random(n, np.float32)
    x = fl.asarray(xh)
    total = fl.zeros(1, f32)
    launch = block_reduce.prepare(-(-n // ITEMS), block=BLOCK)

    first, steady = timed(lambda: block_reduce[launch](x, total), repeat)
    total = fl.zeros(1, f32)
    block_reduce[launch](x, total)
    want = xh.astype(np.float64).sum()
    err = check("block_reduce", total.numpy(), np.array([want]), rtol=1e-5)
    return Result("block_reduce", fl.current_backend(), f"n={n}", first, steady, 4 * n, err)


if __name__ == "__main__":
    print(run())
