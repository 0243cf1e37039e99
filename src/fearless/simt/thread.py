"""``fearless.thread``: the calling thread's position in the launch and in its block.

``index_1d()`` is ``blockIdx.x * blockDim.x + threadIdx.x``, unique per thread of a launch
prepared 1-d; ``index_2d()`` gives ``(row, col)`` of a launch prepared 2-d (``col`` along x: the
fast axis, consecutive threads of a warp; ``row`` along y); ``index_3d()`` gives ``(d0, d1, d2)``
of a launch prepared 3-d (``d2`` along x, ``d1`` along y, ``d0`` along z). All are 64-bit
ThreadIndex values: the only index a DisjointSlice accepts; any arithmetic on them gives a plain
integer.

Block level (for shared memory): ``index_in_block()`` is the thread's linear slot in its block
(``threadIdx.y * blockDim.x + threadIdx.x``, plus ``threadIdx.z * blockDim.x * blockDim.y`` in a
kernel using ``index_3d()``), the only index at which a thread may write shared
memory without ``fl.unsafe()``; ``index_in_block_2d()`` gives ``(threadIdx.y, threadIdx.x)`` as
the own-slot proof for a 2-d shared array. ``block_index``, ``block_dim``, ``grid_dim`` and
``thread_in_block`` read ``blockIdx``/``blockDim``/``gridDim``/``threadIdx`` along x (0) or y (1);
``grid_size(axis)`` is ``gridDim * blockDim``, the step of a grid-stride loop; ``lane()`` is the
lane within the warp and ``WARP_SIZE`` is 32. ``sync_threads()`` is ``__syncthreads()``.

Loops that give a thread several elements of a DisjointSlice, whatever the grid:
``for i in range(index_1d(), n, grid_size()):`` (grid-stride: thread ``t`` visits ``t, t + T,
...`` for ``T`` threads, so no two threads meet) and, with one block per row,
``for c in range(thread_in_block(0), cols, block_dim(0)):`` writing ``out[block_index(), c]``
(block-stride). ``block_index(a) * block_dim(a) + thread_in_block(a)`` counts as the thread's own
index wherever ``index_1d()`` (``a = 0``, in a launch known to be 1-d) or a part of ``index_2d()``
would.

Every function here is an intrinsic: valid only inside ``@fearless.kernel`` /
``@fearless.func`` bodies; called on the host it raises CompileError.
"""
from __future__ import annotations

from typing import Literal

from fearless.simt.stub import intrinsic

WARP_SIZE = 32
_intrinsic = intrinsic("fearless.thread")

__all__ = ["WARP_SIZE", "index_1d", "index_2d", "index_3d", "index_in_block", "index_in_block_2d",
           "block_index", "block_dim", "grid_dim", "grid_size", "thread_in_block", "lane",
           "sync_threads"]


@_intrinsic
def index_1d() -> int:
    """This thread's index in a 1-d launch: ``blockIdx.x * blockDim.x + threadIdx.x``.

    Returns a ThreadIndex (i64, from 0 to the launch's thread count - 1, unique per thread),
    the only index at which a thread may write a ``DisjointSlice``; arithmetic on it gives a
    plain i64. The launch must be prepared 1-d (``kernel.prepare(n)``), else ``prepare()``
    raises ContractError; a kernel using both ``index_1d`` and ``index_2d`` is a CompileError.
    """


@_intrinsic
def index_2d() -> tuple[int, int]:
    """This thread's ``(row, col)`` in a 2-d launch: row along y, col along x (the fast axis).

    Returns two ThreadIndex values (i64), the own element of a ``DisjointArray[T, 2]``
    (``out[row, col]``). The launch must be prepared 2-d (``kernel.prepare((rows, cols))``),
    else ``prepare()`` raises ContractError.
    """


@_intrinsic
def index_3d() -> tuple[int, int, int]:
    """This thread's ``(d0, d1, d2)`` in a 3-d launch: d0 along z, d1 along y, d2 along x (the
    fast axis), as ``index_2d()`` maps ``(row, col)`` to ``(y, x)``.

    Returns three ThreadIndex values (i64), the own element of a ``DisjointArray[T, 3]``
    (``out[d0, d1, d2]``). The launch must be prepared 3-d (``kernel.prepare((n0, n1, n2))``,
    block ``(x, y, z)``), else ``prepare()`` raises ContractError; a kernel using
    ``index_3d`` with ``index_1d``/``index_2d`` or ``index_in_block_2d`` is a CompileError.
    Only this function reads the z coordinates: a kernel without it is never launched with
    more than one thread or block along z.
    """


