"""Sum of a large f32 vector: grid-stride loads, warp shuffles, shared memory, one atomic per block.

A few waves of 512-thread blocks cover the whole GPU once (``launch_threads``); each thread walks
``x`` with a stride of all the launch's threads, ``UNROLL`` independent loads per step (HBM needs
many bytes in flight per SM, Little's law), into ``UNROLL`` accumulators. Each warp then sums its
32 values with ``fl.warp.reduce_sum`` (shuffles, no shared memory), lane 0 of each warp leaves
the warp's sum in the shared slot of its own thread, and after one barrier warp 0 reduces the 16
warp sums with shuffles again; thread 0 adds the block's sum to ``total`` with one device-scope
atomic. The shared write is the thread's own slot and the reads follow the barrier, so no
``unsafe`` is needed. Shuffle reductions: J. Luitjens, "Faster Parallel Reductions on Kepler"
(NVIDIA, 2014); unrolled grid-stride loops: M. Harris, "Optimizing Parallel Reduction in CUDA"
(NVIDIA, 2007). The atomics make the order of the block sums, and so the last bits of the f32
result, vary between runs; the check allows 1e-5 relative error.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

BLOCK = 512
WARPS = BLOCK // 32
UNROLL = 8           # loads in flight per thread and step
BLOCKS_PER_SM = 4    # 2048 threads: a full H100/H200 SM


def make_block_reduce(unroll: int) -> fl.Kernel:
    """The kernel with ``unroll`` (a multiple of 4) loads in flight per thread and step; the
    benchmark compares a few."""

    @fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
    def block_reduce(x: fl.Slice[f32], total: fl.AtomicSlice[f32]):
        """total[0] += sum(x), for ``x`` of any length. Launch with
        ``block_reduce.prepare(launch_threads(len(x)))``."""
        t = fl.thread.index_in_block()
        n = len(x)
        threads = fl.thread.grid_dim() * BLOCK
        j = fl.thread.block_index() * BLOCK + t
        a0 = fl.f32(0.0)
        a1 = fl.f32(0.0)
        a2 = fl.f32(0.0)
        a3 = fl.f32(0.0)
        while j + (unroll - 1) * threads < n:
            for k in fl.static_range(unroll // 4):
                a0 += x[j + (4 * k) * threads]
                a1 += x[j + (4 * k + 1) * threads]
                a2 += x[j + (4 * k + 2) * threads]
                a3 += x[j + (4 * k + 3) * threads]
            j += unroll * threads
        while j < n:
            a0 += x[j]
            j += threads
        v = fl.warp.reduce_sum((a0 + a1) + (a2 + a3))
        part = fl.shared.array(BLOCK, f32)
        part[t] = v  # every lane holds the warp's sum; lane 0's slot is read below
        fl.sync_threads()
        if fl.warp.index() == 0:
            lane = fl.warp.lane()
            s = fl.warp.reduce_sum(part[lane * 32] if lane < WARPS else 0.0)
            if t == 0:
                total.add(0, s)

    return block_reduce


block_reduce = make_block_reduce(UNROLL)


def launch_threads(n: int, waves: int = 4) -> int:
    """Threads to launch for ``n`` elements: ``waves`` x ``BLOCKS_PER_SM`` blocks per SM of the
    current device, and no more blocks than there are elements to give them. Four waves were
    the fastest on the H200 (benchmarks/RESULTS.md)."""
    blocks = max(1, min(fl.multiprocessor_count() * BLOCKS_PER_SM * waves, -(-n // BLOCK)))
    return blocks * BLOCK


def run(n: int | None = None, repeat: int = 20) -> Result:
    n = n or sizes(1 << 26, 1 << 20)
    xh = np.random.default_rng(4).random(n, np.float32)
    x = fl.asarray(xh)
    total = fl.zeros(1, f32)
    launch = block_reduce.prepare(launch_threads(n))

    first, steady = timed(lambda: block_reduce[launch](x, total), repeat)
    total = fl.zeros(1, f32)
    block_reduce[launch](x, total)
    want = xh.astype(np.float64).sum()
    err = check("block_reduce", total.numpy(), np.array([want]), rtol=1e-5)
    return Result("block_reduce", fl.current_backend(), f"n={n}", first, steady, 4 * n, err)


if __name__ == "__main__":
    print(run())
