"""Calls and attributes of the tile-kernel language (``fearless.tile``), lowered to tile ops.

``attribute`` and ``call`` replace their SIMT counterparts in ``intrinsics`` for tile kernels and
fall back to them for everything the two languages share (math functions, casts, ``min``/``max``,
``len``, device functions). Methods of tensors and tiles (``out.store(t)``, ``t.astype(f16)``)
are ``BoundMethod`` statics, dispatched by ``call``.

An Out partition is written by ``out.store(t)``, with no position: a store to another tile
block's tile cannot be written, and trying (``out.store(t, (i + 1, j))``) is a SafetyError; and
by ``ft.scatter`` at coordinates proved inside the own tile. Reads of an Out are held to the same
rule, since another block may be writing the tile it would read and Tile IR tokens order only
one block's own operations: ``out.load()``, and ``ft.load`` / ``ft.load_like`` only where the
position and shape are provably the block's own tile (the coordinates are ``out.tile_index``
itself). The own-tile pass (``passes/own_tile.py``) checks those reads and the scatters; a
``tile.load`` of an Out carries the spans of its arguments for its diagnostics. Gathers,
scatters, the atomics of an ``ft.Atomic`` tensor and load paddings are ``tile_memory.py``'s.
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from fearless import dtypes
from fearless.errors import SafetyError
from fearless.frontend import intrinsics, tile_memory as M
from fearless.frontend.emit import describe
from fearless.frontend.infer import Const, Static, TupleValue
from fearless.frontend.tile_emit import is_tile
from fearless.ir import types as T
from fearless.ir.core import Region, Value
from fearless.ir.opdef import Op
import fearless.tile.lang as lang

if TYPE_CHECKING:
    from fearless.frontend.astgen import FunctionGen


@dataclass(frozen=True)
class BoundMethod:
    """``obj.name`` for a tensor parameter or a tile, waiting for its call."""

    name: str
    obj: Value


def _is_view(fv) -> bool:
    return isinstance(fv, Value) and isinstance(fv.type, T.TensorView)


# attributes ---------------------------------------------------------------------------------

_VIEW_METHODS = {"store", "load"}
_TILE_METHODS = {"astype", "reshape", "permute", "transpose", "broadcast", "sum", "max", "min",
                 "argmax"}


def attribute(gen: "FunctionGen", value, attr: str, node):
    if _is_view(value):
        return _view_attribute(gen, value, attr, node)
    if is_tile(value):
        t = value.type
        if attr == "shape":
            return TupleValue(tuple(Const(n) for n in t.shape))
        if attr == "ndim":
            return Const(len(t.shape))
        if attr == "dtype":
            return Static(t.dtype)
        if attr == "T":
            return _permute(gen, value, (1, 0), node)
        if attr in _TILE_METHODS:
            return Static(BoundMethod(attr, value))
        raise gen.error(node, f"tiles have no attribute '{attr}'",
                        help="tiles have .shape, .dtype, .ndim, .T and the methods "
                             + ", ".join(sorted(_TILE_METHODS)))
    return intrinsics.attribute(gen, value, attr, node)


def _view_attribute(gen, view: Value, attr: str, node):
    t: T.TensorView = view.type
    out = t.role is T.Role.OUT
    if attr == "shape":
        return TupleValue(tuple(gen.b.create(Op.TILE_DIM, [view], attrs={"axis": k}).result
                                for k in range(t.ndim)))
    if attr == "ndim":
        return Const(t.ndim)
    if attr == "dtype":
        return Static(t.dtype)
    if out and attr == "tile_shape":
        return TupleValue(tuple(Const(n) for n in t.tile_shape))
    if out and attr == "tile_index":
        return TupleValue(tuple(_block_index(gen, k) for k in range(t.ndim)))
    if t.role is T.Role.ATOMIC:
        if attr in M.ATOMIC_METHODS:
            return Static(BoundMethod(attr, view))
        if attr in ("tile_shape", "tile_index") or attr in _VIEW_METHODS:
            raise SafetyError(f"an Atomic tensor has no '{attr}': every tile block updates "
                              f"it, through its atomic methods only", kernel=gen.ctx.kernel,
                              param=view.hint, span=gen.span(node),
                              help="its methods are " + ", ".join(M.ATOMIC_METHODS))
    elif attr in M.ATOMIC_METHODS:
        M.refuse_atomic_on(gen, view, attr, node)
    if out and attr in _VIEW_METHODS:
        return Static(BoundMethod(attr, view))
    if t.role is T.Role.IN and attr in ("tile_shape", "tile_index", "store"):
        raise gen.error(node, f"an In tensor has no '{attr}': it is shared by every tile block",
                        help="declare the parameter ft.Out[...] and pass a partition to write it")
    raise gen.error(node, f"tensor parameters have no attribute '{attr}' in tile kernels")


def _block_index(gen, axis: int) -> Value:
    """This block's coordinate along ``axis``: one ``tile.block_index`` per kernel, made at
    entry, which is how passes/own_tile.py recognises ``out.tile_index``."""
    ctx = gen.ctx
    if axis not in ctx.block_index:
        with gen.b.at(Region()) as region:
            ctx.block_index[axis] = gen.b.create(Op.TILE_BLOCK_INDEX, [],
                                                 attrs={"axis": axis}).result
        ctx.entry.extend(region.ops)
    return ctx.block_index[axis]


# calls --------------------------------------------------------------------------------------

def call(gen: "FunctionGen", func, node):
    obj = func.obj if isinstance(func, Static) else None
    handler = None
    if isinstance(obj, BoundMethod):
        handler = _METHODS[("view" if _is_view(obj.obj) else "tile", obj.name)]
    else:
        try:
            handler = HANDLERS.get(obj)
        except TypeError:
            handler = None
    if handler is None:
        return intrinsics.call(gen, func, node)
    args = [gen.visit(a) for a in node.args]
    kwargs = {k.arg: gen.visit(k.value) for k in node.keywords}
    if None in kwargs:
        raise gen.error(node, "**kwargs is not supported in kernels")
    if isinstance(obj, BoundMethod):
        args = [obj.obj, *args]
    return handler(_Call(gen, node, args, kwargs))


class _Call:
    """One call site: its arguments and helpers to check them with errors that point at it."""

    def __init__(self, gen, node, args, kwargs):
        self.gen, self.node, self.args, self.kwargs = gen, node, args, kwargs
        self.b, self.emit = gen.b, gen.emit

    def error(self, message, help=None, cls=None):
        kw = {} if cls is None else {"cls": cls}
        return self.gen.error(self.node, message, help, **kw)

    def take(self, *names, required=None):
        """The arguments bound to ``names`` (positional first, then keywords)."""
        required = len(names) if required is None else required
        if len(self.args) > len(names):
            raise self.error(f"takes at most {len(names)} arguments, got {len(self.args)}")
        bound = dict(zip(names, self.args))
        for k, v in self.kwargs.items():
            if k not in names or k in bound:
                raise self.error(f"unexpected keyword argument '{k}'")
            bound[k] = v
        missing = [n for n in names[:required] if n not in bound]
        if missing:
            raise self.error(f"missing argument '{missing[0]}'")
        return [bound.get(n) for n in names]

    def arg_node(self, names: tuple, name: str):
        """The source node of argument ``name`` (``names``: the parameters in order)."""
        k = names.index(name)
        if k < len(self.node.args):
            return self.node.args[k]
        return next((kw.value for kw in self.node.keywords if kw.arg == name), self.node)

    def tile(self, fv, what="argument") -> Value:
        if not is_tile(fv):
            raise self.error(f"{what} must be a tile, got {describe(fv)}")
        return fv

    def view(self, fv, what="argument") -> Value:
        if not _is_view(fv):
            raise self.error(f"{what} must be a tensor parameter, got {describe(fv)}")
        return fv

    def shape(self, fv, what="shape", pow2=True) -> tuple[int, ...]:
        items = fv.items if isinstance(fv, TupleValue) else (fv,)
        if not all(isinstance(c, Const) and isinstance(c.value, int)
                   and not isinstance(c.value, bool) and c.value >= 1 for c in items):
            raise self.error(f"{what} must be positive integer constants",
                             help="tile shapes are static: use literals, ft.Const parameters or "
                                  "out.tile_shape")
        shape = tuple(c.value for c in items)
        if pow2 and any(n & (n - 1) for n in shape):
            raise self.error(f"{what} {shape} has an extent that is not a power of two",
                             help="Tile IR tiles have power-of-two extents; pad the tensor or "
                                  "pick a smaller power of two")
        return shape

    def dtype(self, fv, what="dtype") -> dtypes.DType:
        d = intrinsics.as_dtype(fv)
        if d is None:
            raise self.error(f"{what} must be a dtype, got {describe(fv)}")
        return d

    def axis(self, fv, rank: int) -> int:
        if not (isinstance(fv, Const) and isinstance(fv.value, int)):
            raise self.error("axis must be an integer constant")
        axis = fv.value + rank if fv.value < 0 else fv.value
        if not 0 <= axis < rank:
            raise self.error(f"axis {fv.value} out of range for a {rank}-d tile")
        return axis


# tensors ------------------------------------------------------------------------------------

def _constant_none(value) -> bool:
    return (isinstance(value, Const) and value.value is None
            or isinstance(value, Static) and value.obj is None)


def _memory_hints(c: _Call, latency, allow_tma) -> dict:
    """The optional scheduling hints of a load: ``latency`` 1..10, ``allow_tma`` a bool; a
    constant None (a closure variable or default, so one kernel source serves tuned and untuned
    configurations) gives no hint, as leaving the argument out does."""
    hints = {}
    latency, allow_tma = (None if _constant_none(h) else h for h in (latency, allow_tma))
    if latency is not None:
        if not (isinstance(latency, Const) and isinstance(latency.value, int)
                and 1 <= latency.value <= 10):
            raise c.error("latency must be an integer constant from 1 to 10")
        hints["latency"] = latency.value
    if allow_tma is not None:
        if not (isinstance(allow_tma, Const) and isinstance(allow_tma.value, bool)):
            raise c.error("allow_tma must be True or False")
        hints["allow_tma"] = allow_tma.value
    return hints


def _load_attrs(c: _Call, shape, latency, allow_tma) -> dict:
    hints = _memory_hints(c, latency, allow_tma)
    return {"shape": shape, "hints": hints} if hints else {"shape": shape}


_LOAD = ("x", "index", "shape", "latency", "allow_tma", "padding")
_LOAD_LIKE = ("x", "out", "latency", "allow_tma", "padding")


def _padded(c: _Call, attrs: dict, x, padding, names: tuple) -> dict:
    value = M.load_padding(c, x, padding, c.arg_node(names, "padding"))
    if value is not None:
        attrs["padding"] = value
    return attrs


def _load(c: _Call):
    x, index, shape, latency, allow_tma, padding = c.take(*_LOAD, required=3)
    x = c.view(x, "x")
    M.refuse_atomic_read(c, x, _LOAD, "ft.load")
    shape = c.shape(shape)
    items = index.items if isinstance(index, TupleValue) else (index,)
    if len(items) != x.type.ndim or len(shape) != x.type.ndim:
        raise c.error(f"a {x.type.ndim}-d tensor needs {x.type.ndim} tile coordinates and a "
                      f"{x.type.ndim}-d shape")
    attrs = _padded(c, _load_attrs(c, shape, latency, allow_tma), x, padding, _LOAD)
    if x.type.role is T.Role.OUT:  # for passes/own_tile.py's diagnostics
        attrs["load_spans"] = tuple(c.gen.cap.span(c.arg_node(_LOAD, k))
                                    for k in ("x", "index", "shape"))
    coords = [c.emit.scalar(i, T.INDEX.dtype) for i in items]
    return c.b.create(Op.TILE_LOAD, [x, *coords], attrs=attrs).result


def _load_like(c: _Call):
    x, out, latency, allow_tma, padding = c.take(*_LOAD_LIKE, required=2)
    x, out = c.view(x, "x"), c.view(out, "out")
    M.refuse_atomic_read(c, x, _LOAD_LIKE, "ft.load_like")
    if out.type.role is not T.Role.OUT:
        raise c.error("load_like takes the position from an Out partition",
                      help="for an In tensor use ft.load(x, index, shape)")
    if x.type.ndim != out.type.ndim:
        raise c.error(f"x is {x.type.ndim}-d but the partition is {out.type.ndim}-d")
    attrs = _padded(c, _load_attrs(c, out.type.tile_shape, latency, allow_tma), x, padding,
                    _LOAD_LIKE)
    if x.type.role is T.Role.OUT:  # for passes/own_tile.py's diagnostics
        attrs["load_like_spans"] = (c.gen.cap.span(c.arg_node(_LOAD_LIKE, "x")),
                                    c.gen.cap.span(c.arg_node(_LOAD_LIKE, "out")),
                                    c.gen.cap.span(c.node))
    coords = [_block_index(c.gen, k) for k in range(out.type.ndim)]
    return c.b.create(Op.TILE_LOAD, [x, *coords], attrs=attrs).result


def _store(c: _Call):
    if len(c.args) > 2 or set(c.kwargs) - {"latency", "allow_tma"}:
        raise c.error("a tile block stores only its own tile: out.store(tile) takes no position",
                      cls=SafetyError,
                      help="each tile block owns exactly one tile of an Out partition; write "
                           "other positions from the tile blocks that own them")
    out, value, latency, allow_tma = c.take("out", "value", "latency", "allow_tma", required=2)
    t = out.type
    if not is_tile(value):
        value = c.emit.to_tile(value, t.dtype, t.tile_shape)
    if value.type.shape != t.tile_shape:
        raise c.error(f"stores a tile of shape {value.type.shape} into a partition of tile shape "
                      f"{t.tile_shape}")
    stored = c.emit.implicit(value, T.Tile(t.dtype, t.tile_shape), "the partition")
    hints = _memory_hints(c, latency, allow_tma)
    c.b.create(Op.TILE_STORE, [out, stored], attrs={"hints": hints} if hints else {})
    return Static(None)


def _load_own(c: _Call):
    (out,) = c.take("out")
    return c.b.create(Op.TILE_LOAD_OWN, [out]).result


# tile construction and shape ----------------------------------------------------------------

def _full_of(c: _Call, shape, value, dtype):
    if is_tile(value):
        raise c.error("the fill value must be a number or a scalar, not a tile")
    return c.emit.to_tile(value, c.dtype(dtype), c.shape(shape))


def _zeros(c: _Call):
    shape, dtype = c.take("shape", "dtype", required=1)
    return _full_of(c, shape, Const(0), dtype or Static(dtypes.f32))


def _full(c: _Call):
    shape, value, dtype = c.take("shape", "value", "dtype")
    return _full_of(c, shape, value, dtype)


def _arange(c: _Call):
    (n,) = c.take("n")
    (length,) = c.shape(n, "arange's length")
    return c.b.create(Op.TILE_IOTA, [], [T.Tile(dtypes.i32, (length,))]).result


def _cdiv(c: _Call):
    a, b = c.take("a", "b")
    for v in (a, b):
        d = c.emit.dtype_of(v)
        if not isinstance(d, str) and not d.is_int:
            raise c.error(f"cdiv needs integers, got {d}")
    return c.emit.binary(Op.FLOORDIV, c.emit.binary(Op.SUB, c.emit.binary(Op.ADD, a, b), Const(1)),
                         b)


def _broadcast(c: _Call):
    t, shape = c.take("t", "shape")
    t, shape = c.tile(t, "t"), c.shape(shape, pow2=False)
    return c.emit.to_tile(t, t.type.dtype, shape)


def _reshape(c: _Call):
    t, shape = c.take("t", "shape")
    t, shape = c.tile(t, "t"), c.shape(shape, pow2=False)
    n = 1
    for d in t.type.shape:
        n *= d
    m = 1
    for d in shape:
        m *= d
    if n != m:
        raise c.error(f"cannot reshape {t.type.shape} ({n} elements) to {shape} ({m})")
    if shape == t.type.shape:
        return t
    return c.b.create(Op.TILE_RESHAPE, [t], [T.Tile(t.type.dtype, shape)]).result


def _permute(gen_or_call, t: Value, perm: tuple, node=None):
    b = gen_or_call.b
    if len(t.type.shape) != len(perm):
        raise gen_or_call.error(node, f"transposing needs a {len(perm)}-d tile, got "
                                      f"{t.type.shape}")
    return b.create(Op.TILE_PERMUTE, [t], attrs={"perm": perm}).result


def _permute_call(c: _Call):
    t, axes = c.take("t", "axes")
    t = c.tile(t, "t")
    items = axes.items if isinstance(axes, TupleValue) else ()
    perm = tuple(a.value for a in items if isinstance(a, Const))
    if sorted(perm) != list(range(len(t.type.shape))):
        raise c.error(f"axes must be a permutation of 0..{len(t.type.shape) - 1}")
    return c.b.create(Op.TILE_PERMUTE, [t], attrs={"perm": perm}).result


def _transpose(c: _Call):
    (t,) = c.take("t")
    t = c.tile(t, "t")
    if len(t.type.shape) != 2:
        raise c.error(f"transpose needs a 2-d tile, got {t.type.shape}")
    return c.b.create(Op.TILE_PERMUTE, [t], attrs={"perm": (1, 0)}).result


def _astype(c: _Call):
    t, dtype = c.take("t", "dtype")
    return c.emit.cast(c.tile(t, "t"), c.dtype(dtype))


def _where(c: _Call):
    cond, a, b = c.take("cond", "a", "b")
    if not any(is_tile(v) for v in (cond, a, b)):
        return intrinsics.HANDLERS[np.where](c.gen, [cond, a, b], c.node)
    if is_tile(cond) and not cond.type.dtype.is_bool:
        raise c.error(f"the condition must be a bool tile, got {cond.type}",
                      help="compare first, for example ft.where(x > 0, x, 0)")
    return c.emit.select(cond, a, b)


def _math(op: Op):
    def handler(c: _Call):
        if op in (Op.MIN, Op.MAX):
            return c.emit.binary(op, *c.take("a", "b"))
        return c.emit.math(op, c.take("x"))
    return handler


def _exp2(c: _Call):
    x, ftz = c.take("x", "flush_to_zero", required=1)
    if ftz is None or _constant_none(ftz):
        return c.emit.math(Op.EXP2, [x])
    if not (isinstance(ftz, Const) and isinstance(ftz.value, bool)):
        raise c.error("flush_to_zero must be True or False")
    result = c.emit.math(Op.EXP2, [x], {"flush_to_zero": True} if ftz.value else None)
    if ftz.value and result.type.dtype.bits > 32:
        raise c.error("flush_to_zero is for f32, f16 and bf16 (an f64 exp2 keeps its "
                      "subnormals)")
    return result


def _reduce(kind):
    def handler(c: _Call):
        names = ("t", "axis", "keepdims") + (("acc_dtype",) if kind == "sum" else ())
        t, axis, keepdims, acc = (*c.take(*names, required=1), None)[:4]
        t = c.tile(t, "t")
        keep = _keepdims(c, keepdims)
        shape = t.type.shape
        if axis is None or (isinstance(axis, Static) and axis.obj is None):
            # every axis: the elements in row-major order, as one axis (NumPy's flat order,
            # which argmax's index counts in)
            kept, axis = (1,) * len(shape), 0
            if len(shape) != 1:
                t = c.b.create(Op.TILE_RESHAPE, [t], [T.Tile(t.type.dtype, (prod(shape),))]).result
        else:
            axis = c.axis(axis, len(shape))
            kept = shape[:axis] + (1,) + shape[axis + 1:]
        d = t.type.dtype
        if kind == "sum" and (d.is_bool or (d.is_int and d.bits < 32)):
            d = dtypes.i32
        if kind == "argmax":
            out = c.b.create(Op.TILE_ARGMAX, [t], attrs={"axis": axis}).result
        elif kind == "sum" and d.is_float:
            work = _sum_dtype(c, d, acc)
            total = c.b.create(Op.TILE_REDUCE, [c.emit.cast(t, work)],
                               attrs={"kind": kind, "axis": axis}).result
            out = c.emit.cast(total, d)  # one rounding of the sum to the tile's dtype
        else:
            if acc is not None:
                raise c.error(f"acc_dtype applies to sums of float tiles, not {t.type.dtype}",
                              help="integer tiles sum exactly, wrapping at the width of the "
                                   "result (i32 for narrower integers)")
            out = c.b.create(Op.TILE_REDUCE, [c.emit.cast(t, d)],
                             attrs={"kind": kind, "axis": axis}).result
        if keep:
            out = c.b.create(Op.TILE_RESHAPE, [out], [T.Tile(out.type.dtype, kept)]).result
        return out
    return handler


def _keepdims(c: _Call, keepdims) -> bool:
    if keepdims is None:
        return False
    if not (isinstance(keepdims, Const) and isinstance(keepdims.value, (bool, int))):
        raise c.error("keepdims must be True or False")
    return bool(keepdims.value)


def _sum_dtype(c: _Call, d: dtypes.DType, acc) -> dtypes.DType:
    """The dtype a float sum accumulates in: ``acc_dtype`` if given (the tile's dtype or a wider
    float), else f32 for f16 and bf16 tiles and the tile's own dtype otherwise."""
    if acc is None:
        return dtypes.f32 if d.bits < 32 else d
    work = c.dtype(acc, "acc_dtype")
    if not (work is d or (work.is_float and work.bits > d.bits)):
        raise c.error(f"acc_dtype {work} cannot accumulate a sum of {d}",
                      help=f"use {d} itself or a wider float (f32, f64)")
    return work