@_intrinsic
def index_in_block() -> int:
    """This thread's linear slot in its block, ``threadIdx.y * blockDim.x + threadIdx.x``
    (plus ``threadIdx.z * blockDim.x * blockDim.y`` in a 3-d kernel; i64, 0 .. threads per
    block - 1).

    The own-slot proof for shared memory: ``tile[index_in_block()] = v`` needs no
    ``fl.unsafe()``. Any launch shape.
    """


@_intrinsic
def index_in_block_2d() -> tuple[int, int]:
    """``(threadIdx.y, threadIdx.x)``: this thread's row and column in its block (i64 each).

    The own-slot proof for a 2-d shared array: ``tile[ty, tx] = v``.
    """


@_intrinsic
def block_index(axis: Literal[0, 1] = 0) -> int:
    """``blockIdx`` along x (``axis=0``) or y (``axis=1``, a constant): a plain i64."""


@_intrinsic
def block_dim(axis: Literal[0, 1] = 0) -> int:
    """``blockDim`` along x (``axis=0``) or y (``axis=1``, a constant): threads per block
    along that axis, a plain i64."""


@_intrinsic
def grid_dim(axis: Literal[0, 1] = 0) -> int:
    """``gridDim`` along x (``axis=0``) or y (``axis=1``, a constant): blocks in the launch
    along that axis, a plain i64."""


@_intrinsic
def grid_size(axis: Literal[0, 1] = 0) -> int:
    """``gridDim * blockDim`` along x (``axis=0``) or y (``axis=1``, a constant): the launch's
    threads along that axis (in a 1-d launch, all of them), a plain i64 >= 1.

    The step of a grid-stride loop, whose counter a ``DisjointSlice`` accepts as an index::

        for i in range(fl.thread.index_1d(), len(out), fl.thread.grid_size()):
            out[i] = 2.0 * x[i]

    Thread ``t`` visits ``t, t + grid_size(), ...``: every index below the bound belongs to
    exactly one thread, whatever the grid, so the launch may have fewer threads than ``out`` has
    elements. A loop starting elsewhere or stepping by anything else (a constant,
    ``grid_size() // 2``) is a SafetyError at compile time. 2-d: ``range(r, rows,
    grid_size(1))`` and ``range(c, cols, grid_size(0))`` for ``r, c = index_2d()``.
    """


@_intrinsic
def thread_in_block(axis: Literal[0, 1] = 0) -> int:
    """``threadIdx`` along x (``axis=0``) or y (``axis=1``, a constant): a plain i64 (not an
    own-slot proof; use ``index_in_block()`` for that).

    With ``block_index`` and ``block_dim`` it gives the thread's own index
    (``block_index(0) * block_dim(0) + thread_in_block(0)`` is ``index_1d()``), and it starts a
    block-stride loop, one block per row of a ``DisjointArray[T, 2]``::

        row = fl.thread.block_index()
        for c in range(fl.thread.thread_in_block(0), out.shape[1], fl.thread.block_dim(0)):
            out[row, c] = x[row, c]

    Launch it with one block per row, ``kernel.prepare(rows * 256)`` (``prepare`` counts
    threads). Such a loop needs a launch known to be 1-d: a contract with an exact 1-d block
    (``fl.Contract(dims=1, block=256)``), or ``index_1d()`` used in the kernel; otherwise it is a
    SafetyError.
    """


@_intrinsic
def lane() -> int:
    """This thread's lane in its warp, ``index_in_block() % 32`` (i64, 0..31); the same as
    ``fl.warp.lane()``."""


@_intrinsic
def sync_threads() -> None:
    """``__syncthreads()``: wait until every thread of the block arrives; memory written before
    it is visible to the whole block after it.

    Every thread must reach it: a call under a condition that can differ between threads of a
    block (thread index, lane, data, or after some threads returned or left a loop) is a
    SafetyError at compile time; inside ``fl.unsafe()`` the cpu backend checks it at run time
    (BarrierError).
    """
