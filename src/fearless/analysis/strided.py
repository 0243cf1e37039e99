"""Grid-stride and block-stride loops: the elements a thread reaches are a residue class of its own.

Used by ``passes/disjoint.py`` before the enumeration of ``analysis/owners.py``, which needs an
exact block and loops with constant bounds. Along each axis of an array, every access indexes
with one *kind* (g is the launch axis: 0 for x, 1 for y):

- ``grid``: the thread's own coordinate ``c = blockIdx * blockDim + threadIdx`` along g
  (``index_1d()``, a part of ``index_2d()``, or ``block_index(g) * block_dim(g) +
  thread_in_block(g)`` written out; under an exact block also ``block_index(g) * B + ...``), or
  the counter of a grid-stride loop ``range(c, stop, grid_size(g))``: its values ``c + k * T``,
  ``T`` the launch's threads along g, give back ``c`` (the value mod T), so the block and the
  thread along g;
- ``thread``: the counter of a block-stride loop ``range(thread_in_block(g), stop,
  block_dim(g))`` (``index_in_block()`` stands for ``thread_in_block(0)`` in a 1-d launch): its
  value mod blockDim gives back the thread along g;
- ``block``: ``block_index(g)`` itself, the block along g.

Each part of a thread's position (block and thread, along x and along y) may come from one array
axis at most. When the parts reached are the block and the thread along x, and along y too unless
the launch is known to be 1-d (the kernel uses ``index_1d()``, or the contract's exact block has
one axis), an element gives back the one thread that can reach it: no two threads meet, for
every grid, block and loop bound. Guards and loop bounds are ignored (a superset of elements).

This relies on a kernel that reads block coordinates running one logical thread per hardware
thread (``passes/contract.py`` marks it block-level and the LLVM backend coarsens only other
kernels): there ``index_1d()`` is ``blockIdx.x * blockDim.x + threadIdx.x`` and ``grid_size()``
the launch's thread count, as the proof assumes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

from fearless.analysis.linear import launch_product, special
from fearless.ir.opdef import Op
from fearless.ir.types import ThreadIndex

INF = math.inf  # a coverage extent: every index along the axis, whatever the grid
SIZE = "size"   # coverage as the launch's size (index_1d / index_2d): the host's default check
_AXIS = ("x", "y")


@dataclass(frozen=True)
class Kind:
    """How one index reaches its elements along launch axis ``axis``: ``name`` is "grid",
    "thread" or "block" (see the module docstring); ``loop`` the ``scf.for`` whose counter the
    index is, or None; ``one_d``: valid in a 1-d launch only (``index_in_block()``)."""

    name: str
    axis: int
    loop: object = None
    one_d: bool = False

    @property
    def parts(self) -> set:
        return {("block", self.axis), ("thread", self.axis)} if self.name == "grid" else \
            {(self.name, self.axis)}

    @property
    def loop_name(self) -> str:
        return "grid-stride loop" if self.name == "grid" else "block-stride loop"


class NotStrided(Exception):
    """No grid- or block-stride loop reaches the array: the enumeration decides."""


class Refused(Exception):
    """A stride loop reaches the array, and the proof fails: ``reason`` (a sentence), ``help``,
    and where to point: index ``k`` of access ``op``, or ``span`` when given."""

    def __init__(self, op, k: int, reason: str, help: str, span=None):
        super().__init__(reason)
        self.op, self.k, self.reason, self.help, self.span = op, k, reason, help, span


def prove(prover, accesses: list, name: str, block: tuple | None, launch_1d: bool):
    """Prove that no two threads reach one element of array ``name`` through ``accesses``
    (its loads and stores) by the residue rule of the module docstring.

    ``prover``: ``analysis.linear.Facts`` of the function; ``block``: the contract's exact block
    or None; ``launch_1d``: every launch of the kernel is 1-d. Returns ``(coverage, loops)``:
    per array axis ``(grid axis, elements per block)`` or ``(None, extent)`` (``INF`` along a
    loop), ``SIZE``, or None when unknown; and the stride loops proved (their step is >= 1).
    Raises NotStrided when no stride loop is involved and the rule does not apply, Refused when
    one is and it fails."""
    ctx = _Context(prover, name, block)
    kinds = [[ctx.kind(op, k, v) for k, v in enumerate(_indices(op))] for op in accesses]
    first = next(((op, k, kd) for op, row in zip(accesses, kinds) for k, kd in enumerate(row)
                  if kd is not None and kd.loop is not None), None)
    if first is None:
        if block:
            raise NotStrided()  # the enumeration handles an exact block, as before
        layout = _layout(kinds)
        if layout is None or _missing(layout, launch_1d) or _overlap(layout) or \
                [(kd.name, kd.axis) for kd in layout] != _OWN.get(len(layout)):
            raise NotStrided()
        return SIZE, []
    op0, k0, kind0 = first
    where = f"in the {kind0.loop_name} on line {_line(kind0.loop)}"
    expected = [(kd.name, kd.axis) if kd else None for kd in kinds[accesses.index(op0)]]
    for op, row in zip(accesses, kinds):
        for k, kd in enumerate(row):
            if kd is not None and (kd.name, kd.axis) == expected[k]:
                continue
            if kd is None and any(other is not None and other.loop is not None for other in row):
                raise Refused(op, k, f"{where}, each index of '{name}' must be the loop's "
                                     f"counter or a coordinate of the thread or its block, and "
                                     f"this one is neither, so threads may meet",
                              _MISSING_HELP["block"] if kind0.name == "thread" else
                              _HELP["grid"])
            raise Refused(op, k, f"{where}, '{name}' may be accessed only at the loop's counter: "
                                 f"each thread owns the elements that its counter visits, and "
                                 f"this index may be another thread's element",
                          _ONLY_COUNTER.format(name=name))
    layout = kinds[0]
    overlap = _overlap(layout)
    if overlap:
        raise Refused(op0, k0, f"'{name}' is indexed along two axes by the thread's "
                               f"{overlap[0]} along {_AXIS[overlap[1]]}, so different threads "
                               f"may reach one element", _HELP["grid"])
    missing = _missing(layout, launch_1d)
    if missing:
        help = _MISSING_HELP[missing]
        if missing == "y" and kind0.name == "grid":
            help += ", or start the loop at fl.thread.index_1d(), which makes every launch 1-d"
        raise Refused(op0, k0, f"{where}, " + _MISSING[missing].format(name=name), help)
    loops = {id(kd.loop): kd.loop for row in kinds for kd in row if kd.loop is not None}
    return _coverage(accesses, kinds, block), list(loops.values())


_OWN = {1: [("grid", 0)], 2: [("grid", 1), ("grid", 0)]}  # index_1d, index_2d order
_HELP = {
    "grid": "write for i in range(fl.thread.index_1d(), n, fl.thread.grid_size()): thread t "
            "visits t, t + grid_size(), ..., and no other thread does",
    "thread": "write for c in range(fl.thread.thread_in_block(0), n, fl.thread.block_dim()) "
              "with one block per row, out[fl.thread.block_index(), c]: thread t of a block "
              "visits t, t + block_dim(), ..., and no other thread of the block does",
}
_ONLY_COUNTER = "index '{name}' only with the loop's counter itself, as {name}[i]"
_MISSING = {
    "block": "the blocks of the launch all reach the same elements of '{name}': nothing in the "
             "index tells one block from another",
    "thread": "the threads of a block all reach the same elements of '{name}': nothing in the "
              "index tells one thread from another",
    "y": "threads that differ only along y (thread_in_block(1), block_index(1)) reach the same "
         "elements of '{name}', and the launch is not known to be 1-d",
}
_MISSING_HELP = {
    "block": "give each block its own row, out[fl.thread.block_index(), c], or walk the whole "
             "launch: for i in range(fl.thread.index_1d(), n, fl.thread.grid_size())",
    "thread": _HELP["grid"],
    "y": "declare a 1-d launch with an exact block, "
         "@fl.kernel(contract=fl.Contract(dims=1, block=256))",
}


def _indices(op) -> list:
    return op.operands[1:1 + op.operands[0].type.ndim]


def _line(op) -> str:
    return str(op.span.line) if op.span else "?"


def _layout(kinds):
    """The kinds of the first access when every access has the same (name, axis) on every
    axis, else None."""
    if any(kd is None for row in kinds for kd in row):
        return None
    first = [(kd.name, kd.axis) for kd in kinds[0]]
    return kinds[0] if all([(kd.name, kd.axis) for kd in row] == first for row in kinds) else None


def _overlap(layout):
    """A (part, axis) that two array axes both give, or None."""
    seen = set()
    for kd in layout:
        if seen & kd.parts:
            return min(seen & kd.parts)
        seen |= kd.parts
    return None


def _missing(layout, launch_1d: bool):
    """What the parts of ``layout`` lack to tell every thread of a launch apart, or None."""
    parts = set().union(*(kd.parts for kd in layout))
    if ("block", 0) not in parts:
        return "block"
    if ("thread", 0) not in parts:
        return "thread"
    y = {("block", 1), ("thread", 1)} <= parts and not any(kd.one_d for kd in layout)
    return None if y or launch_1d else "y"


def _coverage(accesses, kinds, block):
    """What the stores reach per array axis (see ``prove``), or None when that is unknown."""
    stores = [row for op, row in zip(accesses, kinds) if op.name == Op.MEM_STORE]
    if not stores:
        return None
    out = []
    for k, kd in enumerate(kinds[0]):
        if any(row[k].loop is not None for row in stores):
            out.append((None, INF))
        elif kd.name == "block":
            out.append((kd.axis, 1))
        elif kd.name == "grid" and block:
            out.append((kd.axis, block[kd.axis] if kd.axis < len(block) else 1))
        else:  # the launch's size along the axis: no per-block form without an exact block
            return None
    return tuple(out)


class _Context:
    """The classification of one array's indices (``kind``) and the diagnoses of its loops."""

    def __init__(self, prover, name: str, block):
        self.prover, self.name, self.block = prover, name, block

    def extent(self, axis: int):
        """The exact block's extent along launch axis ``axis``, or None."""
        if not self.block:
            return None
        return self.block[axis] if axis < len(self.block) else 1

    def kind(self, op, k: int, value):
        """The Kind of index ``k`` (``value``) of access ``op``, or None; Refused for a stride
        loop with a wrong start or step, or an index computed from one's counter."""
        form = self.prover.resolved(value)
        loops = [self.prover.region_args[a[1]] for a, _ in form[1]
                 if a[0] == "value" and a[1] in self.prover.region_args]
        loops = [loop for loop in loops if any(_mentions_launch(self.prover.resolved(v))
                                               for v in (loop.operands[0], loop.operands[2]))]
        if not loops:
            kd = coordinate(form, self.block)
            if kd is None or kd.name == "thread" or (
                    _is_thread_index(form) and not isinstance(value.type, ThreadIndex)):
                return None  # arithmetic on a ThreadIndex gives a plain integer, by the rules
            return kd
        loop = loops[0]
        kind = self.loop_kind(op, loop)
        if form != (0, ((("value", id(loop.regions[0].args[0])), 1),)):
            raise Refused(op, k, f"in the {kind.loop_name} on line {_line(loop)}, "
                                 f"'{self.name}' may be accessed only at the loop's counter: "
                                 f"each thread owns the elements that its counter visits, and "
                                 f"this index may be another thread's element",
                          _ONLY_COUNTER.format(name=self.name))
        return kind

    def loop_kind(self, op, loop) -> Kind:
        """The Kind of ``loop``'s counter; Refused, pointing at its start or step, when the loop
        is neither a grid-stride nor a block-stride loop."""
        start = coordinate(self.prover.resolved(loop.operands[0]), self.block)
        step = self.prover.resolved(loop.operands[2])
        if start is not None and start.name in ("grid", "thread"):
            if self.steps(step, start.name, start.axis):
                return Kind(start.name, start.axis, loop, start.one_d)
            self.refuse_bound(op, loop, 2, start.name, start.axis, "step")
        by_step = next(((n, a) for n in ("grid", "thread") for a in (0, 1)
                        if self.steps(step, n, a)), None)
        self.refuse_bound(op, loop, 0, *(by_step or ("grid", 0)),
                          "start" if by_step else "both")

    def refuse_bound(self, op, loop, which: int, name: str, axis: int, wrong: str) -> NoReturn:
        """Refused, with the caret under the loop's start (``which`` 0) or step (2)."""
        verb = "written" if op.name == Op.MEM_STORE else "read"
        suffix = f"({axis})" if axis else "()"
        count = (f"the launch's thread count (fl.thread.grid_size{suffix})" if name == "grid"
                 else f"the block's thread count (fl.thread.block_dim{suffix})")
        own = "own index" if name == "grid" else "index in its block"
        what = {"step": f"starts at the thread's {own} but does not step by {count}",
                "start": f"steps by {count} but does not start at the thread's {own}",
                "both": f"neither starts at the thread's own index nor steps by {count}"}[wrong]
        spans = loop.attrs.get("bound_spans")
        raise Refused(op, 0, f"'{self.name}' is {verb} on line {_line(op)} at the counter of "
                             f"this loop, which {what}, so two threads may reach one element",
                      _HELP[name], spans[which] if spans else loop.span)

    def steps(self, form, name: str, axis: int) -> bool:
        """Whether ``form`` is ``grid_size(axis)`` (name "grid") or ``block_dim(axis)``
        ("thread"), spelled with the registers or, under an exact block, its extent."""
        const, terms = form
        extent = self.extent(axis)
        if not terms:  # a constant: the exact block's extent along the axis
            return name == "thread" and extent is not None and const == extent
        if const or len(terms) != 1:
            return False
        (atom, coef), = terms
        if name == "thread":
            return coef == 1 and special(atom) == ("block_dim", axis)
        return coef == 1 and launch_product(atom) == (("block_dim", "grid_dim"), axis) or \
            extent is not None and coef == extent and special(atom) == ("grid_dim", axis)

