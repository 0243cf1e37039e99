"""Parameter kinds from a kernel's annotations, and specialisation to IR types at a call.

``param_kinds()`` reads the annotations once per kernel. ``specialize()`` turns the description
of actual arguments (dtype, rank and contiguity of arrays; dtype of scalars) into the IR types of
one specialisation, binding TypeVars consistently; mismatches raise ``ArgumentTypeError`` naming
the parameter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from fearless import dtypes
from fearless.errors import ArgumentTypeError, CompileError
from fearless.frontend.capture import Captured
from fearless.ir import types as T
from fearless.simt.params import ArrayKind, _ArrayFamily


@dataclass(frozen=True)
class ScalarParam:
    """A scalar parameter; ``dtype`` is a DType, a TypeVar, or None (from the argument)."""

    dtype: Any


@dataclass(frozen=True)
class ArrayParam:
    kind: ArrayKind


@dataclass(frozen=True)
class AnyParam:
    """No annotation: a scalar or a read-only array, whichever the argument is."""


ParamKind = ScalarParam | ArrayParam | AnyParam


@dataclass(frozen=True)
class ArgInfo:
    """What specialisation needs to know of one host argument."""

    dtype: dtypes.DType
    ndim: int | None = None  # None for scalars
    contiguous: bool = True
    weak: bool = False       # a plain Python int/float: takes a TypeVar's dtype when bound


def _dtype_spec(value, where: str):
    if value is None or isinstance(value, TypeVar):
        return value
    try:
        return dtypes.coerce(value)
    except TypeError:
        raise CompileError(f"{where}: {value!r} is not a dtype") from None


def param_kinds(cap: Captured) -> list[tuple[str, ParamKind]]:
    """The kind of each parameter, from ``cap.fn.__annotations__``. Raises CompileError."""
    annotations = dict(getattr(cap.fn, "__annotations__", {}))
    args = cap.tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
        raise CompileError("kernel parameters must be plain positional names without defaults",
                           kernel=cap.name, span=cap.span(args.args[0] if args.args else cap.tree))
    out = []
    for node in args.args:
        ann = annotations.get(node.arg, None)
        if isinstance(ann, str):  # from __future__ import annotations
            try:
                ann = eval(ann, cap.fn.__globals__)  # noqa: S307 - the user's own annotation
            except Exception as exc:
                raise CompileError(f"cannot evaluate the annotation {ann!r}: {exc}",
                                   kernel=cap.name, param=node.arg, span=cap.span(node)) from None
        out.append((node.arg, _kind(ann, cap, node)))
    return out


def _kind(ann, cap: Captured, node) -> ParamKind:
    where = f"kernel '{cap.name}', parameter '{node.arg}'"
    if ann is None:
        return AnyParam()
    if isinstance(ann, ArrayKind):
        return ArrayParam(ArrayKind(ann.name, ann.writable, _dtype_spec(ann.dtype, where), ann.ndim))
    if isinstance(ann, _ArrayFamily):
        return ArrayParam(ann.any_dtype())
    if isinstance(ann, TypeVar):
        return ScalarParam(ann)
    if isinstance(ann, dtypes.DType) or ann in (int, float, bool) or (
            isinstance(ann, type) and issubclass(ann, np.generic)):
        return ScalarParam(_dtype_spec(ann, where))
    raise CompileError(f"annotation {ann!r} is not a parameter kind", kernel=cap.name,
                       param=node.arg, span=cap.span(node.annotation or node),
                       help="use a dtype (fl.f32), fl.Slice[T], fl.DisjointSlice[T], "
                            "fl.Array[T, n] or fl.DisjointArray[T, n]")


def specialize(kernel: str, kinds: list[tuple[str, ParamKind]],
               infos: list[ArgInfo]) -> tuple[T.Type, ...]:
    """IR parameter types for arguments described by ``infos``. Raises ArgumentTypeError."""
    if len(infos) != len(kinds):
        raise ArgumentTypeError(f"takes {len(kinds)} arguments "
                                f"({', '.join(n for n, _ in kinds)}), got {len(infos)}",
                                kernel=kernel)
    bound: dict[TypeVar, tuple[dtypes.DType, str]] = {}
    out: list = [None] * len(kinds)
    # weak Python scalars go last so that a TypeVar is bound by the arrays first
    order = sorted(range(len(kinds)), key=lambda i: infos[i].weak)
    for i in order:
        (name, kind), info = kinds[i], infos[i]
        def fail(msg, help=None):
            raise ArgumentTypeError(msg, kernel=kernel, param=name, help=help)

        if isinstance(kind, AnyParam):
            kind = (ArrayParam(ArrayKind("Array", False, None, info.ndim))
                    if info.ndim is not None else ScalarParam(None))
        if isinstance(kind, ArrayParam):
            k = kind.kind
            if info.ndim is None:
                fail(f"expects an array ({k!r}), got a scalar")
            if info.ndim != k.ndim:
                fail(f"expects a {k.ndim}-d array, got {info.ndim}-d")
            want = k.dtype
        else:
            if info.ndim is not None:
                fail(f"expects a scalar, got a {info.ndim}-d array")
            want = kind.dtype
        dtype = info.dtype
        if isinstance(want, TypeVar) and info.weak and want in bound:
            dtype = bound[want][0]
        elif isinstance(want, TypeVar):
            if want in bound and bound[want][0] is not dtype:
                other_dtype, other = bound[want]
                fail(f"has dtype {dtype}, but '{other}' already bound {want.__name__} to "
                     f"{other_dtype}")
            bound.setdefault(want, (dtype, name))
        elif isinstance(want, dtypes.DType) and want is not dtype:
            if isinstance(kind, ArrayParam):
                fail(f"expects dtype {want}, got {dtype}",
                     help=f"convert the array first, for example fl.asarray(x, fl.{want})")
            dtype = want  # scalars convert to the declared dtype
        if isinstance(kind, ArrayParam):
            access = T.Access(kind.kind.access)
            out[i] = T.Array(dtype, info.ndim, access, info.contiguous)
        else:
            out[i] = T.Scalar(dtype)
    return tuple(out)
