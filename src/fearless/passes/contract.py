"""Index-space agreement: a kernel uses at most one index space (1-d, 2-d or 3-d).

Sets ``fn.attrs["index_space"]`` to 0 (no thread index), 1, 2 or 3, and ``fn.attrs["block_level"]``
when the kernel uses its block (shared memory, barriers, block/lane coordinates, warp ops): the
LLVM backend then runs one logical thread per hardware thread, as the block's threads must meet
at barriers and see their own block's coordinates. ``prepare()`` compares it with
the launch's dimensions, so a kernel using ``index_2d`` is never launched 1-d. A 3-d kernel may
not use ``index_in_block_2d()``: ``(threadIdx.y, threadIdx.x)`` repeats along z, so it is no
thread's own slot there.
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.ir.core import Function
from fearless.ir.opdef import Op, warp_collectives

_COLLECTIVE = warp_collectives()


def run(fn: Function, options) -> Function:
    space, first = 0, None
    fn.attrs["block_level"] = any(
        op.name in (Op.SIMT_SPECIAL, Op.SIMT_BARRIER, Op.SIMT_SHARED_ALLOC, Op.MEM_ASYNC_COPY,
                    Op.MEM_ASYNC_COMMIT, Op.MEM_ASYNC_WAIT)
        or op.name in _COLLECTIVE or (op.name == Op.SIMT_THREAD_INDEX and op.attrs.get("block"))
        for op in fn.walk())
    for op in fn.walk():
        if op.name != Op.SIMT_THREAD_INDEX or op.attrs.get("block"):
            continue
        s = op.attrs["space"]
        if space and s != space:
            raise CompileError(f"the kernel uses both index_{space}d() and index_{s}d()",
                               kernel=fn.name, span=op.span,
                               help=f"use one index space per kernel (index_{space}d() is used "
                                    f"at {first.location()})")
        space, first = s, first or op.span
    fn.attrs["index_space"] = space
    if space == 3:
        for op in fn.walk():
            if op.name == Op.SIMT_THREAD_INDEX and op.attrs.get("block") and op.attrs["space"] == 2:
                raise CompileError("a kernel using index_3d() cannot use index_in_block_2d(): "
                                   "threads of a block that differ only along z share its value",
                                   kernel=fn.name, span=op.span,
                                   help="use fl.thread.index_in_block(), the thread's own slot "
                                        "in a 3-d block too")
    return fn
