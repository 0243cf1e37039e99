"""Stream-K launches: a persistent launch (``fearless.tile.stream_k``) that also splits the
iterations of the kernel's reduction loop between its blocks (Osama et al., "Stream-K:
Work-centric Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP
2023; the hybrid of whole tiles and split ones, as CUTLASS's stream-K schedule runs).

What can be split: the kernel body is ``<prefix> for k in range(n): <loop> <suffix>`` where
the loop is the top-level ``for`` that carries one local, ``acc``: the prefix sets it to zero
last, the loop updates it once per iteration as ``acc = ft.mma(x, y, acc)`` or ``acc = acc +
x`` (the loaded ``acc`` used only there), and no other local the loop stores carries a value
into the next iteration (each is stored before it is read) or out of the loop. Then ``acc``
after the loop is the sum over the iterations of terms that do not depend on it, and any
partition of ``range(n)`` into pieces gives the same sum up to the order of the additions.
Nothing in the prefix or the loop may write memory (a piece's block may not complete the
tile) or leave the loop, and ``n`` must follow from the parameters alone (every tile has as
many iterations): otherwise a CompileError points at what breaks the rule.

The schedule (``P`` blocks, ``T`` tiles of ``q = max(n, 1)`` iterations): whole waves but the
last one or two go one tile to a block as in ``persistent.py`` (block ``b`` takes tiles ``b +
w P`` for ``w < W = max(T // P - 1, 0)``), a copy of the body as written; the ``I``
iterations of the ``T - W P`` tiles left are cut into ``S = min(P, I // MIN_SHARE)`` equal
shares, block ``b < S`` taking ``[b I / S, (b + 1) I / S)`` of them. A share is a run of
pieces of consecutive tiles, and only its first and last piece may be part of a tile (slots
``2b`` and ``2b + 1``). Per piece the body becomes:

    tile.select %out, t;  <prefix>;  for k in range(k0, k1): <loop>
    if the piece is not the whole tile:
        tile.partial_store acc, slot;  last = tile.arrive t, k1 - k0, q
        if last:  acc = sum of tile.partial_load of every piece's slot, in block order
    if the piece is the whole tile or last:  <suffix>

``tile.arrive`` adds the piece's iterations to the tile's counter atomically; exactly one
block's add completes ``q``, so each tile is still stored by exactly one block, after every
piece's partial sum. The sum runs from zero over the pieces in block order, so the result
does not depend on which block arrives last, and nothing waits for another block: no order
in which the GPU runs the blocks can hang the launch. That block also resets the counter, so
the workspace (``runtime/workspace.py``) is clean after every launch. This pass runs after
the checks (on the body as written) and in place of ``persistent.py`` for these launches.

Speed: with tileiras 13.5, on the H200, the best stream-K tile ran 1.1 to 3.1 times slower
than the best persistent tile at every GEMM shape measured, and 128 x 128 against 128 x 128
2.7 to 13.7 times (benchmarks/RESULTS.md, session 13): with a second use of the accumulator
(the partial store) and the atomic, tileiras spills the accumulator around the MMAs of both
loops.
"""
from __future__ import annotations

from fearless.errors import CompileError
from fearless.ir.core import Builder, Function, Operation, Region, Value
from fearless.ir.opdef import Op
from fearless.ir.ops.arith import ARITH
from fearless.ir.types import BOOL, INDEX, LocalRef, Role, TensorView, Tile
from fearless.passes.persistent import refuse_returns

# iterations of a share at least: a piece's partial sum costs a store and a load of the
# accumulator tile, about what two iterations of a memory-bound GEMM's loop move (an estimate)
MIN_SHARE = 4
WRITES = (Op.TILE_STORE, Op.TILE_SCATTER, Op.TILE_ATOMIC, Op.TILE_ATOMIC_CAS)
HELP = ("write the kernel as a sum over one loop (acc = ft.zeros(...); for k in range(n): acc "
        "= ft.mma(a_k, b_k, acc); out.store(acc)), or partition without stream_k")


