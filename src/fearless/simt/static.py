"""``fl.static_range(n)`` / ``(start, stop[, step])``: a ``for`` loop unrolled at compile time.

    for mi in fl.static_range(4):       # the body is generated 4 times, mi a constant each time
        store(acc[mi])                  # so tuples (fragments) can be indexed by it

Only valid inside kernels.
"""
from __future__ import annotations

from typing import Iterable

from fearless.simt.stub import intrinsic

__all__ = ["static_range"]


@intrinsic("fearless")
def static_range(start: int, stop: int | None = None, step: int = 1) -> Iterable[int]:
    """The values of ``range(start, stop, step)`` (or ``range(start)``), as the iterable of a
    ``for`` loop unrolled at compile time: the body is generated once per value, with the loop
    variable a constant, so tuples (fragments) can be indexed by it.

    The bounds must be constant ints and the body may not ``break``, ``continue`` or
    ``return`` (CompileError). Use it for short loops over registers; ``range`` makes a real
    loop.
    """