def _mma(c: _Call):
    a, b, acc = c.take("a", "b", "acc")
    a, b, acc = c.tile(a, "a"), c.tile(b, "b"), c.tile(acc, "acc")
    if not all(len(v.type.shape) == 2 for v in (a, b, acc)):
        raise c.error("mma takes 2-d tiles a (m, k), b (k, n) and acc (m, n)")
    (m, k), (k2, n) = a.type.shape, b.type.shape
    if k != k2 or acc.type.shape != (m, n):
        raise c.error(f"mma shapes do not agree: {a.type.shape} @ {b.type.shape} + "
                      f"{acc.type.shape}")
    if a.type.dtype is not b.type.dtype:
        raise c.error(f"mma inputs differ in dtype: {a.type.dtype} and {b.type.dtype}",
                      help="convert one with .astype()")
    want = dtypes.f64 if a.type.dtype is dtypes.f64 else dtypes.f32
    if a.type.dtype.name not in ("f16", "bf16", "f32", "f64"):
        raise c.error(f"mma takes f16, bf16, f32 or f64 inputs, got {a.type.dtype}")
    if acc.type.dtype is not want:
        raise c.error(f"the accumulator of {a.type.dtype} inputs must be {want}, got "
                      f"{acc.type.dtype}", help=f"start it as ft.zeros(shape, {want})")
    return c.b.create(Op.TILE_MMA, [a, b, acc]).result