def run(fn: Function, options) -> Function:
    outs = [p for p in fn.params if isinstance(p.type, TensorView) and p.type.role is Role.OUT
            and p.type.schedule is not None and p.type.schedule.stream_k]
    if not outs:
        return fn
    refuse_returns(fn, fn.body, "stream-K")
    out, schedule = outs[0].value, outs[0].type.schedule
    ops = fn.body.ops
    at, acc = _reduction(fn)
    prefix, loop, suffix = ops[:at], ops[at], ops[at + 1:]
    _refuse_writes(fn, prefix + [loop])
    _refuse_last_values(fn, loop, suffix, acc)
    acc_type = _accumulator_type(fn, prefix, acc, loop)

    entry = Region()
    s = _Scalars(Builder(entry))
    select = {"order": schedule.order, "group": schedule.group}
    b = s.b.create(Op.TILE_LAUNCH_BLOCK, []).result
    p = s.b.create(Op.TILE_LAUNCH_BLOCKS, []).result
    tiles = s.b.create(Op.TILE_NUM_TILES, [out]).result
    n = _hoist(fn, prefix, loop.operands[1], s.b, loop)
    # the whole tiles: b, b + P, ... below W P, the body as written (a copy)
    whole = s.mul(s.max(s.sub(s.div(tiles, p), s.const(1)), s.const(0)), p)
    each = Region([Value(INDEX, "tile")])
    with s.b.at(each):
        s.b.create(Op.TILE_SELECT, [out, each.args[0]], attrs=select)
    each.ops.extend(_clone(ops, {}))
    s.b.create(Op.SCF_FOR, [b, whole, p], attrs={"step_sign": 1}, regions=[each])
    # the shared tiles' iterations, I of them from `base` on, in S equal shares of at least
    # MIN_SHARE iterations (S <= P; blocks from S on have none); computed after the whole
    # tiles' loop, so that they take no registers during it
    q = s.max(n, s.const(1))
    base = s.mul(whole, q)
    shared = s.sub(s.mul(tiles, q), base)
    shares = s.max(s.min(p, s.div(shared, s.const(MIN_SHARE))), s.const(1))
    start = s.add(base, s.div(s.mul(s.min(b, shares), shared), shares))
    end = s.add(base, s.div(s.mul(s.min(s.add(b, s.const(1)), shares), shared), shares))
    first_t = s.div(start, q)
    last_t = s.div(s.max(s.sub(end, s.const(1)), s.const(0)), q)
    pieces = s.select(s.cmp("lt", start, end), s.add(s.sub(last_t, first_t), s.const(1)),
                      s.const(0))
    run_suffix = s.b.create(Op.LOCAL_ALLOC, [], [LocalRef(BOOL)]).result
    body = Region([Value(INDEX, "piece")])
    with s.b.at(body):
        t = s.add(first_t, body.args[0])
        tq = s.mul(t, q)
        k0 = s.sub(s.max(start, tq), tq)
        k1 = s.sub(s.min(end, s.add(tq, q)), tq)
        s.b.create(Op.TILE_SELECT, [out, t], attrs=select)
        loop.operands[0], loop.operands[1] = s.min(k0, n), s.min(k1, n)
    body.ops.extend(prefix + [loop])
    with s.b.at(body):
        s.b.create(Op.LOCAL_STORE, [run_suffix, s.b.create(
            Op.CONSTANT, [], [BOOL], attrs={"value": True}).result])
        split = Region()
        s.b.create(Op.SCF_IF, [s.or_(s.cmp("gt", k0, s.const(0)), s.cmp("lt", k1, q))],
                   regions=[split, Region()])
    with s.b.at(split):
        # block b's first piece is slot 2b, its last 2b + 1
        mine = s.add(s.mul(b, s.const(2)), s.select(s.cmp("eq", t, first_t), s.const(0),
                                                    s.const(1)))
        _finish_piece(s, acc, acc_type, mine, s.sub(t, whole), s.sub(k1, k0), run_suffix,
                      (shares, q, tq, base, shared))
    with s.b.at(body):
        finish = Region()
        s.b.create(Op.SCF_IF, [s.b.create(Op.LOCAL_LOAD, [run_suffix]).result],
                   regions=[finish, Region()])
    finish.ops.extend(suffix)
    s.b.create(Op.SCF_FOR, [s.const(0), pieces, s.const(1)], attrs={"step_sign": 1},
               regions=[body])
    fn.body = entry
    fn.attrs["stream_k"] = acc_type
    return fn


def _finish_piece(s, acc, acc_type, slot, counter, done, run_suffix, shape) -> None:
    """A piece of a shared tile: store its partial sum, count its ``done`` iterations; the
    block that completes the tile sums the pieces and runs the rest of the body."""
    s.b.create(Op.TILE_PARTIAL_STORE, [s.b.create(Op.LOCAL_LOAD, [acc]).result,
                                       slot])
    last = s.b.create(Op.TILE_ARRIVE, [counter, done, shape[1]]).result
    s.b.create(Op.LOCAL_STORE, [run_suffix, last])
    reduce = Region()
    s.b.create(Op.SCF_IF, [last], regions=[reduce, Region()])
    with s.b.at(reduce):
        _sum_partials(s, acc, acc_type, *shape)


