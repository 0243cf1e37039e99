"""One parameter model for both kernel tracks and the command line, and one ``specialise()``.

``read(captured, track)`` reads a kernel's parameters once, from its annotations and defaults,
into ``Param`` records:

    SIMT (``@fl.kernel``)                       tile (``@ft.kernel``)
    f32, int, a TypeVar        -> SCALAR        f32, int, a TypeVar, none  -> SCALAR
    no annotation              -> ANY           ft.In[T]                   -> IN
    fl.Slice[T], fl.Array[T, n], ...  -> ARRAY  ft.Out[T] / Out[T, shape]  -> OUT
                                                ft.Atomic[T]               -> ATOMIC
                                                ft.Const[int] = 64         -> CONST

A *specialisation* is the IR type of every runtime parameter (all but CONST).
``specialise(kernel, params, infos)`` computes it from one ``ArgInfo`` per runtime parameter,
whichever way the arguments were described: by a call (``scalar_info`` for scalars; the kernel
classes describe arrays, tensors and partitions) or by the command line's ``--signature``
(``signature_infos``). TypeVars bind consistently across parameters (Python scalars last, so
that arrays bind first); a scalar converts to its parameter's declared dtype, an array or tensor
of another dtype is refused.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, TypeVar

import numpy as np

from fearless import dtypes
from fearless.errors import ArgumentTypeError, CompileError, ContractError
from fearless.frontend.capture import Captured
from fearless.ir import types as T
from fearless.simt.params import ArrayKind, _ArrayFamily
from fearless.tile.lang import ConstKind, TensorFamily, TensorKind

NO_DEFAULT = object()


class Kind(Enum):
    """What a parameter is, as its annotation says."""

    SCALAR = "scalar"   # a runtime scalar (both tracks)
    ANY = "any"         # SIMT, not annotated: a scalar or a read-only array, as the argument is
    ARRAY = "array"     # SIMT: fl.Slice, Array, DisjointSlice, DisjointArray, AtomicSlice, ...
    IN = "in"           # tile: ft.In, a tensor every tile block reads
    OUT = "out"         # tile: ft.Out, a partition; each tile block owns one tile
    CONST = "const"     # tile: ft.Const, a compile-time constant
    ATOMIC = "atomic"   # tile: ft.Atomic, a tensor every tile block updates atomically


SCALAR, ANY, ARRAY, IN, OUT, CONST, ATOMIC = Kind  # the launch fast paths compare kinds by identity


@dataclass(frozen=True)
class Param:
    """One kernel parameter as its annotation declares it.

    ``dtype``: a DType, a TypeVar (bound across parameters at a call), or None (the argument's);
    for CONST, the constant's Python type. ``ndim``: an ARRAY's rank (IN and OUT take the
    argument's). ``access``: an ARRAY's (read, disjoint, atomic, unsafe); ``family``: its
    annotation's name (``DisjointSlice``), for messages. ``tile_shape``: an OUT's static tile
    shape, when annotated. ``default``: a CONST's default value."""

    name: str
    kind: Kind
    dtype: Any = None
    ndim: int | None = None
    access: T.Access | None = None
    family: str = ""
    tile_shape: tuple[int, ...] | None = None
    default: Any = NO_DEFAULT

    @property
    def written(self) -> bool:
        """Whether a launch may write the argument (an Out, an Atomic, a writable array)."""
        return self.kind is OUT or self.kind is ATOMIC or \
            (self.kind is ARRAY and self.access is not T.Access.READ)

    def annotation(self) -> str:
        """The annotation as the user wrote it, for messages (``fearless.Slice[f32, 1]``)."""
        t = getattr(self.dtype, "__name__", None) or str(self.dtype)
        if self.kind is ARRAY:
            return f"fearless.{self.family}[{t}, {self.ndim}]"
        if self.kind in (IN, OUT, ATOMIC):
            shape = f", {self.tile_shape}" if self.tile_shape else ""
            return f"fearless.tile.{self.kind.value.capitalize()}[{t}{shape}]"
        return t


@dataclass(frozen=True)
class ArgInfo:
    """What specialisation needs to know of one argument.

    ``ndim`` None: a scalar. ``weak``: a plain Python number, which takes a TypeVar's dtype when
    another argument bound it. ``tile_shape``: a partition's (an Out's argument). ``layout``:
    the layout facts of a tile kernel's tensor (``ir.types.Layout``); ``schedule``: a
    persistent partition's order (``ir.types.Persistent``)."""

    dtype: dtypes.DType
    ndim: int | None = None
    contiguous: bool = True
    weak: bool = False
    tile_shape: tuple[int, ...] | None = None
    layout: T.Layout = T.Layout()
    schedule: T.Persistent | None = None


# reading the annotations ----------------------------------------------------------------------

def read(cap: Captured, track: str) -> list[Param]:
    """The parameters of kernel ``cap`` of ``track`` ("simt" or "tile"), in order. Raises
    CompileError (at the parameter) for a signature or annotation the track does not take."""
    fn, args = cap.fn, cap.tree.args
    tile = track == "tile"
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or \
            (args.defaults and not tile):  # a tile kernel's ft.Const may have a default
        _refuse_form(cap, tile)
    names = [a.arg for a in args.args]
    defaults = dict(zip(names[len(names) - len(args.defaults):], fn.__defaults__ or ()))
    annotations = dict(getattr(fn, "__annotations__", {}))
    out = []
    for node in args.args:
        ann = annotations.get(node.arg)
        if isinstance(ann, str):  # from __future__ import annotations
            try:
                ann = eval(ann, fn.__globals__)  # noqa: S307 - the user's own annotation
            except Exception as exc:
                raise CompileError(f"cannot evaluate the annotation {ann!r}: {exc}",
                                   kernel=cap.name, param=node.arg, span=cap.span(node)) from None
        param = (_tile_param if tile else _simt_param)(node.arg, ann, cap, node)
        if node.arg in defaults:
            if param.kind is not CONST:
                raise CompileError("only ft.Const parameters may have a default",
                                   kernel=cap.name, param=node.arg, span=cap.span(node),
                                   help="annotate it ft.Const[int] (a compile-time constant)")
            param = replace(param, default=defaults[node.arg])
        out.append(param)
    if tile and not any(p.kind is OUT for p in out):
        raise CompileError("a tile kernel needs an ft.Out parameter: its partition gives the grid",
                           kernel=cap.name, span=cap.span(cap.tree),
                           help="an ft.Atomic tensor gives no grid: also pass an Out partition "
                                "(for example of per-tile results)"
                           if any(p.kind is ATOMIC for p in out) else None)
    return out


def _refuse_form(cap: Captured, tile: bool):
    if tile:
        raise CompileError("tile kernel parameters must be plain names", kernel=cap.name,
                           span=cap.span(cap.tree))
    args = cap.tree.args
    raise CompileError("kernel parameters must be plain positional names without defaults",
                       kernel=cap.name, span=cap.span(args.args[0] if args.args else cap.tree))


def _simt_param(name: str, ann, cap: Captured, node: ast.arg) -> Param:
    if ann is None:
        return Param(name, ANY)
    if isinstance(ann, _ArrayFamily):  # a bare fl.Slice: any dtype
        ann = ann.any_dtype()
    if isinstance(ann, ArrayKind):
        return Param(name, ARRAY, _dtype(ann.dtype, cap, node), ann.ndim, T.Access(ann.access),
                     ann.name)
    scalar = _scalar(name, ann, cap, node)
    if scalar is None:
        raise CompileError(f"annotation {ann!r} is not a parameter kind", kernel=cap.name,
                           param=name, span=cap.span(node.annotation or node),
                           help="use a dtype (fl.f32), fl.Slice[T], fl.DisjointSlice[T], "
                                "fl.Array[T, n] or fl.DisjointArray[T, n]")
    return scalar


def _tile_param(name: str, ann, cap: Captured, node: ast.arg) -> Param:
    if isinstance(ann, TensorFamily):  # a bare ft.In / ft.Out / ft.Atomic: any dtype
        ann = ann.any_dtype()
    if isinstance(ann, TensorKind):
        return Param(name, Kind(ann.role), _dtype(ann.dtype, cap, node),
                     tile_shape=ann.tile_shape)
    if isinstance(ann, ConstKind):
        return Param(name, CONST, ann.type)
    scalar = Param(name, SCALAR) if ann is None else _scalar(name, ann, cap, node)
    if scalar is None:
        raise CompileError(f"annotation {ann!r} is not a tile-kernel parameter kind",
                           kernel=cap.name, param=name, span=cap.span(node.annotation or node),
                           help="use ft.Out[T], ft.In[T], ft.Atomic[T], a dtype, or "
                                "ft.Const[int]")
    return scalar


def _scalar(name: str, ann, cap: Captured, node: ast.arg) -> Param | None:
    """A scalar parameter annotated with a dtype or a TypeVar; None for anything else."""
    if isinstance(ann, TypeVar):
        return Param(name, SCALAR, ann)
    if isinstance(ann, dtypes.DType) or ann in (int, float, bool) or (
            isinstance(ann, type) and issubclass(ann, np.generic)):
        return Param(name, SCALAR, _dtype(ann, cap, node))
    return None


def _dtype(value, cap: Captured, node: ast.arg):
    if value is None or isinstance(value, TypeVar):
        return value
    try:
        return dtypes.coerce(value)
    except TypeError:
        raise CompileError(f"{value!r} is not a dtype", kernel=cap.name, param=node.arg,
                           span=cap.span(node.annotation or node)) from None


def declare(kernel: str, declared) -> list[Param]:
    """Parameters declared without a Python function (``fl.foreign``): ``declared`` is a dict
    (or a sequence of pairs) of parameter name -> SIMT annotation, in the entry's order. A
    foreign entry has one fixed signature, so every dtype must be concrete: ``fl.Slice[T]``,
    ``fl.Array[T, n]``, ``fl.DisjointSlice[T]``, ``fl.DisjointArray[T, n]``,
    ``fl.AtomicSlice[T]``, ``fl.UnsafeSlice[T]`` or a scalar dtype (``fl.f32``, ``int``...).
    Raises CompileError naming the kernel and the parameter."""
    items = list(declared.items() if isinstance(declared, dict) else declared)
    out, seen = [], set()
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and item[0].isidentifier()):
            raise CompileError(f"params= takes a dict of name -> annotation, got {item!r}",
                               kernel=kernel, help='params={"x": fl.Slice[fl.f32], "n": fl.i32}')
        name, ann = item
        if name in seen:
            raise CompileError("is declared twice", kernel=kernel, param=name)
        seen.add(name)
        if isinstance(ann, _ArrayFamily):
            ann = ann.any_dtype()
        if isinstance(ann, ArrayKind):
            dtype, param = ann.dtype, Param(name, ARRAY, None, ann.ndim, T.Access(ann.access),
                                            ann.name)
        elif isinstance(ann, dtypes.DType) or ann in (int, float, bool) or (
                isinstance(ann, type) and issubclass(ann, np.generic)):
            dtype, param = ann, Param(name, SCALAR)
        else:
            raise CompileError(f"annotation {ann!r} is not a parameter kind", kernel=kernel,
                               param=name, help="use a dtype (fl.f32), fl.Slice[T], "
                                                "fl.DisjointSlice[T], fl.Array[T, n] or "
                                                "fl.DisjointArray[T, n]")
        try:
            if dtype is None or isinstance(dtype, TypeVar):
                raise TypeError("generic")
            out.append(replace(param, dtype=dtypes.coerce(dtype)))
        except TypeError:
            raise CompileError(f"{param.annotation() if param.kind is ARRAY else ann!r} has no "
                               f"concrete dtype: a foreign entry has one fixed signature",
                               kernel=kernel, param=name,
                               help="name the dtype, e.g. fl.Slice[fl.f32]") from None
    return out


# describing arguments -------------------------------------------------------------------------

def is_scalar(value) -> bool:
    """Whether a call's argument is a scalar: a Python or NumPy number or bool."""
    return isinstance(value, (int, float, np.generic))


def scalar_info(value, track: str) -> ArgInfo:
    """A call's scalar argument described: NumPy scalars and bools have their own dtype; a
    Python int or float is *weak*: i64 / f64 in a SIMT kernel, and in a tile kernel f32 and i32
    (i64 when it does not fit), as in Triton, so that ``t * 2.0`` keeps an f32 tile in f32."""
    if isinstance(value, (bool, np.generic)):
        return ArgInfo(dtypes.of_python_scalar(value))
    if track == "tile":
        if isinstance(value, float):
            return ArgInfo(dtypes.f32, weak=True)
        return ArgInfo(dtypes.i32 if -(1 << 31) <= value < (1 << 31) else dtypes.i64, weak=True)
    return ArgInfo(dtypes.of_python_scalar(value), weak=True)


class Unspecified(Exception):
    """``--signature`` leaves a parameter's dtype, or an Out's tile shape, open."""


GUESSED_LAYOUT = 16  # the CLI's tensors: 16-byte aligned, extents multiples of 16, contiguous


def signature_infos(params: list[Param], given: dict) -> list[ArgInfo]:
    """The runtime parameters described by the command line: ``given`` maps a name to
    ``(dtype or None, ndim or None, tile shape or None)``; the rest comes from the annotations. A
    SIMT array is contiguous; a tile tensor is contiguous, 16-byte aligned and has extents that are
    multiples of 16 (the layout facts a GPU call usually finds). A parameter whose dtype is a
    TypeVar that another parameter given binds may be left out. Raises Unspecified."""
    bound = {p.dtype: given[p.name][0] for p in reversed(params)   # a None dtype binds none
             if isinstance(p.dtype, TypeVar) and given.get(p.name, (None,))[0] is not None}
    out = []
    for p in params:
        if p.kind is CONST:
            continue
        dt, ndim, tile = given.get(p.name, (None, None, None))
        dt = dt or bound.get(p.dtype, p.dtype)
        if p.kind is ANY and p.name not in given:
            raise Unspecified(f"parameter '{p.name}' has no annotation; give --signature "
                              f"{p.name}=f32 (or f32:1 for an array)")
        if not isinstance(dt, dtypes.DType):
            raise Unspecified(f"parameter '{p.name}' is generic; give --signature {p.name}=f32")
        if p.kind is SCALAR or (p.kind is ANY and ndim is None):
            out.append(ArgInfo(dt))
        elif p.kind is ARRAY or p.kind is ANY:
            out.append(ArgInfo(dt, ndim or p.ndim))
        else:
            tile = tile or p.tile_shape
            if p.kind is OUT and not tile:
                raise Unspecified(f"give the rank and tile shape of '{p.name}': --signature "
                                  f"{p.name}={dt.name}:NDIM/TILE, e.g. {p.name}={dt.name}:2/64x64"
                                  f" for a 2-d output in 64x64 tiles")
            ndim = ndim or (len(tile) if tile else 1)
            g = GUESSED_LAYOUT
            out.append(ArgInfo(dt, ndim, tile_shape=tile if p.kind is OUT else None,
                               layout=T.Layout(g, (g,) * ndim, (g,) * (ndim - 1) + (1,), True)))
    return out


# specialising ---------------------------------------------------------------------------------

def specialise(kernel: str, params: list[Param], infos: list[ArgInfo]) -> tuple[T.Type, ...]:
    """The IR types of the runtime parameters ``params`` (CONST ones left out) for the
    arguments ``infos``: ``ir.types.Scalar`` / ``Array`` (SIMT) / ``TensorView`` (tile).

    Raises ArgumentTypeError (a wrong number of arguments, a scalar for an array or the reverse,
    a rank or dtype that disagrees with the annotation or a TypeVar bound before) and
    ContractError (an Out's partition: tile rank, static tile shape, power-of-two extents)."""
    arity(kernel, params, len(infos))
    bound: dict[TypeVar, tuple[dtypes.DType, str]] = {}
    out: list = [None] * len(params)
    # weak Python scalars go last so that a TypeVar is bound by the arrays first
    for i in sorted(range(len(params)), key=lambda i: infos[i].weak):
        p, info = params[i], infos[i]
        kind = p.kind
        if kind is ANY:
            kind = SCALAR if info.ndim is None else ARRAY
        if kind is SCALAR:
            if info.ndim is not None:
                _fail(kernel, p, f"expects a scalar, got a {info.ndim}-d array")
        elif info.ndim is None:
            _fail(kernel, p, f"expects {'an array' if kind is ARRAY else 'a tensor'} "
                             f"({p.annotation()}), got a scalar")
        elif kind is ARRAY and p.ndim is not None and info.ndim != p.ndim:
            _fail(kernel, p, f"expects a {p.ndim}-d array, got {info.ndim}-d")
        dtype = _bind(kernel, p, kind, info, bound)
        if kind is SCALAR:
            out[i] = T.Scalar(dtype)
        elif kind is ARRAY:
            out[i] = T.Array(dtype, info.ndim, p.access or T.Access.READ, info.contiguous)
        else:
            if kind is OUT:
                _check_partition(kernel, p, info)
            out[i] = T.TensorView(dtype, info.ndim, T.Role(kind.value),
                                  info.tile_shape if kind is OUT else None, info.layout,
                                  info.schedule if kind is OUT else None)
    return tuple(out)


def arity(kernel: str, params: list[Param], given: int) -> None:
    """Refuse (ArgumentTypeError) a call with ``given`` arguments for ``params``."""
    if given != len(params):
        raise ArgumentTypeError(f"takes {len(params)} arguments "
                                f"({', '.join(p.name for p in params)}), got {given}",
                                kernel=kernel)


def const_key(value):
    """A key that tells compile-time constants apart where ``==`` does not: 0.0 from -0.0 (a
    kernel dividing by one gives +inf or -inf), 1 from 1.0 and True (the compiled code differs
    by type), also inside tuples and lists; floats by their bits (a NaN equals itself)."""
    kind = type(value)
    if isinstance(value, (float, np.floating)):
        return kind, np.asarray(value).tobytes()
    if kind is tuple or kind is list:
        return kind, tuple(const_key(v) for v in value)
    return kind, value


def const_keys(constants: dict) -> tuple:
    """``constants`` (name -> value) as a key of the compiled specialisations (``const_key``)."""
    return tuple(sorted((name, const_key(v)) for name, v in constants.items()))


def const_value(kernel: str, p: Param, value):
    """The value of CONST parameter ``p``, of the Python type its annotation names when that is
    int, float or bool (a bool is not an int here). Raises ArgumentTypeError."""
    want = p.dtype
    if want in (int, float, bool) and not isinstance(value, want) or \
            (want is int and isinstance(value, bool)):
        raise ArgumentTypeError(f"expects a compile-time {getattr(want, '__name__', want)}, "
                                f"got {value!r}", kernel=kernel, param=p.name)
    return value


def _fail(kernel: str, p: Param, message: str, help: str | None = None):
    raise ArgumentTypeError(message, kernel=kernel, param=p.name, help=help)


def _bind(kernel: str, p: Param, kind: Kind, info: ArgInfo, bound: dict) -> dtypes.DType:
    """The dtype of ``p`` for argument ``info``, binding a TypeVar in ``bound``."""
    want, dtype = p.dtype, info.dtype
    if isinstance(want, TypeVar):
        if want in bound and info.weak:
            return bound[want][0]
        if want in bound and bound[want][0] is not dtype:
            other_dtype, other = bound[want]
            _fail(kernel, p, f"has dtype {dtype}, but '{other}' already bound {want.__name__} "
                             f"to {other_dtype}")
        bound.setdefault(want, (dtype, p.name))
        return dtype
    if want is None or want is dtype:
        return dtype
    if kind is SCALAR:
        return want  # a scalar converts to its declared dtype
    _fail(kernel, p, f"expects dtype {want}, got {dtype}", help={
        ARRAY: f"convert the array first, for example fl.asarray(x, fl.{want})",
        IN: f"convert it: fl.asarray({p.name}, fl.{want})",
        ATOMIC: f"convert it: fl.asarray({p.name}, fl.{want})",
        OUT: f"partition a tensor of dtype {want}, e.g. fl.empty(shape, fl.{want})"
             f".partition(tile)"}[kind])


def _check_partition(kernel: str, p: Param, info: ArgInfo) -> None:
    tile = info.tile_shape
    if len(tile) != info.ndim:
        raise ContractError(f"a {info.ndim}-d tensor partitioned into {len(tile)}-d tiles",
                            kernel=kernel, param=p.name)
    if p.tile_shape is not None and p.tile_shape != tile:
        raise ContractError(f"the partition's tile shape {tile} disagrees with the "
                            f"kernel's static tile shape {p.tile_shape}",
                            kernel=kernel, param=p.name,
                            help=f"partition it with t.partition({p.tile_shape})")
    if any(n & (n - 1) for n in tile):
        raise ContractError(f"tile shape {tile} has an extent that is not a power of two",
                            kernel=kernel, param=p.name,
                            help="Tile IR tiles have power-of-two extents; the edge tiles of a "
                                 "tensor may be partial, so any tensor shape works")


def bind(kernel: str, params: list[Param], args: tuple, kwargs: dict) -> list:
    """One value per parameter from a call's positional and keyword arguments, CONST defaults
    filling the gaps. Raises ArgumentTypeError."""
    names = [p.name for p in params]
    if len(args) > len(params):
        arity(kernel, params, len(args))
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound or k not in names:
            raise ArgumentTypeError(f"unexpected or repeated argument '{k}'", kernel=kernel,
                                    help=f"parameters: {', '.join(names)}")
        bound[k] = v
    out = []
    for p in params:
        if p.name in bound:
            out.append(bound[p.name])
        elif p.default is not NO_DEFAULT:
            out.append(p.default)
        else:
            raise ArgumentTypeError(f"missing argument '{p.name}'", kernel=kernel)
    return out
