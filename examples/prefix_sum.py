"""Inclusive prefix sum (scan) of int32 values: reduce, then scan, over chunks of 1024.

Reduce-then-scan, the multi-pass baseline of D. Merrill, M. Garland, "Single-pass Parallel
Prefix Scan with Decoupled Look-back" (NVIDIA NVR-2016-002, 2016), whose single-pass look-back
is not used here because it needs spin-waits between blocks; carries as in M. Harris,
S. Sengupta, J. Owens, "Parallel Prefix Sum (Scan) with CUDA" (GPU Gems 3, ch. 39, 2007):

1. ``chunk_sums``: each block of 256 threads reads a tile of 4096 values (16 loads per thread
   in flight, thread t reading t, t + 256, ..., so every load is coalesced) and writes the sums
   of the tile's four chunks of 1024: a warp reduction per chunk, then the 8 warp totals;
   threads 0..3 of the block write its four sums (the compiler proves, from the guard
   ``t < CHUNKS``, that each sum has one writer).
2. the chunk sums, 1/1024 of the data, are scanned by the same two kernels (recursively, until
   one chunk remains);
3. ``scan_chunks``: a block of 256 threads per chunk, four elements per thread (thread t holds
   element t of each quarter, so the loads are coalesced and four are in flight): a warp scan
   of each quarter's 32-element segments with ``shuffle_up`` (Kogge-Stone, five steps), the
   chunk's 32 segment totals scanned by one more warp scan, plus the inclusive scan of the
   chunks before this one.

Each element is read twice and written once. For 2^26 values that is five launches: both
kernels over the data, both over its 65536 chunk sums, and one block over their 64 sums. Every
write is proved race-free without unsafe code: a thread's four elements of ``out`` and of the
shared ``ends``, and the chunk sums of threads 0..3, are its own (the compiler enumerates the
block's threads, ``analysis/owners.py``), and shared memory is read only after a barrier.
Integer sums wrap exactly as int32 on the host does, so the check against ``np.cumsum`` is
exact.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import i32

try:
    from examples._common import Result, check, sizes, timed
except ImportError:
    from fearless.examples._common import Result, check, sizes, timed

CHUNK = 1024                # elements per scan_chunks block
SBLOCK = 256                # scan_chunks threads per block
PER = CHUNK // SBLOCK       # scan_chunks elements per thread (loads in flight)
WARPS = SBLOCK // 32        # PER * WARPS = 32 segments of 32 elements: one warp scans them
RBLOCK = 256                # chunk_sums threads per block
ITEMS = 16                  # chunk_sums loads per thread
TILE = RBLOCK * ITEMS       # values per chunk_sums block
PER_CHUNK = CHUNK // RBLOCK             # a thread's loads that fall in one chunk
CHUNKS = TILE // CHUNK                  # chunks per chunk_sums block


@fl.kernel(contract=fl.Contract(dims=1, block=RBLOCK))
def chunk_sums(x: fl.Slice[i32], sums: fl.DisjointSlice[i32]):
    """sums[c] = sum(x[c * CHUNK:(c + 1) * CHUNK]) (wrapping), for c < ceil(len(x) / CHUNK) =
    len(sums); launch over ceil(len(x) / TILE) * RBLOCK threads."""
    t = fl.thread.index_in_block()
    lane = fl.warp.lane()
    n = len(x)
    j = fl.thread.block_index() * TILE + t
    if j + (ITEMS - 1) * RBLOCK < n:  # the thread's loads are all in x: no guard per load
        vals = tuple(x[j + k * RBLOCK] for k in range(ITEMS))
    else:
        vals = tuple(x[j + k * RBLOCK] if j + k * RBLOCK < n else fl.i32(0)
                     for k in range(ITEMS))
    part = tuple(vals[c * PER_CHUNK] for c in range(CHUNKS))  # this thread's sum per chunk
    for q in fl.static_range(1, PER_CHUNK):
        part = tuple(part[c] + vals[c * PER_CHUNK + q] for c in range(CHUNKS))
    # every lane gets its warp's total of each chunk; lane c keeps chunk c's for the block sum
    totals = tuple(fl.warp.reduce_sum(part[c]) for c in range(CHUNKS))
    keep = totals[0]
    for c in fl.static_range(1, CHUNKS):
        if lane == c:
            keep = totals[c]
    warp_totals = fl.shared.array(RBLOCK, i32)
    warp_totals[t] = keep
    fl.sync_threads()
    chunk = fl.thread.block_index() * CHUNKS + t
    if t < CHUNKS and chunk < len(sums):
        s = warp_totals[t]
        for w in fl.static_range(1, RBLOCK // 32):
            s += warp_totals[w * 32 + t]
        sums[chunk] = s  # threads 0..CHUNKS-1 own the block's CHUNKS sums


@fl.func
def warp_inclusive_scan(v, lane):
    """The inclusive scan of ``v`` over the lanes of the warp (Kogge-Stone: 5 shuffle steps)."""
    for k in fl.static_range(5):
        up = fl.warp.shuffle_up(v, 1 << k)
        if lane >= 1 << k:
            v += up
    return v


@fl.kernel(contract=fl.Contract(dims=1, block=SBLOCK))
def scan_chunks(x: fl.Slice[i32], carry: fl.Slice[i32], out: fl.DisjointSlice[i32]):
    """out[i] = x[0] + ... + x[i] (wrapping), given ``carry``, the inclusive scan of the chunk
    sums (read at the chunk before this block's; unused when there is one chunk); launch over
    ceil(len(x) / CHUNK) * SBLOCK threads: a block per chunk, PER elements per thread."""
    t = fl.thread.index_in_block()
    lane = fl.warp.lane()
    b = fl.thread.block_index()
    base = b * CHUNK
    n = len(x)
    before_chunk = carry[b - 1] if b > 0 else fl.i32(0)  # loaded first, to overlap with x
    # quarter q of the chunk is elements q * SBLOCK ..; thread t holds element t of each
    vals = tuple(x[base + q * SBLOCK + t] if base + q * SBLOCK + t < n else fl.i32(0)
                 for q in range(PER))
    scans = tuple(warp_inclusive_scan(vals[q], lane) for q in range(PER))
    ends = fl.shared.array(CHUNK, i32)
    for q in fl.static_range(PER):
        ends[q * SBLOCK + t] = scans[q]
    fl.sync_threads()
    # the chunk's PER * WARPS = 32 segments of 32 elements, in order: lane s reads segment s's
    # total, and one more warp scan gives every segment the sum of the segments before it
    total = ends[lane * 32 + 31]
    before = warp_inclusive_scan(total, lane) - total
    for q in fl.static_range(PER):
        i = base + q * SBLOCK + t
        v = scans[q] + fl.warp.shuffle(before, q * WARPS + fl.warp.index()) + before_chunk
        if i < len(out):
            out[i] = v


def scan(x: fl.Tensor, out: fl.Tensor | None = None) -> fl.Tensor:
    """The inclusive scan of the 1-d int32 tensor ``x``, into ``out`` (len(x) int32; a new
    uninitialised tensor by default), returned. Besides ``out`` it allocates only the chunk
    sums (len(x) / 1024 values, and 1/1024 of that per level of recursion), uninitialised."""
    n = len(x)
    out = fl.empty(n, i32) if out is None else out
    if n == 0:
        return out
    if n <= CHUNK:
        scan_chunks[scan_chunks.prepare(SBLOCK)](x, x, out)  # one chunk: carry is never read
        return out
    sums = fl.empty(-(-n // CHUNK), i32)
    chunk_sums[chunk_sums.prepare(-(-n // TILE) * RBLOCK)](x, sums)
    scan_chunks[scan_chunks.prepare(-(-n // CHUNK) * SBLOCK)](x, scan(sums), out)
    return out


def run(n: int | None = None, repeat: int | None = None) -> Result:
    n = n or sizes(1 << 26, 100_000)
    repeat = repeat if repeat is not None else sizes(20, 2)
    xh = np.random.default_rng(14).integers(-1000, 1000, n).astype(np.int32)
    x = fl.asarray(xh)
    first, steady = timed(lambda: scan(x), repeat)
    out = scan(x, fl.full(n, -(2**31), i32))  # poison-filled, so an unwritten element shows
    err = check("prefix_sum", out.numpy(), np.cumsum(xh, dtype=np.int32), rtol=0.0)
    return Result("prefix_sum", fl.current_backend(), f"n={n}", first, steady, 12 * n, err)


if __name__ == "__main__":
    print(run())