def _sum_partials(s, acc, acc_type, shares, q, tq, base, shared) -> None:
    """In the last arriving block of a shared tile: ``acc`` becomes the sum of every piece's
    partial (its own among them), added in block order from zero, so that the result does
    not depend on which block arrived last."""
    s.b.create(Op.LOCAL_STORE, [acc, s.b.create(Op.CONSTANT, [], [acc_type],
                                                attrs={"value": 0.0}).result])
    # the blocks whose shares hold the tile's first and last iterations: the largest c with
    # c * I // S <= x is ((x + 1) * S - 1) // I
    x = s.sub(tq, base)
    first = s.div(s.sub(s.mul(s.add(x, s.const(1)), shares), s.const(1)), shared)
    last = s.div(s.sub(s.mul(s.add(x, q), shares), s.const(1)), shared)
    each = Region([Value(INDEX, "block")])
    s.b.create(Op.SCF_FOR, [first, s.add(last, s.const(1)), s.const(1)],
               attrs={"step_sign": 1}, regions=[each])
    with s.b.at(each):
        c = each.args[0]
        lo = s.div(s.mul(c, shared), shares)
        hi = s.div(s.mul(s.add(c, s.const(1)), shared), shares)
        has = Region()
        s.b.create(Op.SCF_IF, [s.cmp("lt", lo, hi)], regions=[has, Region()])
    with s.b.at(has):
        # the block's first piece (slot 2c) when the tile is its share's first, else its last
        first_of_c = s.cmp("eq", s.mul(s.div(s.add(base, lo), q), q), tq)
        slot = s.add(s.mul(c, s.const(2)), s.select(first_of_c, s.const(0), s.const(1)))
        part = s.b.create(Op.TILE_PARTIAL_LOAD, [slot], [acc_type]).result
        now = s.b.create(Op.LOCAL_LOAD, [acc]).result
        s.b.create(Op.LOCAL_STORE, [acc, s.b.create(Op.ADD, [now, part]).result])


def _clone(ops, values: dict) -> list:
    """Copies of ``ops`` (and their regions) with fresh results; ``values`` maps the ids of
    replaced values to their copies, and gains the copies' results."""
    out = []
    for op in ops:
        regions = []
        for region in op.regions:
            copy = Region([Value(a.type, a.hint) for a in region.args])
            values.update((id(a), c) for a, c in zip(region.args, copy.args))
            copy.ops = _clone(region.ops, values)
            regions.append(copy)
        new = Operation(op.name, [values.get(id(v), v) for v in op.operands],
                        [r.type for r in op.results], op.attrs, regions, op.span)
        values.update((id(r), c) for r, c in zip(op.results, new.results))
        out.append(new)
    return out


class _Scalars:
    """i64 arithmetic appended through a Builder, one method per op."""

    def __init__(self, b: Builder):
        self.b = b

    def const(self, value: int):
        return self.b.create(Op.CONSTANT, [], [INDEX], attrs={"value": value}).result

    def _op(self, name, *args):
        return self.b.create(name, list(args)).result

    def add(self, x, y): return self._op(Op.ADD, x, y)        # noqa: E704
    def sub(self, x, y): return self._op(Op.SUB, x, y)        # noqa: E704
    def mul(self, x, y): return self._op(Op.MUL, x, y)        # noqa: E704
    def div(self, x, y): return self._op(Op.FLOORDIV, x, y)   # noqa: E704
    def mod(self, x, y): return self._op(Op.MOD, x, y)        # noqa: E704
    def min(self, x, y): return self._op(Op.MIN, x, y)        # noqa: E704
    def max(self, x, y): return self._op(Op.MAX, x, y)        # noqa: E704
    def or_(self, x, y): return self._op(Op.OR, x, y)         # noqa: E704

    def cmp(self, pred: str, x, y):
        return self.b.create(Op.CMP, [x, y], attrs={"pred": pred}).result

    def select(self, c, x, y):
        return self._op(Op.SELECT, c, x, y)


# what the body must be -----------------------------------------------------------------------

def _locals_touched(op):
    """(loaded, stored) local slots of ``op`` and the ops inside it."""
    loaded, stored = set(), set()
    for inner in op.walk():
        if inner.name == Op.LOCAL_LOAD:
            loaded.add(id(inner.operands[0]))
        elif inner.name == Op.LOCAL_STORE:
            stored.add(id(inner.operands[0]))
    return loaded, stored