def coordinate(form, block=None):
    """The Kind (without a loop) of a linear form that is one of the thread's coordinates:
    ``index_1d()``, a part of ``index_2d()``, ``block_index(g) * block_dim(g) +
    thread_in_block(g)`` (``* B`` for ``block_dim(g)`` under the exact ``block``),
    ``thread_in_block(g)``, ``index_in_block()`` or ``block_index(g)``; else None."""
    const, terms = form
    if const or not 1 <= len(terms) <= 2:
        return None
    if len(terms) == 1:
        atom, coef = terms[0]
        return _coordinate_atom(atom) if coef == 1 else None
    for (a, ca), (b, cb) in (terms, terms[::-1]):  # block part * B + thread part
        inner = _coordinate_atom(b) if cb == 1 else None
        if inner is None or inner.name != "thread":
            continue
        g = inner.axis
        extent = (block[g] if g < len(block) else 1) if block else None
        if ca == 1 and launch_product(a) == (("block_dim", "block_index"), g) or \
                special(a) == ("block_index", g) and ca == extent:
            return Kind("grid", g, one_d=inner.one_d)
    return None


def _coordinate_atom(atom):
    """The Kind of an atom that is a coordinate of the thread by itself, or None."""
    if atom[0] == Op.SIMT_THREAD_INDEX:
        attrs = dict(atom[1])
        if attrs["space"] == 3:
            return None  # the stride rules reason about x and y only
        axis = 0 if attrs["space"] == 1 or attrs["axis"] == 1 else 1
        if attrs.get("block"):
            return Kind("thread", axis, one_d=attrs["space"] == 1)  # the slot is x in 1-d
        return Kind("grid", axis)
    reg = special(atom)
    if reg is not None and reg[0] in ("block_index", "thread_in_block"):
        return Kind("block" if reg[0] == "block_index" else "thread", reg[1])
    return None


def _is_thread_index(form) -> bool:
    """Whether ``form`` is one global ThreadIndex, ``index_1d()`` or a part of ``index_2d()``."""
    return len(form[1]) == 1 and form[1][0][0][0] == Op.SIMT_THREAD_INDEX


def _mentions_launch(key) -> bool:
    """Whether a form or key reads the thread's or the launch's coordinates."""
    if isinstance(key, tuple):
        if key and key[0] in (Op.SIMT_THREAD_INDEX, Op.SIMT_SPECIAL):
            return True
        return any(_mentions_launch(part) for part in key)
    return False
