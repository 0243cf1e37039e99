"""Calls and attributes the kernel language knows: API stubs, builtins, math, casts.

``from_python`` turns a value found in the kernel's namespace (a closure or module global) into a
frontend value, freezing numbers as constants. ``call`` dispatches a call on its callee: a dtype
(a cast) or an entry of ``HANDLERS`` (the generator inlines device functions: ``funcs.py``).
"""
from __future__ import annotations

import ast
import builtins
import difflib
import math
import types
from typing import TYPE_CHECKING

import numpy as np

from fearless import dtypes
from fearless import math as fl_math
from fearless.frontend import mma, prints, warps
from fearless.frontend.emit import describe
from fearless.frontend.infer import Const, Static, TupleValue, TypingError
from fearless.ir import types as T
from fearless.ir.core import Value
from fearless.ir.opdef import REGISTRY, Op
from fearless.simt import safety, shared, thread

if TYPE_CHECKING:
    from fearless.frontend.astgen import FunctionGen

def from_python(value):
    """A frontend value for a Python object the kernel refers to. Raises TypingError."""
    if isinstance(value, (bool, int, float)):
        return Const(value)
    if isinstance(value, np.generic):
        try:
            return Const(value.item(), dtypes.from_numpy(value.dtype))
        except TypeError as exc:
            raise TypingError(str(exc)) from None
    if isinstance(value, tuple):
        return TupleValue(tuple(from_python(v) for v in value))
    if value is None or isinstance(value, (types.ModuleType, types.FunctionType,
                                           types.BuiltinFunctionType, type, np.ufunc,
                                           dtypes.DType)) or callable(value):
        return Static(value)
    raise TypingError(f"a {type(value).__name__} object cannot be used inside a kernel",
                      help="kernels can refer to numbers, tuples, dtypes, modules and functions")


def as_dtype(fv) -> dtypes.DType | None:
    """The DType a frontend value names (``fl.f32``, ``np.float32``, ``float``...), or None."""
    if not isinstance(fv, Static):
        return None
    obj = fv.obj
    if isinstance(obj, dtypes.DType):
        return obj
    if obj in (int, float, bool) or (isinstance(obj, type) and issubclass(obj, np.generic)):
        try:
            return dtypes.coerce(obj)
        except TypeError:
            return None
    return None


def attribute(gen: "FunctionGen", value, attr: str, node):
    if isinstance(value, Value) and isinstance(value.type, T.Array):
        return _array_attribute(gen, value, attr, node)
    if isinstance(value, Static) and value.obj is not None:
        try:
            found = getattr(value.obj, attr)
        except AttributeError:
            close = difflib.get_close_matches(attr, [n for n in dir(value.obj)
                                                     if not n.startswith("_")], n=3, cutoff=0.4)
            raise gen.error(node, f"{describe(value)} has no attribute '{attr}'",
                            help="did you mean " + " or ".join(f"'{c}'" for c in sorted(close))
                            + "?" if close else None) from None
        return gen.from_python(found, node)
    raise gen.error(node, f"{describe(value)} has no attribute '{attr}' in a kernel")


class ArrayMethod:
    """``arr.add`` and the other atomic methods of an AtomicSlice or a shared array, bound to
    the array; called through ``call`` (the only kernel calls that take keywords)."""

    def __init__(self, array: Value, name: str):
        self.array, self.name = array, name
        self.__name__ = name


_ATOMIC_METHODS = {"add": "add", "sub": "sub", "min": "min", "max": "max", "and_": "and",
                   "or_": "or", "xor": "xor", "exchange": "exchange",
                   "compare_exchange": "cas"}


def _array_attribute(gen, array: Value, attr: str, node):
    if attr in _ATOMIC_METHODS and array.type.access in (T.Access.ATOMIC, T.Access.SHARED):
        return Static(ArrayMethod(array, attr))
    if attr == "shape":
        return TupleValue(tuple(gen.b.create(Op.MEM_DIM, [array], attrs={"axis": k}).result
                                for k in range(array.type.ndim)))
    if attr == "ndim":
        return Const(array.type.ndim)
    if attr == "dtype":
        return Static(array.type.dtype)
    if attr == "size":
        size = None
        for dim in _array_attribute(gen, array, "shape", node).items:
            size = dim if size is None else gen.emit.binary(Op.MUL, size, dim)
        return size
    raise gen.error(node, f"arrays have no attribute '{attr}' in kernels",
                    help="kernels can use .shape, .ndim, .dtype and .size of an array")


