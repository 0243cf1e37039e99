"""Inclusive prefix sum (scan) of int32 values: a block scan with warp shuffles, plus carries.

Level 1 (``block_scan``): each warp scans its 32 values with ``shuffle_up`` (Kogge-Stone, five
steps); each thread keeps its warp-inclusive value in its own shared slot; after a barrier a
thread adds the totals of the warps before it (the last slot of each), giving the block-inclusive
scan; the block's last thread adds the block total to ``sums``. Level 2: the block totals are
scanned the same way (recursively, until one block remains), and ``add_carry`` adds to every
element the inclusive scan of the blocks before its own. Scan-then-propagate: M. Harris,
S. Sengupta, J. Owens, "Parallel Prefix Sum (Scan) with CUDA", GPU Gems 3, ch. 39 (2007).
Integer sums wrap exactly as int32 on the host does, so the check is exact. No unsafe code.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import i32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

BLOCK = 256
CONTRACT = fl.Contract(dims=1, block=BLOCK)


@fl.kernel(contract=CONTRACT)
def block_scan(x: fl.Slice[i32], out: fl.DisjointSlice[i32], sums: fl.AtomicSlice[i32]):
    i = fl.thread.index_1d()
    t = fl.thread.index_in_block()
    lane = fl.warp.lane()
    v = x[i] if i < len(x) else 0
    d = 1
    while d < 32:
        up = fl.warp.shuffle_up(v, d)
        if lane >= d:
            v += up
        d *= 2
    warp_scan = fl.shared.array(BLOCK, i32)
    warp_scan[t] = v
    fl.sync_threads()
    for w in range(fl.warp.index()):
        v += warp_scan[w * 32 + 31]
    out[i] = v
    if t == BLOCK - 1:
        sums.add(fl.thread.block_index(), v)


@fl.kernel(contract=CONTRACT)
def add_carry(carry: fl.Slice[i32], out: fl.DisjointSlice[i32]):
    i = fl.thread.index_1d()
    b = fl.thread.block_index()
    if b > 0 and i < len(out):
        out[i] = out[i] + carry[b - 1]


def scan(x: fl.Tensor) -> fl.Tensor:
    """The inclusive scan of the 1-d int32 tensor ``x`` (a new tensor)."""
    n = len(x)
    out = fl.full(n, -(2**31), i32)
    sums = fl.zeros(-(-n // BLOCK), i32)
    block_scan[block_scan.prepare(n)](x, out, sums)
    if len(sums) > 1:
        add_carry[add_carry.prepare(n)](scan(sums), out)
    return out


def run(n: int | None = None, repeat: int | None = None) -> Result:
    n = n or sizes(1 << 26, 100_000)
    repeat = repeat if repeat is not None else sizes(20, 2)
    xh = np.random.default_rng(14).integers(-1000, 1000, n).astype(np.int32)
    x = fl.asarray(xh)
    first, steady = timed(lambda: scan(x), repeat)
    err = check("prefix_sum", scan(x).numpy(), np.cumsum(xh, dtype=np.int32), rtol=0.0)
    return Result("prefix_sum", fl.current_backend(), f"n={n}", first, steady, 16 * n, err)


if __name__ == "__main__":
    print(run())
