"""Prove that the accesses of one array never let two threads touch one element.

Used by ``passes/disjoint.py`` (a DisjointSlice accessed at computed indices: a thread that owns
several elements, such as the four rows of a 32 x 8-thread transpose block) and by
``passes/shared.py`` (shared-memory writes at computed slots, such as a swizzled tile). The
index of each access, along each axis, is a linear form (``analysis/linear.py``) whose atoms are
either *thread parts*, computable from the thread's coordinates in its block, constants and the
counters of constant-bound loops (``+ - * // % & | ^ << >>``, ``min``, ``max``), or *block
parts*, equal in every thread of a block. With the contract's exact block, every thread of one
block is enumerated (at most 1024, times the loop counters' values), less those that a guard
on their own coordinates keeps out (``if t < 4:``, ``if t == 0:``):

- within a block, no element may be reached by two different threads;
- for a global array, each grid axis of the launch must appear as ``B * block_index(axis)``
  along exactly one array axis, the same in every access, with the thread part of that array
  axis inside ``[0, B)`` for every thread: then the block is a function of the element, so two
  blocks never meet either; a global thread index ``index_1d()``/``index_2d()`` counts as
  ``block_dim * block_index + index_in_block``, and ``block_index(a) * block_dim(a)`` as
  ``B * block_index(a)`` with B the block's extent along a;
- for a shared array (one per block), the block parts must be the same in every access.

This is exhaustive checking of a finite model, not a heuristic: whatever passes is disjoint for
every launch with that block. Other guards (``if i < len(out):``) are ignored: a superset.
"""
from __future__ import annotations

import math
from itertools import product

from fearless.analysis.linear import launch_product
from fearless.ir.core import Operation
from fearless.ir.opdef import REGISTRY, Op
from fearless.ir.ops.arith import ARITH

MAX_POINTS = 1 << 16   # threads x loop-counter values enumerated per access
I64 = 1 << 63          # indices are i64: a value outside [-I64, I64) would wrap in the kernel
MAX_SCALE = 1 << 31    # block_index * B stays far below 2^63 for every grid (< 2^31 blocks)
# the index arithmetic the proofs evaluate, by each op's own eval on Python ints: exact, so a
# value is the kernel's i64 one unless it leaves i64 (_i64 refuses it) or has none (a zero
# divisor, a negative shift: unknown). A left shift past the width is left unknown too: its exact
# value could be astronomically large
_INDEX_OPS = frozenset((Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX, Op.AND,
                        Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.NEG))


def _index_op(atom) -> bool:
    """Whether ``atom`` is i64 index arithmetic the proofs evaluate."""
    return isinstance(atom[0], str) and atom[0] in _INDEX_OPS and atom[2] == "i64"


class Unproven(Exception):
    """Why the proof failed, in words that finish "... because <reason>"."""


class NoBlock(Unproven):
    """The contract fixes no exact block: nothing to enumerate (the usual case, so callers
    leave it out of their message and let their help line say it)."""


def prove(prover, accesses: list[Operation], block: tuple | None, shared: bool):
    """Raise ``Unproven`` unless no two threads of a launch reach one element through
    ``accesses`` (loads and stores of one array; operand 0 the array, then one index per axis).
    ``prover``: ``analysis.linear.Facts`` of the function (value keys, linear forms, loop
    counters). ``block``: the contract's exact block (x, y) or None. ``shared``: the array is
    per block.

    Returns, for a global array whose stores in one block reach a whole box of elements, the
    coverage per array axis, ``(grid axis, elements per block)`` or ``(None, extent)`` for an
    axis no block index scales: a launch of grid ``g`` writes ``g[axis] * elements`` along it.
    None otherwise (and for shared arrays)."""
    if not block:
        raise NoBlock("the launch contract fixes no exact block (fl.Contract(block=...)), so "
                       "the threads of a block cannot be enumerated")
    model = Model(prover, block)
    forms = [model.access(op) for op in accesses]
    uniform = {f[1] for f in forms}
    if len(uniform) > 1:
        raise Unproven("the accesses add different per-block offsets, so threads of different "
                       "blocks may meet")
    blocks, offsets = next(iter(uniform))
    if not shared:
        if offsets:
            raise Unproven(f"index {offsets[0][0]} adds {_describe(offsets[0][1])}, the same in "
                           f"every thread of a block but not a multiple of block_index, so "
                           f"blocks may meet")
        _check_blocks(blocks, len(block))
    owner: dict = {}
    for (points, _), op in zip(forms, accesses):
        for thread, element in points:
            other = owner.setdefault(element, thread)
            if other != thread:
                line = f" (line {op.span.line})" if op.span else ""
                raise Unproven(f"threads {model.name(other)} and {model.name(thread)} of a "
                               f"block both reach element {list(element)}{line}")
    if not shared:
        spans = dict(blocks)
        for (points, _), op in zip(forms, accesses):
            for _, element in points:
                for axis, (_, scale) in spans.items():
                    if not 0 <= element[axis] < scale:
                        raise Unproven(f"index {axis} leaves its block's range [0, {scale}) "
                                       f"(it reaches {element[axis]} past block_index * "
                                       f"{scale}), so neighbouring blocks may meet")
    return None if shared else _coverage(forms, accesses, dict(blocks))