def call(gen: "FunctionGen", func, node):
    if isinstance(func, Static) and isinstance(func.obj, ArrayMethod):
        return _atomic(gen, func.obj, node)
    keyword_handler = _keyword_handler(func)
    if keyword_handler is not None:
        return keyword_handler(gen, node, func.obj)
    if node.keywords:
        raise gen.error(node, "keyword arguments are not supported in kernel calls")
    args = [gen.visit(a) for a in node.args]
    if not isinstance(func, Static):
        raise gen.error(node.func, f"{describe(func)} is not callable")
    obj = func.obj
    if getattr(obj, "__fearless_kernel__", False):
        raise gen.error(node.func, "a kernel cannot call another kernel",
                        help="decorate the callee with @fearless.func to inline it")
    # int(), float() and bool() are Python's (HANDLERS): of a literal they give a weak number
    dtype = None if any(obj is t for t in (int, float, bool)) else as_dtype(func)
    if dtype is not None:
        return _cast(gen, dtype, args, node)
    handler = _handler(obj)
    if handler is None:
        raise gen.error(node.func, f"{describe(func)} cannot be called inside a kernel")
    return handler(gen, args, node)


def _keyword_handler(func):
    """The handler of a call that reads its own arguments and keywords (``fl.warp.*``)."""
    if not isinstance(func, Static):
        return None
    try:
        if func.obj is builtins.print:
            return prints.handle
        return warps.HANDLERS.get(func.obj) or mma.HANDLERS.get(func.obj)
    except TypeError:  # unhashable callee
        return None


def _handler(obj):
    try:
        found = HANDLERS.get(obj)
    except TypeError:  # unhashable callee
        return None
    if found is not None:
        return found
    op = _MATH_BY_OBJECT.get(id(obj))
    if op is not None:
        return lambda gen, args, node: _math(gen, op, args, node)
    return None


def _arity(gen, args, node, *counts):
    if len(args) not in counts:
        raise gen.error(node, f"takes {' or '.join(map(str, counts))} arguments, got {len(args)}")


def _cast(gen, dtype, args, node):
    _arity(gen, args, node, 1)
    (x,) = args
    if isinstance(x, Const):  # folded by the rules of a cast at run time
        return Const(dtypes.cast(x.value, dtype).item(), dtype)
    return gen.emit.scalar(x, dtype)


def _math(gen, op, args, node):
    _arity(gen, args, node, REGISTRY[op].operands)
    return gen.emit.math(op, args)


def _index_1d(gen, args, node):
    _arity(gen, args, node, 0)
    return gen.b.create(Op.SIMT_THREAD_INDEX, [], attrs={"space": 1, "axis": 0}).result


def _index_2d(gen, args, node):
    _arity(gen, args, node, 0)
    return TupleValue(tuple(gen.b.create(Op.SIMT_THREAD_INDEX, [], attrs={"space": 2, "axis": axis})
                            .result for axis in (0, 1)))


def _index_3d(gen, args, node):
    _arity(gen, args, node, 0)
    return TupleValue(tuple(gen.b.create(Op.SIMT_THREAD_INDEX, [], attrs={"space": 3, "axis": axis})
                            .result for axis in (0, 1, 2)))


def _index_in_block(gen, args, node):
    _arity(gen, args, node, 0)
    return gen.b.create(Op.SIMT_THREAD_INDEX, [],
                        attrs={"space": 1, "axis": 0, "block": True}).result


def _index_in_block_2d(gen, args, node):
    _arity(gen, args, node, 0)
    return TupleValue(tuple(
        gen.b.create(Op.SIMT_THREAD_INDEX, [], attrs={"space": 2, "axis": axis, "block": True})
        .result for axis in (0, 1)))


def _axis(gen, args, node) -> int:
    _arity(gen, args, node, 0, 1)
    if args and not (isinstance(args[0], Const) and args[0].value in (0, 1)
                     and not isinstance(args[0].value, bool)):
        raise gen.error(node.args[0], "the axis must be the constant 0 (x) or 1 (y)")
    return args[0].value if args else 0


def _special(reg):
    def handler(gen, args, node):
        axis = _axis(gen, args, node)
        return gen.b.create(Op.SIMT_SPECIAL, [], attrs={"reg": reg, "axis": axis}).result
    return handler


