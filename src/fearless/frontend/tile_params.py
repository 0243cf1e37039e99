"""Parameter kinds of a tile kernel, read from its annotations and defaults.

    ft.Out[T] / ft.Out[T, shape]   -> TensorParam(role OUT)   a partition, one tile per block
    ft.In[T]                       -> TensorParam(role IN)    any tensor, read-only
    ft.Atomic[T]                   -> TensorParam(role ATOMIC) any tensor, atomic updates only
    f32, int, a TypeVar, none      -> ScalarParam             a runtime scalar
    ft.Const[int] = 64             -> ConstParam              a compile-time constant

Defaults are allowed only for ``ft.Const`` parameters. ``TypeVar`` dtypes bind across parameters
as in SIMT kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from fearless import dtypes
from fearless.errors import CompileError
from fearless.frontend.capture import Captured
from fearless.tile.lang import ConstKind, TensorFamily, TensorKind

NO_DEFAULT = object()


@dataclass(frozen=True)
class TensorParam:
    name: str
    role: str                             # "in", "out" or "atomic"
    dtype: Any                            # DType, TypeVar or None
    tile_shape: tuple[int, ...] | None    # an Out's static tile shape, if annotated


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: Any                            # DType, TypeVar or None


@dataclass(frozen=True)
class ConstParam:
    name: str
    type: Any
    default: Any = NO_DEFAULT


TileParam = TensorParam | ScalarParam | ConstParam


def tile_params(cap: Captured) -> list[TileParam]:
    """The parameters of tile kernel ``cap`` in order. Raises CompileError."""
    fn, args = cap.fn, cap.tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise CompileError("tile kernel parameters must be plain names", kernel=cap.name,
                           span=cap.span(cap.tree))
    defaults = dict(zip([a.arg for a in args.args][len(args.args) - len(args.defaults):],
                        fn.__defaults__ or ()))
    annotations = dict(getattr(fn, "__annotations__", {}))
    out = []
    for node in args.args:
        name = node.arg
        ann = annotations.get(name)
        if isinstance(ann, str):
            try:
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the user's own annotation
            except Exception as exc:
                raise CompileError(f"cannot evaluate the annotation {ann!r}: {exc}",
                                   kernel=cap.name, param=name, span=cap.span(node)) from None
        param = _param(name, ann, cap, node)
        if name in defaults:
            if not isinstance(param, ConstParam):
                raise CompileError("only ft.Const parameters may have a default",
                                   kernel=cap.name, param=name, span=cap.span(node),
                                   help="annotate it ft.Const[int] (a compile-time constant)")
            param = ConstParam(name, param.type, defaults[name])
        out.append(param)
    if not any(isinstance(p, TensorParam) and p.role == "out" for p in out):
        raise CompileError("a tile kernel needs an ft.Out parameter: its partition gives the grid",
                           kernel=cap.name, span=cap.span(cap.tree),
                           help="an ft.Atomic tensor gives no grid: also pass an Out partition "
                                "(for example of per-tile results)" if any(
                               isinstance(p, TensorParam) and p.role == "atomic" for p in out)
                           else None)
    return out


def _param(name: str, ann, cap: Captured, node) -> TileParam:
    if isinstance(ann, TensorFamily):  # a bare ft.In / ft.Out: any dtype
        ann = ann.any_dtype()
    if isinstance(ann, TensorKind):
        return TensorParam(name, ann.role, _dtype(ann.dtype, cap, node), ann.tile_shape)
    if isinstance(ann, ConstKind):
        return ConstParam(name, ann.type)
    if ann is None or isinstance(ann, TypeVar):
        return ScalarParam(name, ann)
    if isinstance(ann, dtypes.DType) or ann in (int, float, bool) or (
            isinstance(ann, type) and issubclass(ann, np.generic)):
        return ScalarParam(name, _dtype(ann, cap, node))
    raise CompileError(f"annotation {ann!r} is not a tile-kernel parameter kind",
                       kernel=cap.name, param=name, span=cap.span(node.annotation or node),
                       help="use ft.Out[T], ft.In[T], ft.Atomic[T], a dtype, or ft.Const[int]")


def _dtype(value, cap, node):
    if value is None or isinstance(value, TypeVar):
        return value
    try:
        return dtypes.coerce(value)
    except TypeError:
        raise CompileError(f"{value!r} is not a dtype", kernel=cap.name, param=node.arg,
                           span=cap.span(node)) from None