def _carried(loop) -> list:
    """The local slots whose value flows from one iteration of ``loop`` into the next: stored
    in the loop, and touched in an iteration before a top-level store (the slot itself)."""
    stored_in = set()
    for op in loop.walk():
        if op.name == Op.LOCAL_STORE:
            stored_in.add(id(op.operands[0]))
    fresh, carried = set(), {}
    for op in loop.regions[0].ops:
        loaded, stored = _locals_touched(op)
        for slot in (loaded | stored) & stored_in:
            if slot in fresh or slot in carried:
                continue
            if op.name == Op.LOCAL_STORE and id(op.operands[0]) == slot:
                fresh.add(slot)
            else:
                carried[slot] = op
    return list(carried.items())


def _reduction(fn: Function):
    """(index of the reduction loop among the body's ops, its accumulator slot Value)."""
    found = []
    for k, op in enumerate(fn.body.ops):
        if op.name == Op.SCF_FOR:
            carried = _carried(op)
            if carried:
                found.append((k, op, carried))
    if not found:
        raise CompileError("a stream-K schedule splits the kernel's reduction loop between "
                           "tile blocks, and this kernel has no top-level for loop that "
                           "carries a sum", kernel=fn.name, help=HELP)
    if len(found) > 1:
        raise CompileError("a stream-K schedule splits one reduction loop, and this kernel "
                           "has several top-level loops that carry values", kernel=fn.name,
                           span=found[1][1].span, help=HELP)
    k, loop, carried = found[0]
    if len(carried) > 1:
        raise CompileError("this loop carries more than one value from one iteration to the "
                           "next, and a stream-K schedule splits only a loop that carries one "
                           "sum", kernel=fn.name, span=carried[1][1].span, help=HELP)
    _check_loop(fn, loop)
    update = _update(fn, loop, carried[0][0])
    return k, update.operands[0]


def _check_loop(fn: Function, loop) -> None:
    lo, _, step = loop.operands
    for value, want in ((lo, 0), (step, 1)):
        op = _const_op(fn, value)
        if op is None or op.attrs["value"] != want:
            raise CompileError("a stream-K schedule splits a loop over range(n) (from 0, step "
                               "1), and this loop has another start or step", kernel=fn.name,
                               span=loop.span, help=HELP)
    for op in loop.regions[0].ops:
        for inner in op.walk():
            if inner.name in (Op.CF_BREAK, Op.CF_RETURN) and not _in_inner_loop(op, inner):
                raise CompileError("a stream-K schedule splits the loop's iterations between "
                                   "blocks, and this exit makes the sum depend on where they "
                                   "stop", kernel=fn.name, span=inner.span, help=HELP)


def _in_inner_loop(top, target) -> bool:
    """Whether ``target`` (inside ``top``) sits in a loop nested in ``top`` (or is ``top``'s own
    op inside a loop op ``top``)."""
    def search(op, inside: bool) -> bool | None:
        if op is target:
            return inside
        for region in op.regions:
            for inner in region.ops:
                got = search(inner, inside or op.name in (Op.SCF_FOR, Op.SCF_WHILE))
                if got is not None:
                    return got
        return None
    return bool(search(top, False))


def _const_op(fn: Function, value):
    for op in fn.body.ops:
        if op.results and op.results[0] is value:
            return op if op.name == Op.CONSTANT else None
    return None


def _update(fn: Function, loop, slot: int):
    """The one top-level ``local.store acc, mma(x, y, load acc)`` (or ``load acc + x``) of the
    loop; CompileError for any other form."""
    def refuse(span, why):
        raise CompileError(f"a stream-K schedule splits a loop whose carried value is a sum "
                           f"({why})", kernel=fn.name, span=span or loop.span, help=HELP)

    body = loop.regions[0].ops
    loads = [op for op in loop.walk() if op.name == Op.LOCAL_LOAD and id(op.operands[0]) == slot]
    stores = [op for op in loop.walk() if op.name == Op.LOCAL_STORE and id(op.operands[0]) == slot]
    if len(loads) != 1 or len(stores) != 1 or loads[0] not in body or stores[0] not in body:
        refuse((loads + stores)[-1].span, "read once and updated once per iteration, outside "
                                          "any if or inner loop")
    load, store = loads[0], stores[0]
    uses = _uses(loop)
    update = next((op for op in body if op.results and op.results[0] is store.operands[1]), None)
    acc = load.results[0]
    if update is None or uses.get(id(acc), 0) != 1 or uses.get(id(update.results[0]), 0) != 1 \
            or not (update.name == Op.TILE_MMA and update.operands[2] is acc
                    or update.name == Op.ADD and acc in update.operands):
        refuse(store.span, "acc = ft.mma(x, y, acc) or acc = acc + x, with acc used nowhere "
                           "else in the loop")
    return store


