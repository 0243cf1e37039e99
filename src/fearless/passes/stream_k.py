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

The schedule (``P`` blocks, ``T`` tiles of ``q = max(n, 1)`` iterations, ``W = T // P`` whole
waves) runs as three launches of ``P`` blocks, each compiled alone (``ir.types.Persistent.phase``)
and run in stream order, so each has the registers of its own code:

1. whole tiles: block ``b`` takes tiles ``b, b + P, ...`` below ``W P``, the body as written
   (as ``persistent.py`` runs it); below ``T`` where the ``R = T - W P`` tiles left number more
   than ``P / TAIL_SPLIT`` (``compiler/info.tail_split``), and then this is the only launch
   (where those are all the tiles, its form with one block per tile, ``Persistent.single``:
   the checks below, then the body as written, as ``persistent.py`` runs it;
   ``runtime/partition.one_block_per_tile``);
2. pieces: the ``I = R q`` iterations of the ``R = T - W P`` tiles left are cut into ``S =
   max(R, min(P, I // MIN_SHARE))`` balanced shares (the first ``I % S`` hold ``I // S + 1``
   iterations, the rest ``I // S``), block ``b < S`` taking the b-th; S >= R keeps a share
   within ``q`` iterations, so it touches at most two tiles, its pieces ``0`` and ``1``, run
   in the order 1, 0 (``_pieces``: the blocks then read the same K steps together). This
   arithmetic runs in i32 (i64 divisions are calls, around which tileiras spilled registers);
   it is exact while ``P q < 2^31``, and past that each shared tile is one share (S = R). The
   runtime refuses a stream-K output of 2^31 tiles or more. Per piece:
       tile.select %out, t;  <prefix>;  for k in range(k0, k1): <loop>
       tile.partial_store acc, 2b + piece
3. fixup: block ``b`` takes shared tile ``W P + b`` (if any):
       tile.select %out, t;  <prefix>;  acc = sum of tile.partial_load of the tile's pieces
       <suffix>
   The sum runs from zero over the pieces in block order, so the result does not depend on
   when each block ran.

Each tile is stored once: by its block in launch 1, or by its block in launch 3 after every
piece of launch 2 (the stream orders the launches); a slot is written by one block and read by
one. Nothing waits for another block, so no order of the blocks can hang. The workspace of
partial sums (two slots per block) is the runtime's, per stream (``runtime/workspace.py``). This
pass runs after the checks (on the body as written) and in place of ``persistent.py`` for these
launches.

Speed: an earlier form, one launch in which the block that completed a tile (counted with an
atomic) added its pieces, made tileiras 13.5 spill the accumulator around the MMAs of every
loop, and ran 1.1 to 3.1 times slower than the best persistent tile (benchmarks/RESULTS.md,
session 13). Compiled alone, none of the three launches spills (sm_90, 128 x 128 and
128 x 256 f16 GEMM tiles, session 15).
"""
from __future__ import annotations

import fearless.compiler.info as info
from fearless.errors import CompileError
from fearless.ir.core import Builder, Function, Region, Value
from fearless.ir.opdef import Op
from fearless.ir.ops.arith import ARITH
from fearless.dtypes import i32
from fearless.ir.types import INDEX, Role, Scalar, TensorView, Tile
from fearless.passes.persistent import refuse_returns, tile_loop

# iterations of a share at least. A tile cut into k pieces ends the tail in about q/k iterations,
# and its fixup block then adds k partial sums one after another: with an iteration's time c_i
# and a partial sum's load c_p, k = sqrt(q c_i / c_p) is best. On the H200 (128 x 128 f16 tiles,
# bk 64) c_i is about 0.4 us at 8192^3; c_p is estimated at 1 us (64 KB read by one block), which
# gives shares of 13-18 iterations at q 64-128. Measured (session 16, while the fixup's loads
# still waited on one another): shares of 4, 16 and 64 iterations took 1847, 1622 and 1600 us at
# 8192^3 (persistent: 1522), 166, 51 and 40 us at 128 x 1024 x 4096 (persistent: 21).
MIN_SHARE = 16
I32 = Scalar(i32)
I32_LIMIT = 2 ** 31   # the shares' i32 arithmetic is exact where P q is below it
WHOLE, PIECES, FIXUP = 1, 2, 3   # the launches of a stream-K call (ir.types.Persistent.phase)
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
    if schedule.phase == WHOLE:   # tiles b, b + P, ... below W P (all T: tail_split), as written
        # the trip count's rule checked here too (its copy unused), so that whether a kernel
        # is refused does not depend on the launches a shape makes
        _hoist(fn, prefix, loop.operands[1], Builder(Region()), loop)
        if schedule.single:   # no block gets a second tile: the body as one tile per block
            return fn
        whole = s.mul(s.div(tiles, p), p)
        full = s.cmp("gt", s.mul(s.sub(tiles, whole), s.const(info.TAIL_SPLIT)), p)
        tile_loop(s.b, out, schedule, b, s.select(full, tiles, whole), p).ops.extend(ops)
    else:
        n = _hoist(fn, prefix, loop.operands[1], s.b, loop)
        q = s.max(n, s.const(1))
        # the shares' arithmetic runs in i32: i64 divisions are calls that made tileiras 13.5
        # spill registers around them (24-32 bytes per thread). It cannot overflow where P q
        # < 2^31 (every value is at most the I = R q < P q shared iterations, plus q); past
        # that (a loop of millions of steps) each shared tile is one piece (`fits` false).
        limit = s.const(I32_LIMIT)   # min(q, 2^31) P < 2^62: no wrap (P, a grid, < 2^31)
        fits = s.cmp("lt", s.mul(p, s.min(q, limit)), limit)
        s32 = _Scalars(s.b, I32)
        # T < 2^31 (kernel/tile.py refuses more tiles), and so are P and q where fits
        b32, p32, t32 = s32.narrow(b), s32.narrow(p), s32.narrow(tiles)
        whole32 = s32.mul(s32.div(t32, p32), p32)
        # past `fits` the arithmetic is unused but defined: lower.py's integer division gives 0
        # for a zero divisor (docs/semantics.md)
        sh = _Shares(s32, s32.sub(t32, whole32), s32.narrow(q), p32, fits)
        if schedule.phase == PIECES:
            _pieces(s32, sh, b32, n, whole32, out, select, prefix, loop, acc)
        elif schedule.phase == FIXUP:
            _fixup(s32, sh, b32, p32, whole32, t32, out, schedule, prefix, suffix, acc,
                   acc_type)
        else:
            raise ValueError(f"stream-K phase {schedule.phase}: one of 1, 2, 3")
    fn.body = entry
    if schedule.phase != WHOLE:   # the launches that use the workspace take it as a parameter
        fn.attrs["stream_k"] = acc_type
    return fn


class _Shares:
    """The partial wave's shares, the same i32 arithmetic in the pieces and the fixup launch
    (the module docstring's R, q, I, S): iterations are counted from the first shared one, so
    tile ``W P + t`` holds ``[t q, t q + q)``. The S shares are balanced: the first ``E = I %
    S`` hold ``L + 1 = I // S + 1`` iterations, the rest ``L``. Where ``fits`` is false (P q
    >= 2^31, where I could overflow) each shared tile is one share (S = R)."""

    def __init__(self, s, r, q, p, fits):
        self.s, self.r, self.q, self.fits = s, r, q, fits
        total = s.mul(r, q)
        spread = s.max(r, s.min(p, s.div(total, s.const(MIN_SHARE))))
        self.shares = s.select(fits, spread, r)
        self.length = s.div(total, self.shares)
        self.extra = s.mod(total, self.shares)

    def start(self, c):
        """The first iteration of share ``c`` (``c`` = S: the end)."""
        s = self.s
        return s.add(s.mul(c, self.length), s.min(c, self.extra))

    def owner(self, x):
        """The share that holds iteration ``x``."""
        s = self.s
        long = s.mul(self.extra, s.add(self.length, s.const(1)))  # iterations of the first E
        return s.select(s.cmp("lt", x, long), s.div(x, s.add(self.length, s.const(1))),
                        s.add(self.extra, s.div(s.sub(x, long), self.length)))


def _pieces(s, sh: _Shares, b, n, whole, out, select, prefix, loop, acc) -> None:
    """Block b's share [start, end): per piece (the share's part of one tile, at most two),
    the body up to the end of the loop over the piece's iterations, then its partial sum to
    slot 2b + piece."""
    start = sh.start(s.min(b, sh.shares))
    end = sh.start(s.min(s.add(b, s.const(1)), sh.shares))
    first_t = s.select(sh.fits, s.div(start, sh.q), b)
    last_t = s.div(s.max(s.sub(end, s.const(1)), s.const(0)), sh.q)
    split = s.select(s.cmp("lt", start, end), s.add(s.sub(last_t, first_t), s.const(1)),
                     s.const(0))
    pieces = s.select(sh.fits, split, s.select(s.cmp("lt", b, sh.r), s.const(1), s.const(0)))
    body = Region([Value(INDEX, "piece")])
    with s.b.at(body):
        # the later piece first: a share's piece of its second tile starts at that tile's
        # iteration 0, and the piece of its first tile ends at that tile's last iteration, so
        # blocks that run the later piece first read the same K steps at the same time (as
        # whole waves do, sharing them in L2), instead of each at its own offset. On the H200
        # the launch took 137.8 us instead of 195.8 at 8192 x 4096 x 14336 with 128 x 256
        # tiles, 25.2 instead of 29.3 at 4096^3 (benchmarks/RESULTS.md, session 19)
        piece = s.sub(s.sub(pieces, s.const(1)), s.narrow(body.args[0]))
        t = s.add(first_t, piece)
        tq = s.mul(t, sh.q)
        k0 = s.index(s.sub(s.max(start, tq), tq))
        k1 = s.index(s.sub(s.min(end, s.add(tq, sh.q)), tq))
        zero = s.b.create(Op.CONSTANT, [], [INDEX], attrs={"value": 0}).result
        k0 = s.b.create(Op.SELECT, [sh.fits, s.b.create(Op.MIN, [k0, n]).result, zero]).result
        k1 = s.b.create(Op.SELECT, [sh.fits, s.b.create(Op.MIN, [k1, n]).result, n]).result
        s.b.create(Op.TILE_SELECT, [out, s.index(s.add(whole, t))], attrs=select)
        loop.operands[0], loop.operands[1] = k0, k1
    body.ops.extend(prefix + [loop])
    with s.b.at(body):
        slot = s.index(s.add(s.mul(b, s.const(2)), piece))
        s.b.create(Op.TILE_PARTIAL_STORE, [s.b.create(Op.LOCAL_LOAD, [acc]).result, slot])
    s.b.create(Op.SCF_FOR, [s.index(s.const(0)), s.index(pieces), s.index(s.const(1))],
               attrs={"step_sign": 1}, regions=[body])


def _fixup(s, sh: _Shares, b, p, whole, tiles, out, schedule, prefix, suffix, acc,
           acc_type) -> None:
    """The shared tiles W P + b, W P + b + P, ... (launched with P blocks, so each block has at
    most one): the body before the loop, the sum of every piece's partial, then the body after
    the loop."""
    first = s.b.create(Op.ADD, [s.index(whole), s.index(b)]).result   # i64: W P + b may pass
    body = tile_loop(s.b, out, schedule, first, s.index(tiles), s.index(p))   # 2^31 near T
    body.ops.extend(prefix)
    with s.b.at(body):
        _sum_partials(s, acc, acc_type, sh, s.sub(s.narrow(body.args[0]), whole))
    body.ops.extend(suffix)


def _sum_partials(s, acc, acc_type, sh: _Shares, t) -> None:
    """``acc`` becomes the sum of the partials of shared tile ``t`` (counted from W P), added
    in block order from zero, so that the result does not depend on when each block ran."""
    s.b.create(Op.LOCAL_STORE, [acc, s.b.create(Op.CONSTANT, [], [acc_type],
                                                attrs={"value": 0.0}).result])
    tq = s.mul(t, sh.q)
    first = s.select(sh.fits, sh.owner(tq), t)
    last = s.select(sh.fits, sh.owner(s.add(tq, s.sub(sh.q, s.const(1)))), t)
    each = Region([Value(INDEX, "block")])
    s.b.create(Op.SCF_FOR, [s.index(first), s.index(s.add(last, s.const(1))),
                            s.index(s.const(1))], attrs={"step_sign": 1}, regions=[each])
    with s.b.at(each):
        c = s.narrow(each.args[0])
        lo = sh.start(c)
        # the block's first piece (slot 2c) when the tile is its share's first, else its last
        first_of_c = s.b.create(Op.OR, [s.cmp("eq", s.div(lo, sh.q), t),
                                        s.not_(sh.fits)]).result
        slot = s.add(s.mul(c, s.const(2)), s.select(first_of_c, s.const(0), s.const(1)))
        part = s.b.create(Op.TILE_PARTIAL_LOAD, [s.index(slot)], [acc_type]).result
        now = s.b.create(Op.LOCAL_LOAD, [acc]).result
        s.b.create(Op.LOCAL_STORE, [acc, s.b.create(Op.ADD, [now, part]).result])


class _Scalars:
    """Integer arithmetic of scalar type ``ty`` (i64 or i32) appended through a Builder, one
    method per op."""

    def __init__(self, b: Builder, ty=INDEX):
        self.b, self.ty = b, ty

    def const(self, value: int):
        return self.b.create(Op.CONSTANT, [], [self.ty], attrs={"value": value}).result

    def narrow(self, v):
        """``v`` converted to this arithmetic's type."""
        return v if v.type == self.ty else self.b.create(Op.CAST, [v], [self.ty]).result

    def index(self, v):
        """``v`` converted to i64, the type of loop bounds, tile numbers and slots."""
        return v if v.type == INDEX else self.b.create(Op.CAST, [v], [INDEX]).result

    def _op(self, name, *args):
        return self.b.create(name, list(args)).result

    def add(self, x, y): return self._op(Op.ADD, x, y)        # noqa: E704
    def sub(self, x, y): return self._op(Op.SUB, x, y)        # noqa: E704
    def mul(self, x, y): return self._op(Op.MUL, x, y)        # noqa: E704
    def div(self, x, y): return self._op(Op.FLOORDIV, x, y)   # noqa: E704
    def mod(self, x, y): return self._op(Op.MOD, x, y)        # noqa: E704
    def not_(self, x): return self._op(Op.NOT, x)             # noqa: E704
    def min(self, x, y): return self._op(Op.MIN, x, y)        # noqa: E704
    def max(self, x, y): return self._op(Op.MAX, x, y)        # noqa: E704

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

