"""Tile schedules -> Tile IR: which tile a tile block owns (part of ``lower``).

One block per tile: the block's coordinates are its tile's, except that a 2-d Out partition
launches 1-d and deals its tiles in grouped order (``grouped``; ``lower.is_grouped``). A
persistent launch (``passes/persistent.py``) runs a 1-d grid of blocks, each looping over its
tiles: ``tile.launch_block`` / ``tile.launch_blocks`` are the launch's, ``tile.num_tiles`` the
partition's, and ``tile.select`` makes the loop's tile the block's own (``Lowering.block_ids``,
which ``tile.block_index``, ``load_own`` and ``store`` use). The orders are the arithmetic of
``ir.ops.tile.tile_of``, which the cpu backend runs: bijections onto the tiles.
"""
from __future__ import annotations

from math import prod

from fearless.backends.tileir import tir
from fearless.backends.tileir.memory import LAST_OP
from fearless.ir.opdef import Op
from fearless.passes.stream_k import FIXUP, PIECES

ORDERED_TILE = 128 * 64           # elements: the largest tile that orders_tiles orders
PIECE_STORES = ("piece stores",)  # the token slot of a stream-K pieces launch's partial stores


def orders_tiles(out) -> bool:
    """Whether each tile a block of a persistent launch over the Out partition ``out`` (an IR
    value) runs loads after the writes of the block's previous tile (``_select``)."""
    schedule = out.type.schedule
    return schedule is not None and schedule.phase != FIXUP and \
        prod(out.type.tile_shape) <= ORDERED_TILE


def tile_grid(low, out, d: tir.ScalarType = tir.I32) -> list:
    """The tiles of Out partition ``out`` along each of its axes, as ``d`` scalars."""
    view, b = low.views[id(out)], low.b
    grid = []
    for extent, tile in zip(view.dims, out.type.tile_shape):
        if d is not tir.I32:
            extent = b.exti(extent, d, signedness="unsigned")
        grid.append(b.divi(b.addi(extent, low.const(tile - 1, d)), low.const(tile, d)))
    return grid


def grouped(low, r, rows, cols, group: int, d: tir.ScalarType) -> tuple:
    """Tile coordinates (i, j) of the ``r``-th tile of a ``rows`` x ``cols`` grid in groups of
    ``group`` tile rows: the tile blocks that run together share rows of A and columns of B in
    L2 (the "grouped ordering" of Triton's matmul tutorial)."""
    b = low.b
    g = low.const(group, d)
    width = b.muli(g, cols)
    first = b.muli(b.divi(r, width), g)
    size = b.mini(b.subi(rows, first), g)
    local = b.remi(r, width)
    return b.addi(first, b.remi(local, size)), b.divi(local, size)


def _num_tiles(low, op):
    grid = tile_grid(low, op.operands[0], tir.I64)
    total = grid[0]
    for n in grid[1:]:
        total = low.b.muli(total, n)
    low.set(op, total)


def _select(low, op):
    """The block's own tile becomes tile ``v`` of the partition, computed in i64 (a 3-d
    partition may have more than 2**31 tiles), then i32 as get_tile_block_id's are."""
    out, v = op.operands
    b, d = low.b, tir.I64
    grid = tile_grid(low, out, d) + [low.const(1, d)] * (3 - out.type.ndim)
    plane = b.muli(grid[0], grid[1])
    z, r = b.divi(low.v(v), plane), b.remi(low.v(v), plane)
    if op.attrs["order"] == "row":
        x, y = b.remi(r, grid[0]), b.divi(r, grid[0])
    else:
        x, y = grouped(low, r, grid[0], grid[1], op.attrs["group"], d)
    low.block_ids = tuple(b.trunci(c, tir.I32) for c in (x, y, z))
    # A small tile's unordered accesses (its loads of In tensors) follow the previous tile's
    # writes (of ``out``; in stream-K's pieces launch, of the workspace: ``orders_tiles``,
    # ``stream_k._partial_store``). Without that order, tileiras 13.5 moved a tile's epilogue
    # past the next tile's loop, and ptxas then serialised every wgmma of a 64-wide GEMM tile
    # (its warning C7514): 1.5-1.6x slower than one tile per block on the H200, and as fast as
    # it with the order. 128 x 128 and 128 x 256 tiles were not serialised, and the order cost
    # them 3-4% (session 17). Not in stream-K's fixup launch, which only reads the workspace
    # (chained there, tileiras staged each partial sum behind barriers, stream_k.py).
    if orders_tiles(out):
        pieces = out.type.schedule.phase == PIECES
        last = low.slots.get(PIECE_STORES if pieces else (LAST_OP, id(out)))
        if last is not None:
            low.token = last


def _wide(low, value):
    return low.b.exti(value, tir.I64, signedness="unsigned")


RULES = {
    # a persistent launch is 1-d: its blocks are numbered along x
    Op.TILE_LAUNCH_BLOCK: lambda low, op: low.set(op, _wide(low, low.launch_ids[0])),
    Op.TILE_LAUNCH_BLOCKS: lambda low, op: low.set(op, _wide(low, low.b.get_num_tile_blocks()[0])),
    Op.TILE_NUM_TILES: _num_tiles,
    Op.TILE_SELECT: _select,
}