def _grid_size(gen, args, node):
    """``grid_dim(axis) * block_dim(axis)``: the form the grid-stride proof recognises
    (``analysis/strided.py``), whether written out or through this call."""
    axis = _axis(gen, args, node)
    grid, block = (gen.b.create(Op.SIMT_SPECIAL, [], attrs={"reg": reg, "axis": axis}).result
                   for reg in ("grid_dim", "block_dim"))
    return gen.b.create(Op.MUL, [grid, block]).result


def _lane(gen, args, node):
    _arity(gen, args, node, 0)
    return gen.b.create(Op.SIMT_SPECIAL, [], attrs={"reg": "lane", "axis": 0}).result


def _sync_threads(gen, args, node):
    _arity(gen, args, node, 0)
    gen.b.create(Op.SIMT_BARRIER, [], attrs=gen.unsafe_attr())
    return Static(None)


def _shared_array(gen, args, node):
    _arity(gen, args, node, 2)
    shape, dtype = args[0], as_dtype(args[1])
    items = shape.items if isinstance(shape, TupleValue) else (shape,)
    if not items or not all(isinstance(e, Const) and isinstance(e.value, int)
                            and not isinstance(e.value, bool) and e.value > 0 for e in items):
        raise gen.error(node.args[0], "a shared array's shape must be positive constant ints",
                        help="use fl.shared.dynamic(dtype) for a size chosen at launch")
    if dtype is None:
        raise gen.error(node.args[1], f"{describe(args[1])} is not a dtype")
    shape = tuple(e.value for e in items)
    return gen.b.create(Op.SIMT_SHARED_ALLOC, [], [T.Array(dtype, len(shape), T.Access.SHARED,
                                                            True)], {"shape": shape}).result


def _shared_dynamic(gen, args, node):
    _arity(gen, args, node, 1)
    dtype = as_dtype(args[0])
    if dtype is None:
        raise gen.error(node.args[0], f"{describe(args[0])} is not a dtype")
    return gen.b.create(Op.SIMT_SHARED_ALLOC, [], [T.Array(dtype, 1, T.Access.SHARED, True)],
                        {"shape": None}).result


_ATOMIC_INT = {"i32", "u32", "i64", "u64"}
_ATOMIC_FLOAT_OPS = {"add": {"f16", "bf16", "f32", "f64"}, "sub": {"f16", "bf16", "f32", "f64"},
                     "exchange": {"f32", "f64"}, "cas": {"f32", "f64"}}


def _keyword(gen, kw, allowed):
    v = kw.value
    if not (isinstance(v, ast.Constant) and v.value in allowed):
        raise gen.error(v, f"{kw.arg}= must be one of {', '.join(map(repr, allowed))}")
    return v.value


def _atomic(gen, method: ArrayMethod, node):
    from fearless.ir.ops.memory import ORDERS, SCOPES
    array, op = method.array, _ATOMIC_METHODS[method.name]
    shared_array = array.type.access is T.Access.SHARED
    attrs = {"op": op, "scope": "block" if shared_array else "device", "order": "relaxed"}
    for kw in node.keywords:
        if kw.arg not in ("scope", "order"):
            raise gen.error(kw.value if kw.arg else node,
                            f"atomic methods take the keywords scope= and order=, not {kw.arg}=")
        attrs[kw.arg] = _keyword(gen, kw, SCOPES if kw.arg == "scope" else ORDERS)
    d = array.type.dtype
    if d.name not in _ATOMIC_INT and d.name not in _ATOMIC_FLOAT_OPS.get(op, ()):
        kinds = "32- and 64-bit integers" + (
            f" and {', '.join(sorted(_ATOMIC_FLOAT_OPS[op]))}" if op in _ATOMIC_FLOAT_OPS else "")
        raise gen.error(node.func, f"atomic {method.name} on {d} elements is not supported; "
                                   f"it takes {kinds}")
    if array.type.ndim != 1:
        raise gen.error(node.func, "atomic methods take 1-d arrays")
    args = [gen.visit(a) for a in node.args]
    _arity(gen, args, node, 3 if op == "cas" else 2)
    index = gen.emit.scalar(args[0], T.INDEX.dtype)
    values = [gen.emit.implicit(v, T.Scalar(d), f"the atomic {method.name}") for v in args[1:]]
    attrs.update(gen.unsafe_attr())
    attrs["index_spans"] = (gen.span(node.args[0]),)
    return gen.b.create(Op.MEM_ATOMIC, [array, index, *values], attrs=attrs).result


def _len(gen, args, node):
    _arity(gen, args, node, 1)
    (x,) = args
    if isinstance(x, TupleValue):
        return Const(len(x.items))
    if isinstance(x, Value) and isinstance(x.type, T.Array):
        return gen.b.create(Op.MEM_DIM, [x], attrs={"axis": 0}).result
    raise gen.error(node, f"len() of {describe(x)}")


