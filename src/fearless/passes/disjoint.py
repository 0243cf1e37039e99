"""DisjointSlice ownership: no element is reached by two threads of a launch.

The frontend keeps a ThreadIndex operand on accesses to Disjoint arrays only when the index
expression *is* the value returned by ``fl.thread.index_1d()`` (or the ``(row, col)`` of
``index_2d()``, the ``(d0, d1, d2)`` of ``index_3d()``); any arithmetic produced a plain i64. An
array accessed only so is proved by a type check: a rank-n Disjoint array needs ``tid<nd, axis k>``
at position k, and no two threads of a launch share a ThreadIndex. An array accessed at computed
indices (a thread that owns several elements, ``out[r0 + ty + 8 * k, c0 + tx]``) is proved by
enumerating the threads of a block over all its accesses together (``analysis/owners.py``); that
needs the contract's exact block. An array accessed at the counter of a grid-stride loop (``for i in
range(fl.thread.index_1d(), n, fl.thread.grid_size())``), of a block-stride loop, or at the thread's
index spelled out (``block_index(0) * block_dim(0) + thread_in_block(0)``) is proved first by
``analysis/strided.py``, with any block; a stride loop it refuses gets its diagnosis, which points
at the loop's start or step. Each proof makes the writes race-free.

Sets ``fn.attrs["coverage"]``: for each array proved by enumeration or by the stride rule, what
a launch writes of it (per axis ``(grid axis, elements per block)`` or ``(None, extent)``, the
extent ``inf`` along a stride loop: every index, whatever the grid; None when unknown), for the
host's check that the launch covers the whole output; an array indexed only by the thread's own
coordinates, in ``index_1d``/``index_2d``/``index_3d`` order, is left to the check of its
launch's size. In a kernel using ``index_3d()``, the only proof is the type check: neither the
stride rules nor the enumeration model the z axis, so any other index is refused.
A stride loop proved has a step >= 1, so its ``step_sign`` becomes 1.
"""
from __future__ import annotations

from fearless.analysis import owners, strided
from fearless.analysis.common import params_by_value
from fearless.analysis.linear import guard_facts
from fearless.errors import SafetyError
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.types import Access, ThreadIndex

_AXIS = {2: {0: "row", 1: "column"}, 3: {0: "d0 (z)", 1: "d1 (y)", 2: "d2 (x)"}}


def run(fn: Function, options) -> Function:
    params = params_by_value(fn)
    by_array: dict[int, list] = {}
    for op in fn.walk():
        if op.name in (Op.MEM_LOAD, Op.MEM_STORE) and \
                op.operands[0].type.access is Access.DISJOINT:
            by_array.setdefault(id(op.operands[0]), []).append(op)
    prover, coverage = None, {}
    block = getattr(options, "block", None)
    three_d = any(op.name == Op.SIMT_THREAD_INDEX and op.attrs["space"] == 3 for op in fn.walk())
    for accesses in by_array.values():
        bad = [(op, k) for op in accesses for k in _computed(op)]
        if not bad:
            continue
        prover = prover or guard_facts(fn)
        name = params[id(accesses[0].operands[0])].name
        if three_d:
            _refuse(fn, name, *bad[0], None)
        try:
            cover, loops = strided.prove(prover, accesses, name, block, _launch_1d(fn, block))
            if cover != strided.SIZE:
                coverage[name] = cover
            for loop in loops:
                loop.attrs["step_sign"] = 1
            continue
        except strided.NotStrided:
            pass
        except strided.Refused as why:
            spans = why.op.attrs.get("index_spans")
            raise SafetyError(why.reason, kernel=fn.name, param=name, help=why.help,
                              span=why.span or (spans[why.k] if spans else why.op.span)) from None
        try:
            coverage[name] = owners.prove(prover, accesses, block, shared=False)
        except owners.NoBlock:
            op, k = bad[0]
            _refuse(fn, name, op, k, None, block_level=_uses_block(prover, op.operands[1 + k]))
        except owners.Unproven as why:
            op, k = bad[0]
            _refuse(fn, name, op, k, str(why))
    fn.attrs["coverage"] = coverage
    return fn


