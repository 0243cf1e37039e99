"""Tile-kernel control flow -> Tile IR: the rules for ``scf.*`` and ``cf.*`` (part of ``lower``).

Our IR keeps Python variables in slots (``local.*``); Tile IR is pure SSA. ``Lowering.slots``
holds each slot's current value (the memory tokens of ordered tensors are slots too), and these
rules turn the slots a region may change into the carried values of a loop or the results of an
``if``. The forms (Tile IR spec, control-flow operations; NVIDIA/cuda-tile ``Ops.td``):

* ``for`` over ``range`` (a positive constant step: ``passes/tile_subset.py`` refuses others)
  is Tile IR's ``for``; a ``continue`` in it, at any depth of ``if``, is Tile IR's ``continue``
  with the carried values.
* ``while``, and a ``for`` whose body may ``break`` or ``return``, is Tile IR's ``loop``: the
  carried values (and the counter of a ``for``) are its iteration values; the body opens with
  ``if cond {} else { break }``; ``break`` and ``continue`` yield the current values.
* ``return`` where nothing follows it up to the end of the kernel or inlined function (the last
  statement, or the last of an ``if``'s branch there: "tail position") falls through. Elsewhere:
  the kernel's Tile IR ``return``, which may sit inside ``if`` but not inside a loop; in an
  inlined function a ``break`` of a ``loop`` that runs its body once. A ``return`` inside a loop
  sets a flag (an i1 slot the loops carry) and breaks; after each loop it leaves, ``if flag``
  leaves the next construct out, up to the kernel's ``return`` or the function's ``break``.
* Every loop result is copied before use (``_copy``: a tileiras bug).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fearless.backends.tileir import tir
from fearless.backends.tileir.builder import Builder
from fearless.backends.tileir.ops import TERMINATORS
from fearless.errors import InternalError
from fearless.ir.core import Region
from fearless.ir.opdef import Op

_LOOPS = (Op.SCF_FOR, Op.SCF_WHILE)


@dataclass
class _Loop:
    """A user loop being lowered: its carried slots, and the values its ``continue`` and
    ``break`` yield before them (a counted ``loop``'s next and current counter)."""

    keys: list
    next: Callable[[], list] = list
    stop: Callable[[], list] = list


@dataclass
class _Target:
    """What a ``return`` leaves: the kernel (``op`` None) or an inlined function's once-loop."""

    op: object = None
    keys: list = field(default_factory=list)
    flag: object = None  # the slot key of the flag a return inside a loop sets


# what a region holds ----------------------------------------------------------------------------

def _walk(region: Region, stop=(Op.SCF_INLINE,)):
    """The ops of ``region`` and, but for those named in ``stop``, of their regions."""
    for op in region.ops:
        yield op
        if op.name not in stop:
            for inner in op.regions:
                yield from _walk(inner, stop)


def _returns(region: Region) -> bool:
    """Whether ``region`` may return from the kernel or function being lowered."""
    return any(op.name == Op.CF_RETURN for op in _walk(region))


def _breaks(region: Region) -> bool:
    """Whether ``region`` (a loop body) may break out of its own loop."""
    return any(op.name == Op.CF_BREAK for op in _walk(region, (Op.SCF_INLINE, *_LOOPS)))


def _returns_in_loop(region: Region) -> bool:
    return any(op.name in _LOOPS and any(_returns(r) for r in op.regions)
               for op in _walk(region))


def _early_return(region: Region, tail: bool = True) -> bool:
    """Whether ``region`` holds a return that is not in tail position (see the docstring)."""
    for k, op in enumerate(region.ops):
        last = tail and k == len(region.ops) - 1
        if op.name == Op.CF_RETURN and not last:
            return True
        if op.name == Op.SCF_IF and any(_early_return(r, last) for r in op.regions):
            return True
        if op.name in _LOOPS and any(_returns(r) for r in op.regions):
            return True
    return False


def _exits(region: Region, tail: bool) -> bool:
    """Whether control never reaches the end of ``region`` (lowered with ``tail``)."""
    if not region.ops:
        return False
    last = region.ops[-1]
    if last.name == Op.SCF_IF:
        return all(_exits(r, tail) for r in last.regions)
    return last.name in (Op.CF_BREAK, Op.CF_CONTINUE) or (last.name == Op.CF_RETURN and not tail)


# slots ------------------------------------------------------------------------------------------

def carried(low, *regions: Region) -> list:
    """The keys of the slots that ``regions`` may change and that live outside them: the local
    slots they store to, the memory tokens of the Out tensors they load or store and, where they
    may return, the return flag of the kernel or function."""
    out: dict = {}
    for region in regions:
        for op in region.ops:
            for inner in op.walk():
                out.update(dict.fromkeys(low.writes(inner)))
    flag = _target(low).flag
    if flag is not None and any(_returns(r) for r in regions):
        out[flag] = None
    return [key for key in out if key in low.slots]


def _values(low, keys) -> list:
    return [low.slots[key] for key in keys]


def _enter(low, keys, values) -> None:
    low.slots.update(zip(keys, values))


def _leave(low, keys, results) -> None:
    for key, result in zip(keys, results):
        low.slots[key] = _copy(low.b, result)


def _copy(b: Builder, value: tir.Value) -> tir.Value:
    """An exact copy of the loop result `value` (a numeric tile), for the code after the loop.

    tileiras 13.4 crashes (SIGSEGV) or computes wrong values when an ``if`` branch yields, as it
    is, the result of a ``for`` loop whose carried tile started as a constant (fuzz seeds 2968,
    11181; tests/tile/test_loop_results.py). Yielding a copy avoids it, but tileiras folds
    ``x | 0`` and ``x + 0`` back into the loop result, in a branch too, so the copy is made once,
    right after the loop, as an op tileiras keeps: ``x + (-0.0)`` (exact for every float, +0.0
    included) or ``assume bounded<?, ?>`` (a fact that always holds) for an integer tile.
    The results of ``loop`` get the same copy: tileiras 13.4 compiled such kernels with a
    ``loop`` and no copy (tests/tile/test_control_flow.py), but the wrong values that the bug
    also gave show only on a GPU."""
    t = value.type
    if not isinstance(t, tir.TileType) or isinstance(t.elem, tir.PtrType):
        return value
    if t.elem.kind == "float":
        return b.addf(value, b.constant(-0.0, t))
    return b.assume_bounded(value)


def terminated(low) -> bool:
    """Whether the Tile IR block being built already ends with a terminator."""
    ops = low.b.block.ops
    return bool(ops) and ops[-1].name in TERMINATORS


# exits ------------------------------------------------------------------------------------------

def _target(low) -> _Target:
    return next(e for e in reversed(low.exits) if isinstance(e, _Target))


def _loop(low) -> _Loop:
    return next(e for e in reversed(low.exits) if isinstance(e, _Loop))


def _leave_target(low, set_flag: bool = True) -> None:
    """Leave the innermost kernel or function from here: see the module docstring."""
    target = _target(low)
    if isinstance(low.exits[-1], _Loop):  # a return inside a loop: flag it, break the loop
        if set_flag:
            low.slots[target.flag] = low.const(1, tir.I1)
        loop = low.exits[-1]
        low.b.break_(loop.stop() + _values(low, loop.keys))
    elif target.op is None:
        low.b.return_()
    else:
        low.b.break_(_values(low, target.keys))


def _after_loop(low, body: Region) -> None:
    """After a loop whose body may return: leave further when it did."""
    flag = _target(low).flag
    if flag is None or not _returns(body):
        return
    branch = low.b.if_(low.slots[flag])
    with branch.then_():
        _leave_target(low, set_flag=False)


def enter_kernel(low, body: Region) -> None:
    """Start the kernel's body: the return target, with its flag if a loop may return."""
    target = _Target()
    if _returns_in_loop(body):
        target.flag = ("returned", None)
        low.slots[target.flag] = low.const(0, tir.I1)
    low.exits = [target]


# rules ------------------------------------------------------------------------------------------

def _for(low, op):
    if op.attrs.get("step_sign") != 1:  # passes/tile_subset.py refuses these loops
        raise InternalError("tile lowering: a for loop without a positive constant step")
    (body,) = op.regions
    lo, hi, step = (low.v(x) for x in op.operands)
    if _breaks(body) or _returns(body):
        def test(iv):
            return low.b.cmpi("lt", iv, hi, signedness="signed")
        _as_loop(low, body, carried(low, body), test, counter=(lo, step))
        return
    keys = carried(low, body)
    token = low.token  # tile.select in the body may replace it with a value of the body
    with low.b.for_(lo, hi, step, _values(low, keys)) as loop:
        low.env[id(body.args[0])] = loop.iv
        _enter(low, keys, loop.args)
        low.exits.append(_Loop(keys))
        low.region(body)
        low.exits.pop()
        if not terminated(low):
            low.b.continue_(_values(low, keys))
    low.token = token
    _leave(low, keys, loop.results)


def _while(low, op):
    cond, body = op.regions

    def test(_):
        low.region(cond)
        return low.condition
    _as_loop(low, body, carried(low, cond, body), test)


def _condition(low, op):
    low.condition = low.v(op.operands[0])


def _as_loop(low, body: Region, keys: list, test, counter=None) -> None:
    """A Tile IR ``loop`` that runs ``body`` while ``test(counter value)`` holds; ``counter``:
    (start, step) of a counted loop, whose body's argument is the counter."""
    first = [counter[0]] if counter else []
    inits = first + _values(low, keys)
    token = low.token  # as in _for
    handle = low.b.loop(inits, [v.type for v in inits])
    with handle:
        args = list(handle.args)
        iv = args.pop(0) if counter else None
        _enter(low, keys, args)
        if counter:
            low.env[id(body.args[0])] = iv
            ctx = _Loop(keys, lambda: [low.b.addi(iv, counter[1])], lambda: [iv])
        else:
            ctx = _Loop(keys)
        low.exits.append(ctx)
        branch = low.b.if_(test(iv))
        with branch.then_():
            low.b.yield_()
        with branch.else_():
            low.b.break_(ctx.stop() + _values(low, keys))
        low.region(body)
        low.exits.pop()
        if not terminated(low):
            low.b.continue_(ctx.next() + _values(low, keys))
    low.token = token
    _leave(low, keys, handle.results[len(first):])
    _after_loop(low, body)


def _if(low, op):
    tail = low.tail
    then, other = op.regions
    keys = carried(low, then, other)
    before = {key: low.slots[key] for key in keys}
    results = [] if _exits(then, tail) and _exits(other, tail) else keys
    branch = low.b.if_(low.v(op.operands[0]), [before[key].type for key in results])
    for region, enter in ((then, branch.then_), (other, branch.else_)):
        if region is other and not region.ops and not results:
            continue  # the builder gave the result-less if an else holding only `yield`
        with enter():
            low.region(region, tail)
            if not terminated(low):
                low.b.yield_(_values(low, results))
        low.slots.update(before)
    _enter(low, results, branch.results)


def _inline(low, op):
    """An inlined device function: its body in place; with an early return, in a ``loop``
    that runs it once, so that the return can ``break`` out of it."""
    (body,) = op.regions
    if not _early_return(body):
        low.exits.append(_Target(op))
        low.region(body, tail=True)
        low.exits.pop()
        return
    outer = _target(low).flag  # the returns in the body leave this function, not the caller
    keys = [key for key in carried(low, body) if key != outer]
    target = _Target(op, keys, ("returned", id(op)) if _returns_in_loop(body) else None)
    handle = low.b.loop(_values(low, keys), [low.slots[key].type for key in keys])
    with handle:
        _enter(low, keys, handle.args)
        if target.flag is not None:
            low.slots[target.flag] = low.const(0, tir.I1)
        low.exits.append(target)
        low.region(body, tail=True)
        low.exits.pop()
        if not terminated(low):
            low.b.break_(_values(low, keys))
    low.slots.pop(target.flag, None)
    _leave(low, keys, handle.results)


def _break(low, op):
    loop = _loop(low)
    low.b.break_(loop.stop() + _values(low, loop.keys))


def _continue(low, op):
    loop = _loop(low)
    low.b.continue_(loop.next() + _values(low, loop.keys))


RULES = {
    Op.SCF_FOR: _for,
    Op.SCF_WHILE: _while,
    Op.SCF_CONDITION: _condition,
    Op.SCF_IF: _if,
    Op.SCF_INLINE: _inline,
    Op.CF_BREAK: _break,
    Op.CF_CONTINUE: _continue,
    Op.CF_RETURN: lambda low, op: _leave_target(low),
}