def _minmax(op: Op):
    def handler(gen, args, node):
        if len(args) < 2:
            raise gen.error(node, f"{op.base}() inside kernels takes two or more numbers")
        result = args[0]
        for a in args[1:]:
            result = gen.emit.binary(op, result, a)
        return result
    return handler


def _abs(gen, args, node):
    _arity(gen, args, node, 1)
    return gen.emit.unary(Op.ABS, args[0])


def _python_cast(dtype):
    def handler(gen, args, node):
        _arity(gen, args, node, 1)
        if dtype.is_bool:
            return gen.emit.truth(args[0])
        if isinstance(args[0], Const):  # Python's own int()/float() of a literal: weak
            value = args[0].value
            if dtype.is_int and not math.isfinite(value):
                raise TypingError(f"int({value!r}) has no value", help="Python raises here too")
            return Const((int if dtype.is_int else float)(value))
        return gen.emit.scalar(args[0], dtype)
    return handler


def _round(gen, args, node):
    """``round(x)``: the nearest integer, ties to even, as Python's: an i64 (a float through
    ``np.rint``, then ``int()``'s conversion, which saturates where Python raises)."""
    if len(args) != 1:
        raise gen.error(node, "round(x, ndigits) is not supported in kernels",
                        help="round(x) gives the nearest integer; scale x first for digits")
    x = args[0]
    if isinstance(x, Const):  # a literal: Python's own round
        if isinstance(x.value, float) and not math.isfinite(x.value):
            raise TypingError(f"round({x.value!r}) has no value", help="Python raises here too")
        return Const(round(x.value))
    if gen.emit.dtype_of(x).is_float:
        x = gen.emit.math(Op.RINT, [x])
    return gen.emit.scalar(x, dtypes.i64)


def _where(gen, args, node):
    _arity(gen, args, node, 3)
    cond = gen.emit.truth(args[0])
    if isinstance(cond, Const):  # NumPy's result type still: both choices promoted
        return gen.emit.scalar(args[1] if cond.value else args[2],
                               gen.emit.common(args[1], args[2], Op.SELECT))
    return gen.emit.select(cond, args[1], args[2])


def _tuple(gen, args, node):
    _arity(gen, args, node, 1)
    if not isinstance(args[0], TupleValue):
        raise gen.error(node, f"tuple() in a kernel takes a tuple or a generator expression "
                              f"over constant ranges, not {describe(args[0])}")
    return args[0]


def _refuse(message, help=None):
    def handler(gen, args, node):
        raise gen.error(node, message, help)
    return handler


HANDLERS = {
    thread.index_1d: _index_1d,
    thread.index_2d: _index_2d,
    thread.index_3d: _index_3d,
    thread.index_in_block: _index_in_block,
    thread.index_in_block_2d: _index_in_block_2d,
    thread.block_index: _special("block_index"),
    thread.block_dim: _special("block_dim"),
    thread.grid_dim: _special("grid_dim"),
    thread.grid_size: _grid_size,
    thread.thread_in_block: _special("thread_in_block"),
    thread.lane: _lane,
    thread.sync_threads: _sync_threads,
    shared.array: _shared_array,
    shared.dynamic: _shared_dynamic,
    safety.unsafe: _refuse("fl.unsafe() is used as `with fl.unsafe():` around statements"),
    builtins.len: _len,
    builtins.min: _minmax(Op.MIN),
    builtins.max: _minmax(Op.MAX),
    builtins.abs: _abs,
    builtins.round: _round,
    np.minimum: _minmax(Op.MIN),
    np.maximum: _minmax(Op.MAX),
    np.abs: _abs,
    np.where: _where,
    builtins.int: _python_cast(dtypes.i64),
    builtins.float: _python_cast(dtypes.f64),
    builtins.bool: _python_cast(dtypes.bool_),
    builtins.tuple: _tuple,
    builtins.range: _refuse("range() is only allowed as the iterable of a for loop"),
}

# id(function a kernel calls) -> its math op, from the OpDefs' user_names
_USER_MODULES = {"math": math, "np": np, "fl.math": fl_math}
_MATH_BY_OBJECT = {
    id(getattr(_USER_MODULES[module], attr)): op
    for op, d in REGISTRY.items() for module, attr in d.user_names
    if hasattr(_USER_MODULES[module], attr)}