def _len(c: _Call):
    (x,) = c.take("x")
    if _is_view(x):
        return c.b.create(Op.TILE_DIM, [x], attrs={"axis": 0}).result
    if is_tile(x):
        return Const(x.type.shape[0])
    return intrinsics.HANDLERS[builtins.len](c.gen, [x], c.node)


HANDLERS = {
    builtins.len: _len,
    lang.load: _load, lang.load_like: _load_like, lang.zeros: _zeros, lang.full: _full,
    lang.arange: _arange, lang.cdiv: _cdiv, lang.mma: _mma, lang.broadcast: _broadcast,
    lang.reshape: _reshape, lang.permute: _permute_call, lang.transpose: _transpose,
    lang.where: _where, lang.exp: _math(Op.EXP), lang.exp2: _exp2,
    lang.log: _math(Op.LOG), lang.sqrt: _math(Op.SQRT), lang.rsqrt: _math(Op.RSQRT),
    lang.tanh: _math(Op.TANH), lang.maximum: _math(Op.MAX), lang.minimum: _math(Op.MIN),
    lang.sum: _reduce("sum"), lang.max: _reduce("max"), lang.min: _reduce("min"),
    lang.argmax: _reduce("argmax"), lang.gather: M.gather, lang.scatter: M.scatter,
}

_METHODS = {
    ("view", "store"): _store, ("view", "load"): _load_own,
    ("tile", "astype"): _astype, ("tile", "reshape"): _reshape,
    ("tile", "permute"): _permute_call, ("tile", "transpose"): _transpose,
    ("tile", "broadcast"): _broadcast, ("tile", "sum"): _reduce("sum"),
    ("tile", "max"): _reduce("max"), ("tile", "min"): _reduce("min"),
    ("tile", "argmax"): _reduce("argmax"),
    **{("view", name): M.atomic(name) for name in M.ATOMIC_METHODS if name != "compare_exchange"},
    ("view", "compare_exchange"): M.compare_exchange,
}
