"""``fl.static_range(n)`` / ``(start, stop[, step])``: a ``for`` loop unrolled at compile time.

    for mi in fl.static_range(4):       # the body is generated 4 times, mi a constant each time
        store(acc[mi])                  # so tuples (fragments) can be indexed by it

The bounds must be constant ints; the body may not ``break``, ``continue`` or ``return``. Use it
for short loops over registers; ``range`` makes a real loop. Only valid inside kernels.
"""
from __future__ import annotations

from fearless.simt.thread import _stub

static_range = _stub("static_range")
