"""Where a kernel's static shared arrays live: one pool, each array 16-byte aligned.

Up to STATIC_LIMIT bytes the pool is one static ``.shared`` global (``simt._shared_pool``); past
it the arrays sit at the start of the block's dynamic shared memory, which may grow past 48 KB
once the kernel opts in, and every launch asks for that many more dynamic bytes
(``pooled_bytes``, read by the kernel layer at load time).
"""
from __future__ import annotations

import math

from fearless.dtypes import from_name

STATIC_LIMIT = 48 * 1024  # bytes of static shared memory PTX lets a block declare (sm_80+)


def pool(sizes) -> tuple[list[int], int]:
    """Byte offsets of static shared arrays of ``sizes`` bytes laid out one after another, each
    16-byte aligned (what ``cp.async`` and ``ldmatrix`` need), and the total."""
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-size // 16) * 16
    return offsets, total


def pooled_bytes(shared_meta) -> int:
    """The bytes of a kernel's static shared arrays (``fn.attrs["shared"]``) when they exceed
    STATIC_LIMIT, else 0. Such arrays live at the start of the block's dynamic shared memory
    (``backends/llvm/simt.py``), which may grow past 48 KB once the kernel opts in, and every
    launch asks for that many more dynamic bytes."""
    total = pool(math.prod(shape) * from_name(d).itemsize
                 for _, shape, d in shared_meta if shape is not None)[1]
    return total if total > STATIC_LIMIT else 0
