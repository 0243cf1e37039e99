"""Typed emission for tile kernels: the scalar rules of ``Emitter`` extended to tiles.

A tile operand has a static shape. Binary ops, comparisons, ``where`` and math functions
broadcast their operands like NumPy (shapes aligned on the right; an extent of 1 stretches; a
scalar or a Python number stretches to the whole tile) and promote dtypes by the scalar rules of
``infer`` (a Python literal is weak: ``t * 2.0`` keeps an f16 tile f16). The broadcast is emitted
explicitly (``tile.reshape`` to add leading axes, ``tile.broadcast`` to stretch, ``tile.splat``
for scalars) because Tile IR has no implicit broadcasting.
"""
from __future__ import annotations

from fearless import dtypes
from fearless.dtypes import DType
from fearless.frontend.emit import Emitter, constant_value, describe
from fearless.frontend.infer import Const, TypingError, const_fits, implicit_conversion_error
from fearless.ir import types as T
from fearless.ir.core import Value
from fearless.ir.opdef import REGISTRY, Op


def is_tile(fv) -> bool:
    return isinstance(fv, Value) and isinstance(fv.type, T.Tile)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``. Raises TypingError."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise TypingError(f"tile shapes {' and '.join(map(str, shapes))} do not broadcast",
                              help="reshape or ft.broadcast one operand to a matching shape")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


class TileEmitter(Emitter):
    """Emits scalar and tile arithmetic; a scalar-only expression emits exactly as in SIMT."""

    def dtype_of(self, fv):
        if is_tile(fv):
            return fv.type.dtype
        return super().dtype_of(fv)

    # shapes -------------------------------------------------------------------------------

    def to_tile(self, fv, dtype: DType, shape: tuple[int, ...]) -> Value:
        """``fv`` (a number, scalar or tile) as a tile of ``dtype`` and ``shape``."""
        if not is_tile(fv):
            if isinstance(fv, Const):
                why = const_fits(fv, dtype) if fv.weak and dtype.is_int else None
                if why:
                    raise TypingError(why)
                return self.b.create(Op.CONSTANT, [], [T.Tile(dtype, shape)],
                                     {"value": _pyvalue(fv, dtype)}).result
            return self.b.create(Op.TILE_SPLAT, [self.scalar(fv, dtype)],
                                 [T.Tile(dtype, shape)]).result
        v = self.cast(fv, dtype)
        if v.type.shape == shape:
            return v
        src = v.type.shape
        if len(src) < len(shape):
            src = (1,) * (len(shape) - len(src)) + src
            v = self.b.create(Op.TILE_RESHAPE, [v], [T.Tile(dtype, src)]).result
        if src != shape:
            v = self.b.create(Op.TILE_BROADCAST, [v], [T.Tile(dtype, shape)]).result
        return v

    def cast(self, v: Value, dtype: DType) -> Value:
        if not is_tile(v):
            return super().cast(v, dtype)
        if v.type.dtype is dtype:
            return v
        shape = v.type.shape
        if dtype.is_bool:
            zero = self.to_tile(Const(0), v.type.dtype, shape)
            return self.b.create(Op.CMP, [v, zero], attrs={"pred": "ne"}).result
        return self.b.create(Op.CAST, [v], [T.Tile(dtype, shape)]).result

    def _shape(self, *fvs):
        tiles = [fv.type.shape for fv in fvs if is_tile(fv)]
        return broadcast_shapes(*tiles) if tiles else None

    # arithmetic ---------------------------------------------------------------------------

    def binary(self, op: Op, a, b):
        shape = self._shape(a, b)
        if shape is None:
            return super().binary(op, a, b)
        if op is Op.POW:
            return self.math(Op.POW, [a, b])
        d = self.common(a, b, op)
        if op is Op.DIV and not d.is_float:
            d = dtypes.f32  # tiles stay 32-bit: int tiles divide in f32, as in Triton
        va, vb = self.to_tile(a, d, shape), self.to_tile(b, d, shape)
        return self.b.create(op, [va, vb]).result

    def compare(self, pred: str, a, b):
        shape = self._shape(a, b)
        if shape is None:
            return super().compare(pred, a, b)
        d = self.common(a, b, Op.CMP)
        va, vb = self.to_tile(a, d, shape), self.to_tile(b, d, shape)
        return self.b.create(Op.CMP, [va, vb], attrs={"pred": pred}).result

    def unary(self, op: Op, a):
        if not is_tile(a):
            return super().unary(op, a)
        if op in (Op.NEG, Op.ABS) and a.type.dtype.is_bool:
            raise TypingError(f"{op.base} needs a number tile, not bool")
        if op is Op.NOT and a.type.dtype.is_float:
            raise TypingError(f"~ needs an integer or bool tile, not {a.type.dtype}")
        return self.b.create(op, [a]).result

    def select(self, cond, a, b):
        shape = self._shape(cond, a, b)
        if shape is None:
            return super().select(cond, a, b)
        d = self.common(a, b, Op.SELECT)
        c = self.to_tile(cond, dtypes.bool_, shape)
        va, vb = self.to_tile(a, d, shape), self.to_tile(b, d, shape)
        return self.b.create(Op.SELECT, [c, va, vb]).result

    def math(self, fn: Op, args: list, attrs: dict | None = None):
        shape = self._shape(*args)
        if shape is None:
            return super().math(fn, args, attrs)
        kinds = REGISTRY[fn].operand_kinds or ("float",) * len(args)
        floats = [a for a, k in zip(args, kinds) if k == "float"]
        d = self.common(*floats, fn) if len(floats) == 2 else self.dtype_of(floats[0])
        if isinstance(d, str) or not d.is_float:  # an integer or a literal
            d = dtypes.f32
        values = [self.to_tile(a, d, shape) if k == "float" else
                  self.to_tile(self.saturated_i32(a, fn, i), dtypes.i32, shape)
                  for i, (a, k) in enumerate(zip(args, kinds))]
        return self.b.create(fn, values, attrs=attrs).result

    def truth(self, fv):
        if is_tile(fv):
            raise TypingError(f"a tile has no single truth value: the elements of this "
                              f"{fv.type} may differ",
                              help="reduce it to one value first (for a bool tile c, "
                                   "ft.max(c) is whether any element is True, ft.min(c) whether "
                                   "all are), or choose per element with ft.where")
        return super().truth(fv)

    def implicit(self, fv, target, what: str) -> Value:
        if isinstance(target, T.Tile):
            if is_tile(fv) and fv.type.shape == target.shape:
                why = implicit_conversion_error(fv.type.dtype, target.dtype)
                if why:
                    why = why.split("; cast it")[0]
                    raise TypingError(f"cannot assign to {what} ({target}): {why}",
                                      help=f"convert the tile with .astype(fl.{target.dtype})")
                return self.cast(fv, target.dtype)
            if not is_tile(fv):
                raise TypingError(f"{what} holds {target}; it cannot be given {describe(fv)}",
                                  help="use ft.full(shape, value, dtype) for a constant tile")
            raise TypingError(f"{what} holds {target}; it cannot be given {fv.type}",
                              help="a variable keeps one tile shape; reshape or broadcast first")
        if is_tile(fv):
            raise TypingError(f"{what} holds {target}; it cannot be given {fv.type}")
        return super().implicit(fv, target, what)


def _pyvalue(c: Const, dtype: DType):
    return constant_value(c.value, dtype)