def _launch_1d(fn: Function, block) -> bool:
    """Whether every launch is 1-d: the contract's exact block has one axis, or the kernel uses
    ``index_1d()`` (``prepare()`` then refuses a 2-d launch)."""
    return bool(block and len(block) == 1) or any(
        op.name == Op.SIMT_THREAD_INDEX and op.attrs["space"] == 1 and not op.attrs.get("block")
        for op in fn.walk())


def _computed(op) -> list[int]:
    """The index positions of ``op`` that are not the thread's own ThreadIndex."""
    ndim = op.operands[0].type.ndim
    return [k for k, index in enumerate(op.operands[1:1 + ndim])
            if index.type != ThreadIndex(ndim, k)]


def _uses_block(prover, value) -> bool:
    """Whether ``value`` is computed from the block's coordinates (block_index, index_in_block,
    lane): an index the owners proof could check, given an exact block."""
    def walk(key) -> bool:
        if not isinstance(key, tuple) or not key:
            return False
        if key[0] == Op.SIMT_THREAD_INDEX and dict(key[1]).get("block"):
            return True
        if key[0] == Op.SIMT_SPECIAL and dict(key[1]).get("reg") in (
                "block_index", "lane", "warp_index", "thread_in_block"):
            return True
        return any(walk(part) for part in key[1:] if isinstance(part, tuple))
    return walk(prover.key(value)) or any(walk(atom) for atom, _ in prover.linear(value)[1])


def _refuse(fn: Function, name: str, op, k: int, why: str | None, block_level: bool = False):
    ndim = op.operands[0].type.ndim
    spans = op.attrs.get("index_spans")
    got = op.operands[1 + k].type
    reason = _reason(op.name, got, ThreadIndex(ndim, k), k, ndim)
    if why and not isinstance(got, ThreadIndex):
        reason += f", and the compiler cannot prove that threads reach distinct elements: {why}"
    if op.attrs.get("rmw"):
        help = (f"several threads may update this element: declare '{name}' "
                f"fl.AtomicSlice[T] and write {name}.add(i, v)")
    elif why:  # the enumeration ran and found a collision or an unsupported index
        help = ("give each thread its own elements: indices block_index(a) * B plus a part in "
                "[0, B) computed from index_in_block, lane and constants that differs between "
                "threads; or write through fl.AtomicSlice / fl.UnsafeSlice")
    elif block_level:  # the proof needs the block's threads, which only a contract fixes
        help = ("fix the block in the kernel's contract, fl.Contract(dims=..., block=...): "
                "then indices built from block_index and index_in_block that give each thread "
                "its own elements are checked and accepted")
    else:
        help = _help(ndim)
    raise SafetyError(reason, kernel=fn.name, param=name,
                      span=spans[k] if spans else op.span, help=help)


def _reason(opname: str, got, want: ThreadIndex, k: int, ndim: int) -> str:
    verb = "written" if opname == Op.MEM_STORE else "read"
    kind = "DisjointSlice" if ndim == 1 else "DisjointArray"
    if not isinstance(got, ThreadIndex):
        return (f"a {kind} may be {verb} only at this thread's own index, and this index is a "
                f"computed integer")
    if got.space != want.space:
        return (f"a {ndim}-d {kind} needs the {ndim}-d thread index, not the "
                f"{got.space}-d one")
    names = _AXIS[ndim]
    return (f"index {k} of this {kind} must be the thread's {names[want.axis]}, but it is the "
            f"thread's {names[got.axis]}")


def _help(ndim: int) -> str:
    if ndim == 1:
        return ("index with i = fl.thread.index_1d() itself; arithmetic on a ThreadIndex gives a "
                "plain integer, which could be another thread's element")
    if ndim == 3:
        return "index as out[d0, d1, d2] with d0, d1, d2 = fl.thread.index_3d(), in that order"
    return "index as out[r, c] with r, c = fl.thread.index_2d(), in that order"
