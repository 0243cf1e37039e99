"""Tile IR lowering of memory order and of element accesses: gathers, scatters, atomics.

Memory order. Tile IR orders two memory operations only through tokens ("the ordering between
any pair of memory operations is undefined unless connected by tokens", the Tile IR spec's
memory operations section). Which accesses need ordering, and after what, is the memory_order
pass's result (passes/memory_order.py, attr ``order``); the rest take the entry token and stay
free to move. Per ordered tensor two token slots, as cuTile Python keeps per alias set (its
_passes/token_order.py):
  (LAST_STORE, t): the last write of t; a read (Order.AFTER_STORES) waits for it;
  (LAST_OP, t):    that write joined with every read of t since; a write (Order.AFTER_ALL)
                   waits for it, and becomes both.
``ordered`` issues one access in that order; ``lower.py``'s loads and stores use it too.

Element accesses reach the tensor through a tile of pointers: the base pointer broadcast to
the coordinates' shape, advanced by ``sum(coordinate[k] * stride[k])`` (i64). An element is
inside when every coordinate is below its extent as an unsigned number (a negative one is
huge): only those are read, written or updated (the op's mask), and their coordinates are
replaced by 0 elsewhere, so that no pointer is computed from a coordinate that may overflow.
A gather gives the padding, an atomic 0, outside (docs/semantics.md; the CPU backend's
``backends/cpu/tile_memory.py`` is the reference). Atomics are ``relaxed`` at ``device`` scope.
Float max and min are integer atomics on the bits, which order floats as IEEE 754 totalOrder
does: a value with the sign bit clear is a signed integer max (min), one with it set an unsigned
min (max), each masked to its own elements.
"""
from __future__ import annotations

from fearless.backends.tileir import tir
from fearless.errors import CompileError, InternalError
from fearless.ir.opdef import Op
from fearless.passes.memory_order import Order

LAST_OP, LAST_STORE = "last op", "last store"


def ordered(low, op, issue):
    """Issue ``op`` (an access of its first operand) through ``issue(token) -> (result,
    done token)``, in the order the memory_order pass gave it; returns the result."""
    tensor = id(op.operands[0])
    order = op.attrs.get("order")
    if order is None:
        return issue(low.token)[0]
    if order is Order.AFTER_STORES:
        last_store = low.slots[LAST_STORE, tensor]
        result, done = issue(last_store)
        last = low.slots[LAST_OP, tensor]
        # a read issued right after the last write already follows it: no join with it alone
        low.slots[LAST_OP, tensor] = done if last is last_store else \
            low.b.join_tokens([last, done])
        return result
    result, done = issue(low.slots[LAST_OP, tensor])
    low.slots[LAST_OP, tensor] = low.slots[LAST_STORE, tensor] = done
    return result


def _splat(low, value, shape):
    return low.b.broadcast(low.b.reshape(value, (1,) * len(shape)), shape)


def _pointers(low, op, first: int):
    """(pointer tile, inside mask) of the coordinates of ``op`` (its operands from ``first``)."""
    b, view = low.b, low.views[id(op.operands[0])]
    coords = [low.v(c) for c in op.operands[first:]]
    shape = op.operands[first].type.shape
    mask = None
    for c, extent in zip(coords, view.dims):
        wide = _splat(low, b.exti(extent, tir.I64, signedness="unsigned"), shape)
        inside = b.cmpi("lt", c, wide, signedness="unsigned")
        mask = inside if mask is None else b.andi(mask, inside)
    zero = low.const(0, tir.I64, shape)
    offset = None
    for c, stride in zip(coords, view.strides):
        term = b.select(mask, c, zero)
        if stride is not None:
            term = b.muli(term, _splat(low, b.exti(stride, tir.I64), shape))
        offset = term if offset is None else b.addi(offset, term)
    return b.offset(_splat(low, view.ptr, shape), offset), mask


def _zero_outside(low, mask, old):
    return low.b.select(mask, old, low.const(0, old.type.elem, old.shape))


def _gather(low, op):
    ptrs, mask = _pointers(low, op, 2)
    pad = _splat(low, low.v(op.operands[1]), mask.shape)
    low.set(op, ordered(low, op, lambda token: low.b.load_ptr_tko(ptrs, mask, pad, token=token)))


def _scatter(low, op):
    if op.attrs.get("order") is not Order.AFTER_ALL:
        raise InternalError("tile lowering: a scatter the memory_order pass did not order")
    ptrs, mask = _pointers(low, op, 2)
    value = low.v(op.operands[1])
    ordered(low, op, lambda token: (None, low.b.store_ptr_tko(value, ptrs, mask, token=token)))


_INT_MODES = {("add", True): "add", ("add", False): "add", ("max", True): "max",
              ("max", False): "umax", ("min", True): "min", ("min", False): "umin",
              ("exchange", True): "xchg", ("exchange", False): "xchg"}


def _atomic(low, op):
    kind, d = op.attrs["kind"], op.operands[0].type.dtype
    ptrs, mask = _pointers(low, op, 2)
    value = low.v(op.operands[1])
    if d.is_float and kind in ("max", "min"):
        issue = _float_extreme(low, ptrs, mask, value, kind == "max")
    else:
        if d.name == "bf16" and _before_sm90(low.arch):
            raise CompileError(f"Tile IR has no bf16 atomic add on {low.arch} (from sm_90 on)",
                               param=op.operands[0].hint, span=op.span,
                               help="keep the tensor in f32 (or f16) for atomic adds on this GPU")
        mode = "addf" if d.is_float and kind == "add" else _INT_MODES[kind, d.is_signed]

        def issue(token):
            return low.b.atomic_rmw_tko(ptrs, mode, value, mask, token=token)
    low.set(op, _zero_outside(low, mask, ordered(low, op, issue)))


def _before_sm90(arch: str | None) -> bool:
    return arch is not None and int(arch.split("_")[1].rstrip("af")) < 90


def _float_extreme(low, ptrs, mask, value, take_max: bool):
    """The issue function of a float max (``take_max``) or min by totalOrder (module
    docstring): two integer atomics on the bits, chained by their tokens."""
    b = low.b
    bits = tir.I32 if value.type.elem.bits == 32 else tir.I64
    ints, iv = b.ptr_to_ptr(ptrs, bits), b.bitcast(value, bits)
    negative = b.cmpi("lt", iv, low.const(0, bits, mask.shape))
    positive = b.xori(negative, low.const(1, tir.I1, mask.shape))
    modes = ("max", "umin") if take_max else ("min", "umax")

    def issue(token):
        old_pos, done = b.atomic_rmw_tko(ints, modes[0], iv, b.andi(mask, positive), token=token)
        old_neg, done = b.atomic_rmw_tko(ints, modes[1], iv, b.andi(mask, negative), token=done)
        return b.bitcast(b.select(negative, old_neg, old_pos), value.type.elem), done
    return issue


def _atomic_cas(low, op):
    ptrs, mask = _pointers(low, op, 3)
    cmp, new = low.v(op.operands[1]), low.v(op.operands[2])
    old = ordered(low, op, lambda token: low.b.atomic_cas_tko(ptrs, cmp, new, mask, token=token))
    low.set(op, _zero_outside(low, mask, old))


RULES = {Op.TILE_GATHER: _gather, Op.TILE_SCATTER: _scatter, Op.TILE_ATOMIC: _atomic,
         Op.TILE_ATOMIC_CAS: _atomic_cas}
