"""Tile ops that reach single elements of a tensor: gathers, scatters and atomics.

    tile.gather %x, %pad, %i0, ...        -> tile   the elements of %x at element coordinates
                                                    (%i0[k], %i1[k], ...); a coordinate outside
                                                    its axis gives %pad (a scalar of x's dtype)
    tile.scatter %out, %v, %i0, ...                 write %v[k] at (%i0[k], ...) of an Out
                                                    partition, inside the block's own tile
                                                    (passes/own_tile.py proves it); past the
                                                    tensor's edge nothing is written
    tile.atomic %a, %v, %i0, ...          -> tile   attr kind (add, max, min, exchange): one
                                                    atomic update per element of an Atomic
                                                    tensor; the result holds the old values
    tile.atomic_cas %a, %cmp, %new, %i0, ... -> tile  atomic compare-and-swap per element

Coordinates are i64 tiles of one shape (the frontend broadcasts and converts them), one per axis
of the tensor; values and results have that shape. An atomic whose coordinates lie outside the
tensor is skipped and gives 0. What each op means exactly (the order of repeated coordinates,
float max/min, rounding) is written in docs/semantics.md; the CPU backend
(``backends/cpu/tile_memory.py``) is its reference.
"""
from __future__ import annotations

from fearless.ir.opdef import Op, define, no_results
from fearless.ir.types import INDEX, Role, Scalar, TensorView, Tile

ATOMIC_KINDS = ("add", "max", "min", "exchange")


def _coords(view, indices) -> str | None:
    if not isinstance(view.type, TensorView):
        return f"operand of type {view.type} is not a tensor parameter"
    if len(indices) != view.type.ndim:
        return f"a {view.type.ndim}-d tensor needs {view.type.ndim} coordinate tiles"
    shapes = {getattr(i.type, "shape", None) for i in indices}
    if len(shapes) != 1 or any(not isinstance(i.type, Tile) or i.type.dtype is not INDEX.dtype
                               for i in indices):
        return "coordinates must be i64 tiles of one shape"
    return None


def _values(view, value, shape, what="values") -> str | None:
    if value.type != Tile(view.type.dtype, shape):
        return f"{what} must be {Tile(view.type.dtype, shape)}, got {value.type}"
    return None


def _gather(op):
    x, pad, *indices = op.operands
    msg = _coords(x, indices)
    if msg:
        return msg
    if x.type.role is Role.ATOMIC:
        return "cannot read an Atomic tensor"
    if pad.type != Scalar(x.type.dtype):
        return f"padding must be a {x.type.dtype} scalar, got {pad.type}"
    return None


def _scatter(op):
    out, value, *indices = op.operands
    msg = _coords(out, indices)
    if msg:
        return msg
    if out.type.role is not Role.OUT:
        return f"scatters into an Out partition, not {out.type}"
    return _values(out, value, indices[0].type.shape)


def _atomic_view(a, indices) -> str | None:
    msg = _coords(a, indices)
    if msg:
        return msg
    return None if a.type.role is Role.ATOMIC else f"atomics update an Atomic tensor, not {a.type}"


def _atomic(op):
    a, value, *indices = op.operands
    if op.attrs.get("kind") not in ATOMIC_KINDS:
        return f"unknown atomic {op.attrs.get('kind')!r}"
    return _atomic_view(a, indices) or _values(a, value, indices[0].type.shape)


def _atomic_cas(op):
    a, cmp, new, *indices = op.operands
    msg = _atomic_view(a, indices)
    if msg:
        return msg
    shape = indices[0].type.shape
    return _values(a, cmp, shape, "expected values") or _values(a, new, shape, "new values")


def _like_coords(types, attrs, first: int) -> list:
    """A tile of the tensor's dtype in the shape of the coordinates (operands from ``first``)."""
    return [Tile(types[0].dtype, types[first].shape)]


define(Op.TILE_GATHER, "elements at coordinate tiles; padding outside the tensor", _gather,
       track="tile", results=1, result=lambda ts, attrs: _like_coords(ts, attrs, 2))
define(Op.TILE_SCATTER, "write elements at coordinate tiles inside the block's own tile",
       _scatter, side_effects=True, track="tile", results=0, result=no_results)
define(Op.TILE_ATOMIC, "atomic add/max/min/exchange per element; the old values", _atomic,
       side_effects=True, track="tile", results=1,
       result=lambda ts, attrs: _like_coords(ts, attrs, 2))
define(Op.TILE_ATOMIC_CAS, "atomic compare-and-swap per element; the old values", _atomic_cas,
       side_effects=True, track="tile", results=1,
       result=lambda ts, attrs: _like_coords(ts, attrs, 3))