def _uses(op) -> dict:
    count: dict = {}
    for inner in op.walk():
        for v in inner.operands:
            count[id(v)] = count.get(id(v), 0) + 1
    return count


def _accumulator_type(fn: Function, prefix, slot, loop):
    """The accumulator's tile type, once its last store before the loop is known to be zero."""
    stores = [op for top in prefix for op in top.walk()
              if op.name == Op.LOCAL_STORE and op.operands[0] is slot]
    last = stores[-1] if stores else None
    init = None
    if last is not None and last in prefix:
        init = next((op for op in prefix if op.results and op.results[0] is last.operands[1]),
                    None)
    if init is None or init.name != Op.CONSTANT or init.attrs["value"] != 0:
        raise CompileError("a stream-K schedule splits a sum that starts at zero, and this "
                           "loop's carried value starts elsewhere", kernel=fn.name,
                           span=(last or loop).span, help=HELP)
    t = init.results[0].type
    if not isinstance(t, Tile) or not t.dtype.is_float:
        raise CompileError(f"a stream-K schedule adds partial sums as float tiles, and this "
                           f"loop's sum is a {t}", kernel=fn.name, span=last.span, help=HELP)
    return t


def _refuse_last_values(fn: Function, loop, suffix, acc) -> None:
    """CompileError at a read, after the loop, of a local the loop stores (but the sum): its
    value is the last iteration's, which under stream-K is the last iteration of the piece
    that the completing block ran, not the tile's."""
    stored = {id(op.operands[0]) for op in loop.walk() if op.name == Op.LOCAL_STORE}
    stored.discard(id(acc))
    for top in suffix:
        for op in top.walk():
            if op.name == Op.LOCAL_LOAD and id(op.operands[0]) in stored:
                raise CompileError("under a stream-K schedule the code after the reduction "
                                   "loop runs in the block that completes the tile, after only "
                                   "its own piece of the loop, so a value the loop leaves "
                                   "behind (other than the sum) is not the tile's",
                                   kernel=fn.name, span=op.span,
                                   help="compute it after the loop from the parameters, or "
                                        "partition without stream_k")


def _refuse_writes(fn: Function, ops) -> None:
    for top in ops:
        for op in top.walk():
            if op.name in WRITES:
                raise CompileError("under a stream-K schedule the body up to the end of the "
                                   "reduction loop runs for pieces of a tile in blocks that "
                                   "do not own it, so it may not write memory",
                                   kernel=fn.name, span=op.span,
                                   help="store after the loop, or partition without stream_k")


def _hoist(fn: Function, prefix, value, b: Builder, loop):
    """A copy, appended through ``b``, of what computes the loop's bound ``value`` from the
    parameters (arithmetic, tensor extents, locals stored once before); CompileError when it
    depends on the tile or on anything else."""
    made: dict = {id(p.value): p.value for p in fn.params}
    defs = {id(op.results[0]): op for op in prefix if op.results}
    stores: dict = {}
    for op in fn.walk():
        if op.name == Op.LOCAL_STORE:
            stores.setdefault(id(op.operands[0]), []).append(op)

    def copy(v):
        if id(v) in made:
            return made[id(v)]
        op = defs.get(id(v))
        if op is not None and op.name == Op.LOCAL_LOAD:
            only = stores.get(id(op.operands[0]), [])
            if len(only) == 1 and only[0] in prefix and prefix.index(only[0]) < prefix.index(op):
                made[id(v)] = copy(only[0].operands[1])
                return made[id(v)]
        if op is None or not (op.name in ARITH or op.name == Op.TILE_DIM):
            raise CompileError("a stream-K schedule needs the reduction loop's trip count to "
                               "follow from the parameters alone (every tile the same), and "
                               "this one depends on the tile or on the loop's state",
                               kernel=fn.name, span=loop.span, help=HELP)
        new = b.create(op.name, [copy(x) for x in op.operands], [r.type for r in op.results],
                       attrs=dict(op.attrs), span=op.span)
        made[id(v)] = new.results[0]
        return made[id(v)]
    return copy(value)

