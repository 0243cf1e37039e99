"""Histogram of a real photograph (matplotlib's sample portrait of Grace Hopper), 256 bins;
without the ``demo`` extra, of the test pattern ``image_filter.generated_pattern()``.

A privatised histogram (N. Sakharnykh, "GPU Pro Tip: Fast Histograms Using Shared Atomics on
Maxwell", NVIDIA blog, 2015; CUB's ``DeviceHistogram`` privatises per block the same way),
with one private copy per warp instead of per block: a few waves of blocks
walk the pixels with a grid stride, each thread keeping ``UNROLL`` independent loads in flight
per step; every warp counts into its own 256-bin sub-histogram in shared memory with
block-scope atomics (warps never contend for one counter, so only the lanes of a warp that see
the same value serialise); at the end the first 256 threads each sum one bin over the warps'
copies and add it to the global histogram with one device-scope atomic when it is nonzero.
Global atomics: at most 256 per block, with ``BLOCKS_PER_SM`` blocks per SM in all.
Checked exactly against ``np.bincount``. No unsafe code: the shared array is only touched by
atomics (zeroing included) until a barrier, after which it is only read.
"""
from __future__ import annotations

import numpy as np

import fearless as fl
from fearless import u8, u32

try:
    from examples._common import Result, check, timed
    from examples.image_filter import picture
except ImportError:
    from fearless.examples._common import Result, check, timed
    from fearless.examples.image_filter import picture

BINS = 256
BLOCK = 512                 # 16 warps, so 16 sub-histograms: 16 KB of shared memory per block
WARPS = BLOCK // 32
UNROLL = 16                 # pixel loads in flight per thread and step of the grid-stride loop
BLOCKS_PER_SM = 2           # 1024 threads per SM: one wave, even if ptxas needs 64 registers


@fl.kernel(contract=fl.Contract(dims=1, block=BLOCK))
def histogram(pixels: fl.Slice[u8], counts: fl.AtomicSlice[u32]):
    """counts[v] += the number of pixels equal to v, for a launch of any multiple of BLOCK
    threads (``threads(n)`` gives a good one). ``pixels``: u8 of any length; ``counts``: 256
    u32, accumulated into (zero it first for a fresh histogram)."""
    t = fl.thread.index_in_block()
    local = fl.shared.array(WARPS * BINS, u32)  # warp w's copy is local[w * BINS:(w + 1) * BINS]
    for k in fl.static_range(WARPS * BINS // BLOCK):
        local.exchange(k * BLOCK + t, 0)  # atomics: a plain store may only hit the own slot
    fl.sync_threads()
    mine = fl.warp.index() * BINS
    n = len(pixels)
    threads = fl.thread.grid_dim() * BLOCK
    j = fl.thread.block_index() * BLOCK + t
    while j + (UNROLL - 1) * threads < n:
        # all loads first, then the atomics, so the loads overlap in memory
        vals = tuple(pixels[j + k * threads] for k in range(UNROLL))
        for k in fl.static_range(UNROLL):
            local.add(mine + vals[k], 1)
        j += UNROLL * threads
    while j < n:
        local.add(mine + pixels[j], 1)
        j += threads
    fl.sync_threads()
    if t < BINS:
        c = local[t]
        for w in fl.static_range(1, WARPS):
            c += local[w * BINS + t]
        if c > 0:
            counts.add(t, c)


def threads(n: int, sms: int | None = None) -> int:
    """The threads to launch ``histogram`` with over ``n`` pixels on a GPU of ``sms`` SMs
    (default: the current device's, ``fl.multiprocessor_count()``): BLOCKS_PER_SM blocks per
    SM, fewer when that would give a thread less than one step of UNROLL pixels, and at least
    one block."""
    sms = sms or fl.multiprocessor_count()
    blocks = max(1, min(sms * BLOCKS_PER_SM, -(-n // (BLOCK * UNROLL))))
    return blocks * BLOCK


def run(repeat: int = 10) -> Result:
    photo, missing = picture()
    img = np.round(photo * 255.0).astype(np.uint8).ravel()
    pixels = fl.asarray(img)
    launch = histogram.prepare(threads(img.size))
    counts = fl.zeros(BINS, u32)
    first, steady = timed(lambda: histogram[launch](pixels, counts), repeat)
    counts = fl.zeros(BINS, u32)
    histogram[launch](pixels, counts)
    err = check("histogram", counts.numpy(), np.bincount(img, minlength=BINS), rtol=0)
    return Result("histogram", fl.current_backend(), f"{img.size} pixels", first, steady,
                  img.size, err, [missing] if missing else [])


if __name__ == "__main__":
    print(run())
