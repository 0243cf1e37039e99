"""Index-space agreement: a kernel uses at most one index space (1-d or 2-d).

Sets ``fn.attrs["index_space"]`` to 0 (no thread index), 1 or 2. ``prepare()`` compares it with
the launch's dimensions, so a kernel using ``index_2d`` is never launched 1-d.
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.ir.core import Function


def run(fn: Function, options) -> Function:
    space, first = 0, None
    for op in fn.walk():
        if op.name != "simt.thread_index":
            continue
        s = op.attrs["space"]
        if space and s != space:
            raise CompileError(f"the kernel uses both index_{space}d() and index_{s}d()",
                               kernel=fn.name, span=op.span,
                               help=f"use one index space per kernel (index_{space}d() is used "
                                    f"at {first.location()})")
        space, first = s, first or op.span
    fn.attrs["index_space"] = space
    return fn
