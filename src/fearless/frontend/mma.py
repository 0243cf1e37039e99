"""Calls of ``fl.mma.*`` and ``fl.async_*`` inside kernels -> ``warp.mma``, ``warp.ldmatrix``,
``mma.pack`` and ``mem.async_*`` IR ops (see ``fearless.simt.mma`` and ``.asynccopy``).

Like ``frontend/warps.py`` these handlers read the call node themselves (they take keywords):
``handler(gen, node, obj) -> frontend value``. Fragments are tuples of registers. Whether every
lane reaches an mma/ldmatrix is proved later by ``passes/warps.py``; the shared-memory discipline
of async copies and ldmatrix by ``passes/shared.py``.
"""
from __future__ import annotations

import ast

from fearless import dtypes
from fearless.frontend import warps
from fearless.frontend.emit import describe
from fearless.frontend.infer import Const, Static, TupleValue
from fearless.ir import types as T
from fearless.ir.opdef import Op
from fearless.ir.ops.mma import ACC, REG
from fearless.simt import asynccopy, mma


def _arguments(gen, node, name: str, names: tuple, required: int) -> dict:
    return warps.arguments(gen, node, name, names, required)


def _const(gen, node, value, name, allowed):
    if value is None:
        return None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        if value.value not in allowed:
            raise gen.error(value, f"{name}= must be one of {', '.join(map(repr, allowed))}")
        return value.value
    fv = gen.visit(value)
    if isinstance(fv, Static) and fv.obj in allowed:
        return fv.obj
    if not (isinstance(fv, Const) and fv.value in allowed
            and isinstance(fv.value, bool) == any(isinstance(a, bool) for a in allowed)):
        raise gen.error(value, f"{name}= must be one of {', '.join(map(repr, allowed))}")
    return fv.value


def _regs(gen, node, fv, count, ty, what):
    """A fragment: a tuple of ``count`` values of type ``ty`` (numbers are converted)."""
    if not (isinstance(fv, TupleValue) and len(fv.items) == count):
        raise gen.error(node, f"{what} is a tuple of {count} {ty} registers, not {describe(fv)}",
                        help="fragments come from fl.mma.ldmatrix, fl.mma.pack or a previous "
                             "fl.mma.sync_m16n8k16")
    out = []
    for item in fv.items:
        if isinstance(item, TupleValue):
            raise gen.error(node, f"{what} is a flat tuple of {count} {ty} registers")
        d = gen.emit.dtype_of(item)
        if ty == REG and (isinstance(d, str) or d != dtypes.u32):
            raise gen.error(node, f"{what} holds u32 registers (two packed 16-bit values "
                                  f"each), not {describe(item)}",
                            help="make registers with fl.mma.pack(lo, hi) or fl.mma.ldmatrix")
        out.append(gen.emit.implicit(item, ty, what))
    return out


def _warp_attrs(gen):
    return {"full": True, **gen.unsafe_attr()}


def _sync(gen, node, obj):
    args = _arguments(gen, node, "fl.mma.sync_m16n8k16", ("a", "b", "c", "dtype"), 3)
    ab = dtypes.f16
    if "dtype" in args:
        ab = _const(gen, node, args["dtype"], "dtype", (dtypes.f16, dtypes.bf16))
    a = _regs(gen, args["a"], gen.visit(args["a"]), 4, REG, "the A fragment")
    b = _regs(gen, args["b"], gen.visit(args["b"]), 2, REG, "the B fragment")
    c = _regs(gen, args["c"], gen.visit(args["c"]), 4, ACC, "the C fragment")
    op = gen.b.create(Op.WARP_MMA, [*a, *b, *c],
                      attrs={"shape": "m16n8k16", "ab": ab.name, **_warp_attrs(gen)})
    return TupleValue(tuple(op.results))


def _shared_array(gen, node, fv, what):
    if not (hasattr(fv, "type") and isinstance(fv.type, T.Array)
            and fv.type.access is T.Access.SHARED):
        raise gen.error(node, f"{what} must be a shared array (fl.shared.array), "
                              f"not {describe(fv)}")
    return fv


def _indices(gen, node, fv, ndim, what):
    items = fv.items if isinstance(fv, TupleValue) else (fv,)
    if len(items) != ndim:
        raise gen.error(node, f"{what} needs {ndim} indices (one per axis), got {len(items)}")
    out = []
    for item in items:
        if hasattr(item, "type") and isinstance(item.type, T.ThreadIndex):
            out.append(item)
            continue
        d = gen.emit.dtype_of(item)
        if isinstance(d, str) and d != "weak int" or not isinstance(d, str) and not d.is_int:
            raise gen.error(node, f"{what}: indices are integers, not {describe(item)}")
        out.append(gen.emit.scalar(item, T.INDEX.dtype))
    return out


