"""Own tiles: a tile block reads and writes an Out partition only at its own tile.

Each tile block owns exactly one tile of every Out partition; any other tile belongs to another
tile block, which may be writing it meanwhile (a race that Tile IR's memory tokens cannot order:
they order one block's own operations). So every access of an Out must be at the block's own
tile, which makes tile kernels race-free:

* ``tile.store`` and ``tile.load_own`` have no position: their tile is the block's own by
  construction (``out.store(t)`` with a position is refused by the frontend, which has no IR for
  it);
* ``tile.load`` of an Out (``ft.load``, ``ft.load_like``) must have coordinates that are the
  block's own, ``tile.block_index`` along each axis in order (``out.tile_index`` itself: any
  arithmetic, a slot or a constant is another value, maybe another block's tile), and the Out's
  own tile shape (every Out gives the same grid, so only its own shape makes the tile its own).

* ``tile.scatter`` (``ft.scatter``) and ``tile.gather`` of an Out reach single elements at
  computed coordinates: each coordinate along axis k must be provably
  ``block_index(k) * tile_shape[k] + r`` with ``0 <= r < tile_shape[k]`` (the ranges of
  ``analysis/tile_ranges.py``). A coordinate past the tensor's edge is fine (it writes nothing,
  or reads the padding): it is still no other block's element.

A refused access is a SafetyError whose caret is under the argument at fault. The frontend
leaves their spans on the op (attrs ``load_spans``: the tensor, position and shape of
``ft.load``; ``load_like_spans``: the tensor, the partition and the call of ``ft.load_like``;
``access_spans``: the tensor and coordinates of ``ft.scatter``/``ft.gather``), source locations
that the IR printer leaves out.
"""
from __future__ import annotations

from fearless.analysis.common import params_by_value
from fearless.analysis.tile_ranges import Ranges
from fearless.errors import SafetyError
from fearless.frontend.spans import Span
from fearless.ir.core import Function
from fearless.ir.opdef import Op
from fearless.ir.types import Role, TensorView

_ELEMENTS = (Op.TILE_SCATTER, Op.TILE_GATHER)


def run(fn: Function, options) -> Function:
    producers = {id(r): op for op in fn.walk() for r in op.results}
    params = params_by_value(fn)
    ranges = None
    for op in fn.walk():
        if op.name in _ELEMENTS and op.operands[0].type.role is Role.OUT:
            ranges = ranges or Ranges(fn)
            _check_elements(fn, op, ranges, params[id(op.operands[0])].name)
        if op.name == Op.TILE_LOAD and op.operands[0].type.role is Role.OUT:
            name = params[id(op.operands[0])].name
            refused = _not_own(op, producers, name)
            if refused is not None:
                expr, why, at = refused
                raise SafetyError(f"an Out partition may be read only at this tile block's own "
                                  f"tile, and {why}", kernel=fn.name, param=name, span=at,
                                  help=f"use {expr}.load() to read this block's own tile; other "
                                       f"tiles of an output belong to other tile blocks")
    return fn


def _not_own(op, producers: dict, name: str) -> tuple[str, str, Span | None] | None:
    """For a ``tile.load`` of Out partition ``name`` that may reach another tile block's tile:
    the partition as written, why, and the span to put the caret under. None for its own tile."""
    t: TensorView = op.operands[0].type
    spans, like = op.attrs.get("load_spans"), op.attrs.get("load_like_spans")
    expr = _text((spans or like or (None,))[0], name)
    shape = tuple(op.attrs["shape"])
    if not all(_is_block_index(producers.get(id(c)), k) for k, c in enumerate(op.operands[1:])):
        return expr, f"this position is not provably {expr}.tile_index", \
            spans[1] if spans else op.span
    if shape == tuple(t.tile_shape):
        return None
    if like:
        return expr, (f"this read takes the tile shape {shape} of '{_text(like[1])}', not its "
                      f"own {t.tile_shape}"), like[2]
    return expr, f"this shape {shape} is not its tile shape {t.tile_shape}", \
        spans[2] if spans else op.span


def _is_block_index(op, axis: int) -> bool:
    return op is not None and op.name == Op.TILE_BLOCK_INDEX and op.attrs["axis"] == axis


def _text(span: Span | None, default: str = "") -> str:
    """The source text under ``span``: an argument as the user wrote it."""
    return (span.text[span.col:span.end_col] if span is not None else "") or default


def _check_elements(fn: Function, op, ranges: Ranges, name: str) -> None:
    """Refuse a scatter or gather of Out ``name`` whose coordinates may leave the own tile."""
    t: TensorView = op.operands[0].type
    coords = op.operands[2:]
    spans = op.attrs.get("access_spans") or (None, None)
    expr = _text(spans[0], name)
    for axis, (c, n) in enumerate(zip(coords, t.tile_shape)):
        form = ranges.form(c)
        if form.terms == ((axis, n),) and 0 <= form.lo and form.hi < n:
            continue
        verb = "scatter into" if op.name == Op.TILE_SCATTER else "gather from"
        base = f"{expr}.tile_index[{axis}] * {n}"
        names = {k: f"{expr}.tile_index[{k}]" for k in range(t.ndim)}
        along = f" along axis {axis}" if t.ndim > 1 else ""
        raise SafetyError(
            f"a {verb} an Out partition must stay inside this tile block's own tile, "
            f"{base} + [0, {n}){along}, and these coordinates are not provably inside it: "
            f"they are {form.describe(names)}", kernel=fn.name, param=name,
            span=spans[1] or op.span,
            help=f"build them as {base} + an offset from ft.arange, % {n}, & {n - 1} or a clamp "
                 f"(ft.minimum/ft.maximum)" + (
                     f"; to write anywhere, declare the parameter ft.Atomic[{t.dtype}] and use "
                     f"its exchange or add" if op.name == Op.TILE_SCATTER else
                     "; other tiles of an output belong to other tile blocks"))
