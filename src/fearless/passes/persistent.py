"""Persistent launches: a tile kernel whose Out partitions have a persistent schedule
(``fearless.tile.persistent``, ``ir.types.Persistent``) runs its body once per tile of its share.

The launch runs ``P`` tile blocks (``runtime/partition.Partition.launch_grid``), and block ``b``
takes the tiles ``b, b + P, b + 2P, ...`` of the partition's order, so the body becomes:

    b = tile.launch_block;  p = tile.launch_blocks;  n = tile.num_tiles %out
    scf.for v in range(b, n, p):
        tile.select %out, v          {order, group}
        <the kernel's body>

``tile.select`` makes tile ``v`` the block's own: ``out.tile_index`` (``tile.block_index``),
``out.load()`` and ``out.store()`` mean that tile until the next one. The orders are
bijections from ``[0, n)`` onto the tiles and the blocks split ``[0, n)`` by residue, so every
tile has exactly one writer, as with one block per tile, and the checks of ``own_tile.py``
(which ran before, on the body as written) still hold for each iteration. This pass runs after
the checks and before ``memory_order``, which then orders the loop's accesses like a user loop's.

A ``return`` that leaves the kernel (one outside every inlined device function) would end the
block's whole share rather than the current tile: refused (CompileError at the ``return``).

A launch with no more tiles than blocks (``Persistent.single``) gives no block a second tile: it
keeps the body as written and launches a block per tile, the loop left out. The refusal above
still applies, so that whether a kernel compiles does not depend on the size of its output. On
the H200 (tileiras 13.5, f16 GEMMs of 128 rows whose tiles all fit one wave) the loop made the
64-wide tiles 1.1-1.3x slower than one block per tile (benchmarks/RESULTS.md, session 17; 1.6-2.7x
in session 14, before ``backends/tileir/schedule.py`` ordered a small tile's loads after the
previous tile's stores).
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.ir.core import Builder, Function, Region, Value
from fearless.ir.opdef import Op
from fearless.ir.types import INDEX, Role, TensorView


def run(fn: Function, options) -> Function:
    outs = [p for p in fn.params if isinstance(p.type, TensorView) and p.type.role is Role.OUT
            and p.type.schedule is not None and not p.type.schedule.stream_k]
    if not outs:  # none, or stream-K's (passes/stream_k.py)
        return fn
    refuse_returns(fn, fn.body, "persistent")
    out, schedule = outs[0].value, outs[0].type.schedule
    if schedule.single:  # no block gets a second tile: the body runs as one tile per block
        return fn
    entry = Region()
    b = Builder(entry)
    start = b.create(Op.TILE_LAUNCH_BLOCK, []).result
    step = b.create(Op.TILE_LAUNCH_BLOCKS, []).result
    stop = b.create(Op.TILE_NUM_TILES, [out]).result
    tile_loop(b, out, schedule, start, stop, step).ops.extend(fn.body.ops)
    fn.body = entry
    return fn


def tile_loop(b: Builder, out: Value, schedule, start: Value, stop: Value,
              step: Value) -> Region:
    """Append ``scf.for v in range(start, stop, step)`` whose body begins with ``tile.select
    out, v`` in ``schedule``'s order (an ``ir.types.Persistent``), and return that body for the
    caller to fill (the kernel's body, or stream-K's parts of it)."""
    body = Region([Value(INDEX, "tile")])
    with b.at(body):
        b.create(Op.TILE_SELECT, [out, body.args[0]],
                 attrs={"order": schedule.order, "group": schedule.group})
    b.create(Op.SCF_FOR, [start, stop, step], attrs={"step_sign": 1}, regions=[body])
    return body


def refuse_returns(fn: Function, region: Region, schedule: str) -> None:
    """CompileError at a ``return`` that would leave the kernel from ``region`` (the
    ``schedule`` named in the message loops the body over the block's tiles)."""
    for op in region.ops:
        if op.name == Op.CF_RETURN:
            raise CompileError(f"a kernel launched with a {schedule} schedule runs its body once "
                               "per tile, and this return would end every later tile of the "
                               "block too", kernel=fn.name, span=op.span,
                               help="put the rest of the body under if/else instead of "
                                    "returning, or partition without schedule=")
        if op.name != Op.SCF_INLINE:  # a return inside an inlined function leaves only it
            for inner in op.regions:
                refuse_returns(fn, inner, schedule)