def _coverage(forms, accesses, blocks: dict):
    """The box one block's stores fill, per array axis, or None if they leave holes."""
    reached = {element for (points, _), op in zip(forms, accesses) if op.name == Op.MEM_STORE
               for _, element in points}
    if not reached:
        return None
    ndim = len(next(iter(reached)))
    extents = []
    for axis in range(ndim):
        values = {e[axis] for e in reached}
        if values != set(range(len(values))):
            return None
        grid_axis, scale = blocks.get(axis, (None, len(values)))
        if scale != len(values):
            return None
        extents.append((grid_axis, scale))
    return tuple(extents) if len(reached) == math.prod(e for _, e in extents) else None


def _check_blocks(uniform: tuple, dims: int) -> None:
    axes = [grid_axis for _, (grid_axis, _) in uniform]
    for grid_axis in range(dims):
        if axes.count(grid_axis) != 1:
            raise Unproven(f"block_index({grid_axis}) must scale exactly one index, so that "
                           f"each block owns its own range of elements")


class Model:
    """Thread coordinates of one block and the evaluation of index atoms over them."""

    def __init__(self, prover, block: tuple):
        if len(block) > 2 and block[2] > 1:
            raise Unproven(f"the threads of a 3-d block {tuple(block)} are not enumerated")
        self.prover = prover
        self.bx = block[0]
        self.by = block[1] if len(block) > 1 else 1
        self.threads = [(ty, tx) for ty in range(self.by) for tx in range(self.bx)]

    def name(self, thread) -> str:
        ty, tx = thread
        return f"(y={ty}, x={tx})" if self.by > 1 else f"{tx}"

    def access(self, op: Operation):
        """([(thread, element tuple)], block parts): block parts, per array axis with one,
        ``(axis, (grid axis, scale))``, sorted."""
        ndim = op.operands[0].type.ndim
        thread_forms, uniform, offsets = [], [], []
        for axis, value in enumerate(op.operands[1:1 + ndim]):
            const, terms = self.form(value)
            own, blocks = [], []
            for atom, coef in terms:
                atom = _strip(atom)
                grid, scaled = self.global_thread(atom), launch_product(atom)
                if grid is not None:  # block_dim * block_index + index_in_block
                    blocks.append((grid[0], coef * grid[1]))
                    own.append((grid[2], coef))
                elif scaled is not None and scaled[0] == ("block_dim", "block_index"):
                    blocks.append((scaled[1], coef * (self.bx, self.by)[scaled[1]]))
                elif _block_index(atom) is not None:
                    blocks.append((_block_index(atom), coef))
                elif self.varies(atom):
                    own.append((atom, coef))
                else:  # the same in every thread of a block: an offset
                    offsets.append((axis, atom, coef))
            if len(blocks) > 1 or (blocks and not 0 < blocks[0][1] <= MAX_SCALE):
                raise Unproven(f"index {axis} mixes block coordinates; each should appear once, "
                               f"times a positive block size up to 2^31")
            if blocks:
                uniform.append((axis, blocks[0]))
            thread_forms.append((const, own))
        loops = sorted({c for _, own in thread_forms for atom, _ in own
                        for c in self.counters(atom)}, key=repr)
        ranges = [self.loop_range(c) for c in loops]
        count = len(self.threads) * math.prod(len(r) for r in ranges)
        if count > MAX_POINTS:
            raise Unproven(f"{len(self.threads)} threads x {count // len(self.threads)} "
                           f"loop-counter values = {count} cases to enumerate, more than "
                           f"{MAX_POINTS}")
        guards = self.guards(op)
        points = []
        for thread in self.threads:
            for values in product(*ranges):
                env = dict(zip(loops, values))
                if not all(self._eval_form(form, thread, env) < bound
                           for form, bound in guards):
                    continue  # this thread never makes this access
                element = tuple(self._eval_form((const, own), thread, env)
                                for const, own in thread_forms)
                points.append((thread, element))
        return points, (tuple(sorted(uniform)), tuple(sorted(offsets, key=repr)))

    def guards(self, op) -> list:
        """The guard facts ``form < constant`` around ``op`` that name only the thread's
        coordinates and constants (``if t < 4:``, ``if t == 0:``): the threads failing one never
        reach ``op``. Other guards (``i < len(out)``) are left out: a superset of threads."""
        facts, _ = self.prover.at.get(id(op), (frozenset(), {}))
        out = []
        for (const, terms), bound in sorted(facts, key=repr):
            if bound[0] != "const" or not isinstance(bound[1], int):
                continue
            terms = [(_strip(a), k) for a, k in terms]
            if all(self.evaluable(a) for a, _ in terms):
                out.append(((const, terms), bound[1]))
        return out

    def evaluable(self, atom) -> bool:
        """Whether ``atom`` is a function of the thread's coordinates and constants only."""
        stored = self.stored(atom)
        if stored is not None:
            return all(self.evaluable(_strip(a)) for a, _ in self.form(stored)[1])
        kind = atom[0]
        if kind == "const":
            return True
        if kind == Op.SIMT_THREAD_INDEX:
            return bool(dict(atom[1]).get("block"))
        if kind == Op.SIMT_SPECIAL:
            return dict(atom[1])["reg"] in ("lane", "warp_index", "block_dim", "thread_in_block")
        if _index_op(atom):
            return all(self.evaluable(_strip(a)) for a in atom[1])
        return False

    def _eval_form(self, form, thread, env) -> int:
        const, terms = form
        return _i64(const + sum(k * self.eval(a, thread, env) for a, k in terms))

    def form(self, value, depth: int = 0):
        """``prover.linear(value)`` with locals replaced by the linear form of the value their
        one reaching store wrote (``for`` counters and ``j = ...`` in a loop body go through
        locals); (const, [(atom, coef)])."""
        const, terms = self.prover.linear(value)
        out: dict = {}
        for atom, coef in terms:
            stored = self.stored(atom)
            if stored is not None and depth < 16:
                c, sub = self.form(stored, depth + 1)
                const += coef * c
                for a, k in sub:
                    out[a] = out.get(a, 0) + coef * k
            else:
                out[atom] = out.get(atom, 0) + coef
        return const, [(a, k) for a, k in out.items() if k]

    def stored(self, atom):
        """The value a ``local`` atom's load read: the one store of that version, or None."""
        if atom[0] == "local" and atom[1] is not None:
            return self.prover.stored_at.get(atom[1])
        return None

    def global_thread(self, atom):
        """(grid axis, block size, in-block atom) for a global thread index atom, else None."""
        if atom[0] != Op.SIMT_THREAD_INDEX:
            return None
        attrs = dict(atom[1])
        if attrs.get("block"):
            return None
        if attrs["space"] == 3:
            raise Unproven("the 3-d thread index is not enumerated: index with it unchanged")
        x_axis = attrs["space"] == 1 or attrs["axis"] == 1
        inner = (Op.SIMT_THREAD_INDEX, tuple(sorted({**attrs, "block": True}.items())))
        return (0, self.bx, inner) if x_axis else (1, self.by, inner)

    def varies(self, atom) -> bool:
        """Whether ``atom`` may differ between the threads of a block."""
        kind = atom[0]
        stored = self.stored(atom)
        if stored is not None:
            return any(self.varies(a) for a, _ in self.form(stored)[1])
        if kind in (Op.SIMT_THREAD_INDEX, "value", "local"):
            return True  # non-counter values and merged locals: unknown, so treated as varying
        if kind == Op.SIMT_SPECIAL:
            return dict(atom[1])["reg"] not in ("block_index", "block_dim", "grid_dim")
        if kind == "index":
            return self.varies(atom[1])
        if kind in ARITH:
            return any(self.varies(part) for part in atom[1])
        return False

    def counters(self, atom):
        stored = self.stored(atom)
        if stored is not None:
            for a, _ in self.form(stored)[1]:
                yield from self.counters(a)
        elif atom[0] == "value" and atom[1] in self.prover.region_args:
            yield atom
        elif atom[0] == "index":
            yield from self.counters(atom[1])
        elif atom[0] in ARITH:
            for part in atom[1]:
                yield from self.counters(part)

    def loop_range(self, atom) -> range:
        loop = self.prover.region_args[atom[1]]
        bounds = [self.prover.linear(v) for v in loop.operands]
        if any(terms for _, terms in bounds):
            raise Unproven("a loop counter in the index has bounds that are not constants")
        lo, hi, step = (c for c, _ in bounds)
        if not step:
            raise Unproven("a loop counter in the index has step 0")
        return range(lo, hi, step)

    def eval(self, atom, thread, env) -> int:
        value = self._eval(_strip(atom), thread, env)
        if value is None:
            raise Unproven(f"the index depends on {_describe(atom)}, which differs between "
                           f"threads in a way the compiler cannot enumerate")
        return value

    def _eval(self, atom, thread, env):
        kind = atom[0]
        if kind == "const":
            return atom[1] if isinstance(atom[1], int) else None
        if kind == "index":
            return self._eval(atom[1], thread, env)
        if atom in env:
            return env[atom]
        stored = self.stored(atom)
        if stored is not None:
            const, terms = self.form(stored)
            parts = [self._eval(_strip(a), thread, env) for a, _ in terms]
            return None if None in parts else _i64(const + sum(
                k * p for (_, k), p in zip(terms, parts)))
        ty, tx = thread
        if kind == Op.SIMT_THREAD_INDEX and dict(atom[1]).get("block"):
            attrs = dict(atom[1])
            if attrs["space"] == 1:
                return ty * self.bx + tx
            return tx if attrs["axis"] == 1 else ty
        if kind == Op.SIMT_SPECIAL:
            reg = dict(atom[1])["reg"]
            slot = ty * self.bx + tx
            axis = dict(atom[1])["axis"]
            return {"lane": slot % 32, "warp_index": slot // 32,
                    "block_dim": (self.bx, self.by)[axis],
                    "thread_in_block": (tx, ty)[axis]}.get(reg)
        if not _index_op(atom):
            return None
        parts = [self._eval(part, thread, env) for part in atom[1]]
        if None in parts or (kind == Op.SHL and parts[1] >= 64):
            return None
        try:
            return _i64(REGISTRY[kind].eval(None, {}, *parts))
        except (ZeroDivisionError, ValueError):
            return None


def _i64(value):
    """``value`` (or None, unknown) when it is an i64, as the kernel computes the same number;
    raises Unproven when it is not: the kernel's arithmetic would wrap."""
    if value is not None and not -I64 <= value < I64:
        raise Unproven("an index or guard would overflow 64 bits (the kernel's i64 arithmetic "
                       "wraps), so the threads' elements cannot be enumerated")
    return value


def _strip(atom):
    """``index_value(t)`` names the same number as the ThreadIndex ``t``."""
    return _strip(atom[1]) if atom[0] == "index" else atom


def _block_index(atom):
    if atom[0] == Op.SIMT_SPECIAL and dict(atom[1]).get("reg") == "block_index":
        return dict(atom[1])["axis"]
    return None


def _describe(atom) -> str:
    kind = atom[0]
    if kind == Op.SIMT_SPECIAL:
        return f"fl.thread.{dict(atom[1])['reg']}()"
    if kind in ("local", "value"):
        return ("a value known only at run time (a load, a variable assigned more than once, "
                "a while loop's counter)")
    if kind == "dim":
        return "an array extent"
    if kind == "param":
        return "a scalar parameter"
    return "a value"
