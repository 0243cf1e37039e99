"""LLVM rules for warp ops: ``shfl.sync``, ``vote.sync`` and ``redux.sync`` through NVVM intrinsics.

A shuffle moves 32 bits (``llvm.nvvm.shfl.sync.{idx,down,up,bfly}.i32``; its ``c`` operand is
CUDA's ``((32 - width) << 8) | clamp``, clamp 31, 0 for up): narrower values are widened to i32
and back, 64-bit values travel as two halves. Votes are ``llvm.nvvm.vote.{ballot,any,all}.sync``.
Reductions of integers up to 32 bits are one ``redux.sync`` (sm_80+, which every fearless
target is); other types reduce with shuffles: the butterfly ``v = v op shfl.bfly(v, k)`` for
k = 16 .. 1 with the full mask, else a left fold over the 32 lanes that keeps the lanes of the
mask, the order the cpu backend (``backends/cpu/warp.py``) uses too.
"""
from __future__ import annotations

from llvmlite import ir

from fearless.backends.llvm import nvvm
from fearless.backends.llvm.nvvm import F32, I1, I16, I32, I64, llvm_type
from fearless.ir.opdef import Op

_REDUX = {("sum", True): "add", ("sum", False): "add", ("min", True): "min",
          ("min", False): "umin", ("max", True): "max", ("max", False): "umax"}


def _shfl32(b, mode: str, mask, value, lane, width: int):
    fn = nvvm.intrinsic(b.module, f"llvm.nvvm.shfl.sync.{mode}.i32", I32, [I32] * 4)
    c = ir.Constant(I32, ((32 - width) << 8) | (0 if mode == "up" else 0x1F))
    return b.call(fn, [mask, value, lane, c])


def shuffle(b, d, mode: str, mask, value, lane, width: int = 32):
    """Shuffle a value of dtype ``d`` (any scalar) as one or two 32-bit shuffles."""
    if d.bits == 64:
        bits = b.bitcast(value, I64) if d.is_float else value
        lo = _shfl32(b, mode, mask, b.trunc(bits, I32), lane, width)
        hi = _shfl32(b, mode, mask, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), lane,
                     width)
        out = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
        return b.bitcast(out, llvm_type(d)) if d.is_float else out
    if d.is_float:
        raw = b.bitcast(value, I32 if d.bits == 32 else I16)
        word = raw if d.bits == 32 else b.zext(raw, I32)
        out = _shfl32(b, mode, mask, word, lane, width)
        return b.bitcast(out if d.bits == 32 else b.trunc(out, I16), llvm_type(d))
    if d.bits == 32:
        return _shfl32(b, mode, mask, value, lane, width)
    out = _shfl32(b, mode, mask, b.zext(value, I32), lane, width)
    return b.trunc(out, I1 if d.is_bool else llvm_type(d))


def _shuffle(low, op):
    value, lane, mask = (low.v(v) for v in op.operands)
    d = op.result.type.dtype
    low.set(op, shuffle(low.b, d, op.attrs["mode"], mask, value, lane, op.attrs["width"]))


def _vote(low, op):
    pred, mask = (low.v(v) for v in op.operands)
    mode = op.attrs["mode"]
    fn = nvvm.intrinsic(low.b.module, f"llvm.nvvm.vote.{mode}.sync",
                        I32 if mode == "ballot" else I1, [I32, I1])
    low.set(op, low.b.call(fn, [mask, pred]))


def _combine(b, kind: str, d, x, y):
    """``x op y`` in the work type of dtype ``d`` (floats: f32 for 16-bit types)."""
    if d.is_float:
        if kind == "sum":
            return b.fadd(x, y)
        name = f"llvm.{'minnum' if kind == 'min' else 'maxnum'}.{'f64' if d.bits == 64 else 'f32'}"
        fn = nvvm.intrinsic(b.module, name, x.type, [x.type, x.type])
        return b.call(fn, [x, y])
    if kind == "sum":
        return b.add(x, y)
    cmp = (b.icmp_signed if d.is_signed else b.icmp_unsigned)("<" if kind == "min" else ">", x, y)
    return b.select(cmp, x, y)


def _reduce(low, op):
    b = low.b
    value, mask = (low.v(v) for v in op.operands)
    d = op.result.type.dtype
    kind = op.attrs["op"]
    if d.is_int and d.bits <= 32:
        wide = value if d.bits == 32 else (b.sext if d.is_signed else b.zext)(value, I32)
        fn = nvvm.intrinsic(b.module, f"llvm.nvvm.redux.sync.{_REDUX[kind, d.is_signed]}", I32,
                            [I32, I32])
        out = b.call(fn, [wide, mask])
        low.set(op, out if d.bits == 32 else b.trunc(out, llvm_type(d)))
        return
    work_d = d
    if d.is_float and d.bits == 16:
        from fearless.dtypes import f32
        value, work_d = b.fpext(value, F32), f32
    if op.attrs.get("full"):
        acc = value
        for k in (16, 8, 4, 2, 1):
            other = shuffle(b, work_d, "bfly", mask, acc, ir.Constant(I32, k))
            acc = _combine(b, kind, work_d, acc, other)
    else:
        acc = ir.Constant(value.type, None)
        started = ir.Constant(I1, 0)
        for k in range(32):
            v = shuffle(b, work_d, "idx", mask, value, ir.Constant(I32, k))
            member = b.trunc(b.lshr(mask, ir.Constant(I32, k)), I1)
            folded = b.select(started, _combine(b, kind, work_d, acc, v), v)
            acc = b.select(member, folded, acc)
            started = b.or_(started, member)
    low.set(op, b.fptrunc(acc, llvm_type(d)) if work_d is not d else acc)


RULES = {
    Op.WARP_SHUFFLE: _shuffle,
    Op.WARP_VOTE: _vote,
    Op.WARP_REDUCE: _reduce,
}
