"""The CPU rules of the element-access tile ops (``ir/ops/tile_memory.py``): the reference
semantics of gathers, scatters and atomics (docs/semantics.md).

* A coordinate tile reaches element ``(i0[k], i1[k], ...)`` for each element k, in row-major
  order of the tile. An element is inside when every coordinate is in ``[0, extent)``.
* ``tile.gather``: the inside elements read the tensor; the others give the padding.
* ``tile.scatter``: the inside elements are written (the own-tile pass proved they are the
  block's own, and this rule checks it: an element of another tile is an InternalError). Two
  elements with one coordinate are a data race: with the race detector on, the launch raises
  RaceError when it ends; the last of them in row-major order is written.
* ``tile.atomic`` / ``tile.atomic_cas``: the inside elements update the tensor one at a time,
  in row-major order (the GPU's order is not defined), each result being the value just before
  its own update; the others update nothing and give 0. Integer adds wrap; float adds round
  each sum to the dtype; float max/min order values by IEEE 754 totalOrder (``total_key``); a
  compare-and-swap compares bit patterns. Repeated coordinates are done in rounds: round r
  updates the r-th occurrence of every coordinate at once (no coordinate twice in a round).
"""
from __future__ import annotations

import numpy as np

from fearless.errors import InternalError, RaceError
from fearless.ir.opdef import Op
from fearless.ir.types import Role


def _coordinates(block, op, first: int):
    """``(view, the operands before the coordinates, coordinate arrays, inside mask)``."""
    vals = [block.value(v) for v in op.operands]
    view, coords = vals[0], [np.asarray(c) for c in vals[first:]]
    inside = np.ones(coords[0].shape, bool)
    for c, n in zip(coords, view.shape):
        inside &= (c >= 0) & (c < n)
    return view, vals[1:first], coords, inside


def _own_tile_only(block, op, coords, inside) -> None:
    """The own-tile pass's claim, checked where it matters: an Out is reached only inside the
    block's own tile."""
    t = op.operands[0].type
    if t.role is not Role.OUT:
        return
    for axis, (c, n) in enumerate(zip(coords, t.tile_shape)):
        lo = block.coords[axis] * n
        if ((c[inside] < lo) | (c[inside] >= lo + n)).any():
            raise InternalError(f"{op.name} of '{op.operands[0].hint}' left the own tile of "
                                f"tile block {block.coords} along axis {axis}, but the own-tile "
                                f"pass let it through")


def gather(block, op):
    view, (pad,), coords, inside = _coordinates(block, op, 2)
    _own_tile_only(block, op, coords, inside)
    t = op.results[0].type
    out = np.full(t.shape, pad, t.dtype.numpy)
    out[inside] = view[tuple(c[inside] for c in coords)]
    block.set(op, out)


def scatter(block, op):
    view, (value,), coords, inside = _coordinates(block, op, 2)
    _own_tile_only(block, op, coords, inside)
    at = tuple(c[inside] for c in coords)
    flat = np.ravel_multi_index(at, view.shape) if at[0].size else at[0]
    unique, first_from_end = np.unique(flat[::-1], return_index=True)
    if unique.size != flat.size and block.races is not None and not block.races:
        block.races.append(_race(block, op, inside, flat))
    keep = flat.size - 1 - first_from_end  # the last occurrence of each element
    view[tuple(a[keep] for a in at)] = np.asarray(value)[inside][keep]


def _race(block, op, inside, flat) -> RaceError:
    order = np.argsort(flat, kind="stable")
    dup = np.flatnonzero(flat[order][1:] == flat[order][:-1])[0]
    where = np.flatnonzero(inside.ravel())[order[[dup, dup + 1]]]
    tile_shape = inside.shape
    first, second = (tuple(int(x) for x in np.unravel_index(k, tile_shape)) for k in where)
    view = block.value(op.operands[0])
    element = ", ".join(str(int(x)) for x in np.unravel_index(int(flat[order][dup]),
                                                              view.shape))
    name = op.operands[0].hint
    return RaceError(f"data race on '{name}' element [{element}]: tile block {block.coords} "
                     f"scatters to it from the elements {list(first)} and {list(second)} of "
                     f"one ft.scatter, and which of them lands is not defined",
                     param=name, span=op.span,
                     help="give each element its own coordinate, or combine them with an "
                          "ft.Atomic tensor's add, max, min or exchange")


def total_key(x: np.ndarray) -> np.ndarray:
    """Signed integers that order f32/f64 values ``x`` as IEEE 754 totalOrder does (-NaN, -inf,
    ..., -0.0, +0.0, ..., inf, +NaN): the bits, with the magnitude bits flipped where the sign
    is set."""
    bits = x.view(np.int32 if x.dtype.itemsize == 4 else np.int64)
    flip = np.iinfo(bits.dtype).max
    return np.where(bits < 0, bits ^ flip, bits)


def _combine(kind: str, dtype, cur, val):
    if kind == "add":
        return (cur + val).astype(dtype)
    if kind == "exchange":
        return val
    take_max = kind == "max"
    if np.issubdtype(dtype, np.floating):
        a, b = total_key(cur), total_key(val)
        return np.where((b > a) if take_max else (b < a), val, cur)
    return np.maximum(cur, val) if take_max else np.minimum(cur, val)


def _swap(dtype, cur, cmp, new):
    """Compare-and-swap of ``cur`` against ``cmp`` bit for bit (floats included)."""
    if np.issubdtype(dtype, np.floating):
        as_int = np.int32 if np.dtype(dtype).itemsize == 4 else np.int64
        equal = cur.view(as_int) == cmp.view(as_int)
    else:
        equal = cur == cmp
    return np.where(equal, new, cur)


def _update(block, op, first: int, step):
    """Apply ``step(current, *operands at the elements)`` to the inside elements one at a time
    (see the module docstring); set the op's result to the old values."""
    view, operands, coords, inside = _coordinates(block, op, first)
    t = op.results[0].type
    old = np.zeros(t.shape, t.dtype.numpy)
    at = tuple(c[inside] for c in coords)
    if at[0].size:
        flat = np.ravel_multi_index(at, view.shape)
        order = np.argsort(flat, kind="stable")
        sorted_flat = flat[order]
        starts = np.flatnonzero(np.r_[True, sorted_flat[1:] != sorted_flat[:-1]])
        rank = np.empty_like(order)
        rank[order] = np.arange(flat.size) - np.repeat(starts, np.diff(np.r_[starts, flat.size]))
        args = [np.asarray(o)[inside] for o in operands]
        got = np.empty(flat.size, t.dtype.numpy)
        for r in range(int(rank.max()) + 1):
            sel = rank == r
            where = tuple(a[sel] for a in at)
            cur = np.asarray(view[where])
            got[sel] = cur
            view[where] = step(cur, *(a[sel] for a in args))
        old[inside] = got
    block.set(op, old)


def atomic(block, op):
    kind, dtype = op.attrs["kind"], op.results[0].type.dtype.numpy
    _update(block, op, 2, lambda cur, val: _combine(kind, dtype, cur, val))


def atomic_cas(block, op):
    dtype = op.results[0].type.dtype.numpy
    _update(block, op, 3, lambda cur, cmp, new: _swap(dtype, cur, cmp, new))


RULES = {Op.TILE_GATHER: gather, Op.TILE_SCATTER: scatter, Op.TILE_ATOMIC: atomic,
         Op.TILE_ATOMIC_CAS: atomic_cas}