def _ldmatrix(gen, node, obj):
    args = _arguments(gen, node, "fl.mma.ldmatrix", ("shared", "index", "count", "trans"), 2)
    arr = _shared_array(gen, args["shared"], gen.visit(args["shared"]), "ldmatrix's source")
    if arr.type.dtype.bits != 16:
        raise gen.error(args["shared"], f"ldmatrix loads 16-bit elements, and "
                                        f"'{arr.hint}' holds {arr.type.dtype}")
    count = _const(gen, node, args.get("count"), "count", (1, 2, 4)) or 4
    trans = _const(gen, node, args.get("trans"), "trans", (False, True)) or False
    idx = _indices(gen, args["index"], gen.visit(args["index"]), arr.type.ndim, "ldmatrix")
    op = gen.b.create(Op.WARP_LDMATRIX, [arr, *idx],
                      attrs={"count": count, "trans": bool(trans), **_warp_attrs(gen),
                             "index_spans": (gen.span(args["index"]),)})
    return TupleValue(tuple(op.results))


def _pack(gen, node, obj):
    args = _arguments(gen, node, "fl.mma.pack", ("lo", "hi"), 2)
    lo, hi = gen.visit(args["lo"]), gen.visit(args["hi"])
    d = [gen.emit.dtype_of(v) for v in (lo, hi)]
    typed = [x for x in d if not isinstance(x, str)]
    dt = typed[0] if typed else dtypes.f16
    if dt.name not in ("f16", "bf16") or any(x != dt for x in typed):
        raise gen.error(node, "fl.mma.pack() packs two f16 or two bf16 values",
                        help="convert first: fl.mma.pack(fl.f16(x), fl.f16(y))")
    vals = [gen.emit.implicit(v, T.Scalar(dt), "fl.mma.pack()") for v in (lo, hi)]
    return gen.b.create(Op.MMA_PACK, vals).result


def _async_copy(gen, node, obj):
    args = _arguments(gen, node, "fl.async_copy",
                      ("dst", "slot", "src", "index", "size", "cache"), 4)
    dst = _shared_array(gen, args["dst"], gen.visit(args["dst"]), "the destination")
    src = gen.visit(args["src"])
    if not (hasattr(src, "type") and isinstance(src.type, T.Array)
            and src.type.access is T.Access.READ):
        raise gen.error(args["src"], f"fl.async_copy() copies from a read-only array parameter "
                                     f"(fl.Slice / fl.Array), not {describe(src)}")
    if src.type.dtype != dst.type.dtype:
        raise gen.error(node, f"fl.async_copy() copies {src.type.dtype} into a shared array of "
                              f"{dst.type.dtype}")
    if not src.type.contiguous:
        raise gen.error(args["src"], "fl.async_copy() needs a contiguous source (its last axis "
                                     "is copied several elements at a time)",
                        help="pass a C-contiguous array (np.ascontiguousarray on the host)")
    size = _const(gen, node, args.get("size"), "size", (4, 8, 16)) or 16
    d = dst.type.dtype
    if size % d.itemsize:
        raise gen.error(node, f"size={size} is not a whole number of {d} elements")
    cache = _const(gen, node, args.get("cache"), "cache", ("ca", "cg")) or \
        ("cg" if size == 16 else "ca")
    if cache == "cg" and size != 16:
        raise gen.error(args["cache"], "cache='cg' copies 16 bytes at a time (size=16)")
    slot = _indices(gen, args["slot"], gen.visit(args["slot"]), dst.type.ndim, "the slot")
    index = _indices(gen, args["index"], gen.visit(args["index"]), src.type.ndim, "the index")
    attrs = {"size": size, "cache": cache, "ndst": dst.type.ndim, **gen.unsafe_attr(),
             "index_spans": (gen.span(args["slot"]), gen.span(args["index"]))}
    gen.b.create(Op.MEM_ASYNC_COPY, [dst, *slot, src, *index], attrs=attrs)
    return Static(None)


def _async_commit(gen, node, obj):
    _arguments(gen, node, "fl.async_commit", (), 0)
    gen.b.create(Op.MEM_ASYNC_COMMIT, [])
    return Static(None)


def _async_wait(gen, node, obj):
    args = _arguments(gen, node, "fl.async_wait", ("n",), 0)
    n = 0
    if "n" in args:
        n = _const(gen, node, args["n"], "n", tuple(range(8)))
    gen.b.create(Op.MEM_ASYNC_WAIT, [], attrs={"n": n})
    return Static(None)


HANDLERS = {mma.sync_m16n8k16: _sync, mma.ldmatrix: _ldmatrix, mma.pack: _pack,
            asynccopy.async_copy: _async_copy, asynccopy.async_commit: _async_commit,
            asynccopy.async_wait: _async_wait}
