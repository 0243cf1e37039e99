"""Calls of ``fl.warp.*`` inside kernels -> ``warp.*`` IR ops (see ``fearless.simt.warp``).

These are the kernel calls that take keywords (``mask=``, ``width=``), so each handler reads the
call node itself: ``handler(gen, node) -> frontend value``. An explicit mask other than the
constant ``fl.warp.FULL`` is refused outside ``with fl.unsafe():``; whether the lanes of a
full-mask op all reach it is proved later, by ``passes/warps.py``.
"""
from __future__ import annotations

from fearless import dtypes
from fearless.errors import SafetyError
from fearless.frontend.emit import describe
from fearless.frontend.infer import WEAK_FLOAT, Const
from fearless.ir import types as T
from fearless.ir.opdef import Op
from fearless.simt import warp

_SHUFFLES = {warp.shuffle: ("idx", "src_lane"), warp.shuffle_down: ("down", "delta"),
             warp.shuffle_up: ("up", "delta"), warp.shuffle_xor: ("bfly", "lane_mask")}
_VOTES = {warp.ballot: "ballot", warp.any: "any", warp.all: "all"}
_REDUCES = {warp.reduce_sum: "sum", warp.reduce_max: "max", warp.reduce_min: "min"}


def _arguments(gen, node, name: str, names: tuple, required: int) -> dict:
    return arguments(gen, node, f"fl.warp.{name}", names, required)


def arguments(gen, node, name: str, names: tuple, required: int) -> dict:
    """The call's arguments by parameter name (positional first, then keywords); ``name`` is
    the callee as the user wrote it (``fl.warp.shuffle``)."""
    if len(node.args) > len(names):
        raise gen.error(node, f"{name}() takes at most {len(names)} arguments "
                              f"({', '.join(names)})")
    out = {n: a for n, a in zip(names, node.args)}
    for kw in node.keywords:
        if kw.arg not in names or kw.arg in out:
            raise gen.error(kw.value if kw.arg else node,
                            f"{name}() has no keyword {kw.arg}=" if kw.arg not in names
                            else f"{name}() got {kw.arg} twice")
        out[kw.arg] = kw.value
    missing = [n for n in names[:required] if n not in out]
    if missing:
        raise gen.error(node, f"{name}() needs {', '.join(missing)}")
    return out


def _mask(gen, node, name: str, args: dict):
    """(the mask as a u32 Value, attrs): ``full`` when it is the constant FULL, ``explicit``
    when the call gives one; a partial mask needs ``with fl.unsafe():``."""
    given = args.get("mask")
    fv = Const(warp.FULL) if given is None else gen.visit(given)
    if isinstance(fv, Const):
        if isinstance(fv.value, bool) or not isinstance(fv.value, int) \
                or not 0 <= fv.value <= warp.FULL:
            raise gen.error(given, "a warp mask is a u32: bit k selects lane k")
        full = fv.value == warp.FULL
        value = gen.emit.constant(fv.value, dtypes.u32)
    else:
        d = gen.emit.dtype_of(fv)
        if isinstance(d, str) or not d.is_int:
            raise gen.error(given, f"a warp mask is a u32, not {describe(fv)}")
        full, value = False, gen.emit.scalar(fv, dtypes.u32)
    if not full and not gen.unsafe_depth:
        raise gen.error(given, f"fl.warp.{name}() with a mask other than fl.warp.FULL needs "
                               f"`with fl.unsafe():`: every lane of the mask must reach the call "
                               f"together, and the compiler cannot prove it",
                        help="leave the mask out (all 32 lanes), or wrap the call in "
                             "`with fl.unsafe():`", cls=SafetyError)
    return value, {"full": full, "explicit": given is not None, **gen.unsafe_attr()}


def _number(gen, node, name: str, fv):
    v = gen.emit.scalar(fv)
    if not isinstance(v.type, T.Scalar):
        raise gen.error(node, f"fl.warp.{name}() takes a number, not {describe(fv)}")
    return v


def _shuffle(gen, node, obj):
    mode, lane_name = _SHUFFLES[obj]
    name = obj.__name__.split(".")[-1]
    args = _arguments(gen, node, name, ("value", lane_name, "mask", "width"), 2)
    value = _number(gen, node, name, gen.visit(args["value"]))
    b = gen.visit(args[lane_name])
    d = gen.emit.dtype_of(b)
    if d == WEAK_FLOAT or (not isinstance(d, str) and not d.is_int):
        raise gen.error(args[lane_name], f"{lane_name} must be an integer")
    b = gen.emit.scalar(b, dtypes.u32)
    width = 32
    if "width" in args:
        w = gen.visit(args["width"])
        if not (isinstance(w, Const) and w.value in (1, 2, 4, 8, 16, 32)
                and not isinstance(w.value, bool)):
            raise gen.error(args["width"], "width= must be a constant power of two up to 32")
        width = w.value
    mask, attrs = _mask(gen, node, name, args)
    return gen.b.create(Op.WARP_SHUFFLE, [value, b, mask],
                        attrs={"mode": mode, "width": width, **attrs}).result


def _vote(gen, node, obj):
    mode = _VOTES[obj]
    args = _arguments(gen, node, mode, ("pred", "mask"), 1)
    pred = gen.emit.truth(gen.visit(args["pred"]))
    if isinstance(pred, Const):
        pred = gen.emit.constant(pred.value, dtypes.bool_)
    mask, attrs = _mask(gen, node, mode, args)
    return gen.b.create(Op.WARP_VOTE, [pred, mask], attrs={"mode": mode, **attrs}).result


def _reduce(gen, node, obj):
    op = _REDUCES[obj]
    name = f"reduce_{op}"
    args = _arguments(gen, node, name, ("value", "mask"), 1)
    value = _number(gen, node, name, gen.visit(args["value"]))
    if value.type.dtype.is_bool:
        raise gen.error(args["value"], f"fl.warp.{name}() takes a number, not a bool",
                        help="count true predicates with fl.warp.ballot(p) and a popcount, or "
                             "reduce fl.i32(p)")
    mask, attrs = _mask(gen, node, name, args)
    return gen.b.create(Op.WARP_REDUCE, [value, mask], attrs={"op": op, **attrs}).result


def _special(reg):
    def handler(gen, node, obj):
        if node.args or node.keywords:
            raise gen.error(node, f"fl.warp.{obj.__name__.split('.')[-1]}() takes no arguments")
        return gen.b.create(Op.SIMT_SPECIAL, [], attrs={"reg": reg, "axis": 0}).result
    return handler


HANDLERS = {warp.lane: _special("lane"), warp.index: _special("warp_index"),
            **{f: _shuffle for f in _SHUFFLES}, **{f: _vote for f in _VOTES},
            **{f: _reduce for f in _REDUCES}}
