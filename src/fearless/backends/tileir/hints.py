"""The entry hints a tile kernel compiles with: the author's, plus the defaults fearless picks
from the kernel's tiles where the author left a hint out.

One default so far, for tileiras's worker warps on sm_90: an ``ft.mma`` whose accumulator holds
128 x 256 f32 values or more (or a stream-K launch's, ``largest_accumulator``). With tileiras's
default of one consumer warp group the accumulator alone needs 256 registers per thread, so it
spills (1792 bytes per thread at 128 x 256, 1024 at 256 x 128) and an f16 GEMM ran at 6-10% of
cuBLAS on the H200 (benchmarks/RESULTS.md, 2026-12-01). ``num_worker_warps_per_cta: 8`` (in
every bytecode release we emit, 13.3 on) gives it two consumer warp groups of 232 registers per
thread: no spill, and 92-97% of cuBLAS at 4096^3 and 8192^3 (session 15), where the two-block
cluster hint gave 88-92%. The default stays out where the author set the worker warps, or a
cluster of more than one block, for the arch (or for all archs): a cluster of two with eight
worker warps ran at 47-74% of cuBLAS, so the author's choice is kept as written. It weighs the
largest accumulator alone, not tiles live together (attention's scores and output). Other archs:
not measured, so no default.
"""
from __future__ import annotations

import re
from math import prod

from fearless.ir.opdef import Op

WORKER_WARPS = "num_worker_warps_per_cta"
CLUSTER = "num_cta_in_cga"
# bytes of accumulator per warp group's threads at which one consumer warp group spills
# (128 x 256 values of 4 bytes: 256 registers per thread of a 128-thread warp group)
SPILLING_ACC_BYTES = 128 * 256 * 4


def entry_hints(fn, hints: dict | None, arch: str | None) -> dict:
    """The entry hints ``{arch: {hint: value}}`` to compile IR function ``fn`` with: ``hints``
    (the kernel's, which win) plus fearless's defaults for ``arch`` (module docstring); a new
    dict, ``hints`` is not changed."""
    out = {a: dict(h) if isinstance(h, dict) else h for a, h in (hints or {}).items()}
    if arch is None or sm_number(arch) != 90 or kept_out(out, arch):
        return out
    if largest_accumulator(fn) >= SPILLING_ACC_BYTES:
        out.setdefault(arch, {})[WORKER_WARPS] = 8
    return out


def kept_out(hints: dict | None, arch: str) -> bool:
    """Whether the kernel's ``hints`` keep the worker-warp default away on ``arch``: they set
    the worker warps, or a cluster of more than one block, for it or for all archs."""
    given: dict = {}
    for h in ((hints or {}).get("default"), (hints or {}).get(arch)):
        if isinstance(h, dict):
            given.update(h)
    return WORKER_WARPS in given or given.get(CLUSTER, 1) > 1


def largest_accumulator(fn) -> int:
    """Bytes of the largest accumulator tile in ``fn``: an ``ft.mma``'s result, or a stream-K
    launch's sum (its fixup launch adds partial sums of it without an mma; a 128 x 256 one
    spilled 408 bytes per thread with one warp group, none with two); 0: none."""
    sizes = [prod(op.results[0].type.shape) * op.results[0].type.dtype.itemsize
             for op in fn.walk() if op.name == Op.TILE_MMA]
    acc = fn.attrs.get("stream_k")
    if acc is not None:
        sizes.append(prod(acc.shape) * acc.dtype.itemsize)
    return max(sizes, default=0)


def sm_number(arch: str) -> int:
    """The compute capability in an arch name: 90 for "sm_90" and "sm_90a" (0: none)."""
    digits = re.match(r"sm_(\d+)", arch)
    return int(digits.group(1)) if digits else 0
