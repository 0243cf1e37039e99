"""Element access of tile kernels: ``ft.gather``, ``ft.scatter``, the methods of an
``ft.Atomic`` tensor and the ``padding=`` of loads, lowered to the ops of
``ir/ops/tile_memory.py`` (handlers called by ``tile_intrinsics.call``).

Coordinates: one integer per axis of the tensor, as a tile (or a scalar), given alone for a 1-d
tensor or as a tuple (``(rows, cols)``); they broadcast together like NumPy and become i64
tiles of their common shape, which is the shape of the values and of the result. Coordinates
given only as scalars make a one-element access whose result is a scalar.

The refusals here are the ones that need no proof: an In is never written, an Atomic is never
read or written except atomically, atomics exist only on an Atomic and only for the dtypes
Tile IR has (``ATOMIC_DTYPES``). Whether a scatter (or a gather of an Out) stays inside the
block's own tile is the own-tile pass's proof (``passes/own_tile.py``); the spans of the
tensor and coordinate arguments travel on the op (attr ``access_spans``) for its carets.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fearless import dtypes
from fearless.errors import CompileError, SafetyError
from fearless.frontend.infer import Const, Static, TupleValue, TypingError
from fearless.frontend.tile_emit import broadcast_shapes, is_tile
from fearless.ir import types as T
from fearless.ir.opdef import Op

if TYPE_CHECKING:
    from fearless.frontend.tile_intrinsics import _Call

# The dtypes each atomic takes: Tile IR's atomic_rmw_tko/atomic_cas_tko (its Ops.td) update
# 32- and 64-bit integers, add f16/bf16/f32/f64 and exchange f32/f64; float max and min are
# made of integer max/min (backends/tileir/memory.py).
_WIDE = ("i32", "i64", "u32", "u64")
ATOMIC_DTYPES = {
    "add": _WIDE + ("f16", "bf16", "f32", "f64"),
    "max": _WIDE + ("f32", "f64"),
    "min": _WIDE + ("f32", "f64"),
    "exchange": _WIDE + ("f32", "f64"),
    "compare_exchange": _WIDE + ("f32", "f64"),
}
ATOMIC_METHODS = tuple(ATOMIC_DTYPES)

# Tile IR pads a partition view with one of these (its padding_value: zero, neg_zero, nan,
# pos_inf, neg_inf); ft.load takes exactly these
LOAD_PADDINGS = "0, -0.0, math.nan, math.inf or -math.inf"


def _error(c, node, message, help=None, cls=CompileError, param=None):
    """An error at ``node`` of the call ``c`` (a ``_Call``, or the FunctionGen itself)."""
    gen = getattr(c, "gen", c)
    return cls(message, kernel=gen.ctx.kernel, param=param, span=gen.span(node), help=help)


def _role(view) -> T.Role:
    return view.type.role


def refuse_atomic_read(c: _Call, x, names: tuple, what: str) -> None:
    """An Atomic tensor is updated by every tile block while the kernel runs: no plain read."""
    if _role(x) is T.Role.ATOMIC:
        raise _error(c, c.arg_node(names, names[0]),
                     f"'{x.hint}' is an Atomic tensor: other tile blocks update it while this "
                     f"one runs, so it cannot be read by {what}", cls=SafetyError, param=x.hint,
                     help=f"its atomic methods return the values they replace, for example "
                          f"old = {x.hint}.add(i, 0)")


# coordinates and values ---------------------------------------------------------------------

def coordinates(c: _Call, x, indices, names: tuple, arg: str = "indices"):
    """``(i64 coordinate tiles, shape, scalar)`` of ``indices`` for tensor ``x``."""
    node = c.arg_node(names, arg)
    items = indices.items if isinstance(indices, TupleValue) else (indices,)
    ndim = x.type.ndim
    if len(items) != ndim:
        raise _error(c, node, f"'{x.hint}' is {ndim}-d: it takes {ndim} coordinate"
                              f"{'s' if ndim > 1 else ''}, got {len(items)}", param=x.hint,
                     help="give one integer tile per axis, as a tuple: (rows, cols)")
    for item in items:
        d = item.type.dtype if is_tile(item) else _scalar_dtype(c, item)
        if d is None or not d.is_int:
            what = item.type if is_tile(item) else _describe(item)
            raise _error(c, node, f"coordinates must be integers, got {what}", param=x.hint,
                         help="convert them with .astype(fl.i32)")
    shapes = [item.type.shape for item in items if is_tile(item)]
    try:
        shape = broadcast_shapes(*shapes) if shapes else (1,)
    except TypingError as exc:
        raise _error(c, node, str(exc), exc.help) from None
    coords = [c.emit.to_tile(item, dtypes.i64, shape) for item in items]
    return coords, shape, not shapes


def _scalar_dtype(c: _Call, fv):
    try:
        d = c.emit.dtype_of(fv)
    except TypingError:
        return None
    if isinstance(d, str):  # a weak literal: an int literal is an integer
        return dtypes.i64 if isinstance(fv.value, int) and not isinstance(fv.value, bool) \
            else None
    return d


def _describe(fv) -> str:
    from fearless.frontend.emit import describe
    return describe(fv)


def values(c: _Call, fv, dtype: dtypes.DType, shape: tuple, node, what: str):
    """``fv`` (a tile broadcasting to ``shape``, a scalar or a number) as a tile of ``dtype``
    and ``shape``, by the implicit conversions of an assignment."""
    try:
        if is_tile(fv):
            if broadcast_shapes(fv.type.shape, shape) != shape:
                raise TypingError(f"{what} of shape {fv.type.shape} do not broadcast to the "
                                  f"coordinates' shape {shape}")
            same = c.emit.to_tile(fv, fv.type.dtype, shape)
            return c.emit.implicit(same, T.Tile(dtype, shape), what)
        scalar = c.emit.implicit(fv, T.Scalar(dtype), what)
        return c.emit.to_tile(scalar, dtype, shape)
    except TypingError as exc:
        raise _error(c, node, str(exc), exc.help) from None


def _result(c: _Call, value, scalar: bool):
    """A one-element access made of scalar coordinates gives a scalar: its one element, taken
    by a reduction (the op that turns a tile into a scalar)."""
    if not scalar:
        return value
    return c.b.create(Op.TILE_REDUCE, [value], attrs={"kind": "max", "axis": 0}).result


def _spans(c: _Call, names: tuple, *args: str) -> tuple:
    return tuple(c.gen.cap.span(c.arg_node(names, a)) for a in args)


# gather and scatter -------------------------------------------------------------------------

_GATHER = ("x", "indices", "padding")
_SCATTER = ("out", "indices", "values")


def gather(c: _Call):
    x, indices, padding = c.take(*_GATHER, required=2)
    x = c.view(x, "x")
    refuse_atomic_read(c, x, _GATHER, "ft.gather")
    coords, shape, scalar = coordinates(c, x, indices, _GATHER)
    if padding is None:
        padding = Const(0)
    node = c.arg_node(_GATHER, "padding")
    if is_tile(padding):
        raise _error(c, node, "the padding must be a number or a scalar, not a tile")
    try:
        pad = c.emit.implicit(padding, T.Scalar(x.type.dtype), "the padding")
    except TypingError as exc:
        raise _error(c, node, str(exc), exc.help) from None
    attrs = {"access_spans": _spans(c, _GATHER, "x", "indices")} \
        if _role(x) is T.Role.OUT else {}
    out = c.b.create(Op.TILE_GATHER, [x, pad, *coords], attrs=attrs).result
    return _result(c, out, scalar)


def scatter(c: _Call):
    out, indices, vals = c.take(*_SCATTER)
    out = c.view(out, "out")
    node = c.arg_node(_SCATTER, "out")
    if _role(out) is T.Role.IN:
        raise _error(c, node, f"'{out.hint}' is an In tensor, shared and read-only: a kernel "
                              f"does not write it", cls=SafetyError, param=out.hint,
                     help="declare the parameter ft.Out[T] to write its own tile, or "
                          "ft.Atomic[T] to update any element atomically")
    if _role(out) is T.Role.ATOMIC:
        raise _error(c, node, f"'{out.hint}' is an Atomic tensor: it is written only through "
                              f"its atomic methods", cls=SafetyError, param=out.hint,
                     help=f"{out.hint}.exchange(indices, values) writes any element atomically")
    coords, shape, _ = coordinates(c, out, indices, _SCATTER)
    v = values(c, vals, out.type.dtype, shape, c.arg_node(_SCATTER, "values"),
               "the scattered values")
    c.b.create(Op.TILE_SCATTER, [out, v, *coords],
               attrs={"access_spans": _spans(c, _SCATTER, "out", "indices")})
    return Static(None)


# atomics ------------------------------------------------------------------------------------

def refuse_atomic_on(gen, view, method: str, node) -> None:
    """``x.add`` on an In or an Out: atomics need an ft.Atomic parameter."""
    kind = "an In tensor, shared and read-only" if _role(view) is T.Role.IN else \
        "an Out partition, written only at this tile block's own tile"
    raise _error(gen, node, f"'{view.hint}' is {kind}: it has no atomic '{method}'",
                 cls=SafetyError, param=view.hint,
                 help=f"declare the parameter ft.Atomic[{view.type.dtype}] and pass a tensor: "
                      f"every tile block may then update any element atomically")


def _atomic_dtype(c: _Call, a, method: str) -> None:
    d = a.type.dtype
    if d.name not in ATOMIC_DTYPES[method]:
        raise _error(c, c.node, f"Tile IR has no atomic {method} of {d} elements",
                     param=a.hint, help="atomics take " + ", ".join(ATOMIC_DTYPES[method]))


def atomic(method: str):
    names = ("a", "indices", "values")

    def handler(c: _Call):
        a, indices, vals = c.take(*names)
        _atomic_dtype(c, a, method)
        coords, shape, scalar = coordinates(c, a, indices, names)
        v = values(c, vals, a.type.dtype, shape, c.arg_node(names, "values"), "the values")
        old = c.b.create(Op.TILE_ATOMIC, [a, v, *coords], attrs={"kind": method}).result
        return _result(c, old, scalar)
    return handler


_CAS = ("a", "indices", "expected", "desired")


def compare_exchange(c: _Call):
    a, indices, expected, desired = c.take(*_CAS)
    _atomic_dtype(c, a, "compare_exchange")
    coords, shape, scalar = coordinates(c, a, indices, _CAS)
    cmp = values(c, expected, a.type.dtype, shape, c.arg_node(_CAS, "expected"),
                 "the expected values")
    new = values(c, desired, a.type.dtype, shape, c.arg_node(_CAS, "desired"),
                 "the desired values")
    old = c.b.create(Op.TILE_ATOMIC_CAS, [a, cmp, new, *coords]).result
    return _result(c, old, scalar)


# load padding -------------------------------------------------------------------------------

def load_padding(c: _Call, x, padding, node) -> float | None:
    """The ``padding=`` of ``ft.load``/``ft.load_like`` as the op's attr (None: zero)."""
    if padding is None:
        return None
    value = padding.value if isinstance(padding, Const) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _error(c, node, f"padding must be a constant: {LOAD_PADDINGS}", param=x.hint,
                     help="Tile IR pads a tile with one of these values")
    value = float(value)
    special = math.isnan(value) or math.isinf(value) or \
        (value == 0 and math.copysign(1, value) < 0)
    if value != 0 and not special:
        raise _error(c, node, f"a load pads with {LOAD_PADDINGS}, not {padding.value!r}",
                     param=x.hint,
                     help="Tile IR pads a tile with one of these values; for another, gather "
                          "with ft.gather(x, indices, padding=...) or choose with ft.where")
    if special and not x.type.dtype.is_float:
        raise _error(c, node, f"{x.type.dtype} tensors pad only with 0, not {padding.value!r}",
                     param=x.hint, help="infinities, NaN and -0.0 are float values")
    return None if value == 0 and not special else value
