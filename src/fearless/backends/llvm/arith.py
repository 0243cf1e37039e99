"""LLVM rules for the scalar ops: ``arith.*`` and ``math.*``.

Semantics are docs/semantics.md, which each op's ``eval`` (``ir/ops/arith.py``,
``ir/ops/math.py``) defines and the CPU backend runs: integer division and modulo floor like
Python and give 0 for a zero divisor; float ``//`` and ``%`` are Python's (through libdevice's
exact fmod; f16/bf16 in f32); shifts by the width or more give 0 (sign for signed right shifts);
float -> int casts saturate (``llvm.fpto[su]i.sat``, NaN -> 0); integer -> bf16 rounds once (LLVM
rounds through f32 on sm_80, twice); min/max of floats are IEEE 754-2019
minimumNumber/maximumNumber (``llvm.maximumnum``, PTX ``max``; min as the max of the negations:
ptxas miscompiles PTX ``min`` into a clamp). f16/bf16 math functions run in f32 and round
once. ``a * b + c`` may contract to one fma (nvcc's default).
"""
from __future__ import annotations

from llvmlite import ir

from fearless import dtypes
from fearless.backends.llvm.nvvm import F32, BFloatType, intrinsic, llvm_type
from fearless.ir.opdef import Op
from fearless.ir.ops.math import MATH, PREDICATES

_PRED = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FMA = ("contract",)  # a*b+c may become one fma, as with nvcc's default -fmad=true

# math op -> LLVM intrinsic (no libdevice needed); the predicates are compares; every other
# math function is libdevice's __nv_<op.base>[f], which takes the op's operands as they are
_INTRINSIC = {Op.SQRT: "llvm.sqrt", Op.FLOOR: "llvm.floor", Op.CEIL: "llvm.ceil",
              Op.TRUNC: "llvm.trunc", Op.FABS: "llvm.fabs", Op.COPYSIGN: "llvm.copysign",
              Op.RINT: "llvm.roundeven"}
_LIBDEVICE = [op for op in MATH if op not in _INTRINSIC and op not in PREDICATES]


def _d(op, i=0):
    return op.operands[i].type.dtype


def _zero(v):
    return ir.Constant(v.type, 0)


def _bitwise(name):
    def rule(low, op):
        a, b = (low.v(v) for v in op.operands)
        low.set(op, getattr(low.b, name)(a, b))
    return rule


def _safe_divisor(b, a_, b_, signed):
    """Divisor with 0 (and -1 for signed, to dodge INT_MIN / -1) replaced by 1."""
    zero = b.icmp_unsigned("==", b_, _zero(b_))
    bad = zero
    if signed:
        bad = b.or_(zero, b.icmp_signed("==", b_, ir.Constant(b_.type, -1)))
    return zero, b.select(bad, ir.Constant(b_.type, 1), b_)


def _int_div(signed, want_mod):
    def run(b, x, y):
        zero, safe = _safe_divisor(b, x, y, signed)
        if not signed:
            r = (b.urem if want_mod else b.udiv)(x, safe)
            return b.select(zero, _zero(x), r)
        q, r = b.sdiv(x, safe), b.srem(x, safe)
        minus_one = b.icmp_signed("==", y, ir.Constant(y.type, -1))
        # floor: when the remainder is non-zero and its sign differs from the divisor's
        adjust = b.and_(b.icmp_signed("!=", r, _zero(r)),
                        b.icmp_signed("!=", b.icmp_signed("<", r, _zero(r)),
                                      b.icmp_signed("<", y, _zero(y))))
        if want_mod:
            out = b.select(adjust, b.add(r, y), r)
            out = b.select(minus_one, _zero(x), out)
        else:
            out = b.select(adjust, b.sub(q, ir.Constant(q.type, 1)), q)
            out = b.select(minus_one, b.neg(x), out)
        return b.select(zero, _zero(x), out)
    return run


def _floordiv(low, op):
    a, b_ = (low.v(v) for v in op.operands)
    d = _d(op)
    if d.is_float:
        low.set(op, _float_divmod(low, a, b_, d, want_mod=False))
    else:
        low.set(op, _int_div(d.is_signed, False)(low.b, a, b_))


def _mod(low, op):
    a, b_ = (low.v(v) for v in op.operands)
    d = _d(op)
    if d.is_float:
        low.set(op, _float_divmod(low, a, b_, d, want_mod=True))
    else:
        low.set(op, _int_div(d.is_signed, True)(low.b, a, b_))


def _float_divmod(low, a, b_, d, want_mod):
    """Python's float ``a // b`` or ``a % b`` (CPython's float_divmod, which NumPy follows): the
    exact fmod, adjusted to the divisor's sign; the quotient snapped to an integer. A zero divisor
    gives ``a / b`` for ``//`` and NaN for ``%`` (NumPy). f16/bf16 work in f32, rounded once."""
    b = low.b
    if d.bits == 16:
        a, b_ = b.fpext(a, F32), b.fpext(b_, F32)
    t = a.type
    zero, one = ir.Constant(t, 0.0), ir.Constant(t, 1.0)
    mod = _libdevice_call(low, "fmod", [a, b_])
    div = b.fdiv(b.fsub(a, mod), b_)
    # C's `if (mod)`: NaN counts as non-zero
    adjust = b.and_(b.fcmp_unordered("!=", mod, zero),
                    b.xor(b.fcmp_ordered("<", b_, zero), b.fcmp_ordered("<", mod, zero)))
    if want_mod:
        mod = b.select(adjust, b.fadd(mod, b_), mod)
        out = b.select(b.fcmp_ordered("==", mod, zero), _copysign(b, zero, b_), mod)
    else:
        div = b.select(adjust, b.fsub(div, one), div)
        floor = _call_float(low, "llvm.floor", [div], None)
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), ir.Constant(t, 0.5)),
                         b.fadd(floor, one), floor)
        quotient = b.fdiv(a, b_)
        out = b.select(b.fcmp_unordered("!=", div, zero), floor, _copysign(b, zero, quotient))
        out = b.select(b.fcmp_ordered("==", b_, zero), quotient, out)
    return b.fptrunc(out, llvm_type(d)) if d.bits == 16 else out


def _copysign(b, x, sign):
    fn = intrinsic(b.module, f"llvm.copysign.{_fname(x.type)}", x.type, [x.type, x.type])
    return b.call(fn, [x, sign])


def _minmax(is_min):
    def rule(low, op):
        a, b_ = (low.v(v) for v in op.operands)
        d = _d(op)
        if d.is_float:  # IEEE 754-2019 maximumNumber: PTX max (-0.0 < +0.0)
            if not is_min:
                low.set(op, _call_float(low, "llvm.maximumnum", [a, b_], d, keep_type=True))
                return
            # minimumNumber(a, b) == -maximumNumber(-a, -b), exactly (zeros, NaN). Not PTX min:
            # ptxas turns min(x, 1.0) then max(_, 0.0) into one .SAT instruction, which gives 0
            # for a NaN x where min gives 1 (fuzz seed 58110: a clamp to [0, 1], or
            # min(x, 1.0) cast to an unsigned int); the negations are free operand modifiers
            neg = [low.b.fneg(a), low.b.fneg(b_)]
            low.set(op, low.b.fneg(_call_float(low, "llvm.maximumnum", neg, d, keep_type=True)))
            return
        cmp = (low.b.icmp_signed if d.is_signed else low.b.icmp_unsigned)("<" if is_min else ">",
                                                                           a, b_)
        low.set(op, low.b.select(cmp, a, b_))
    return rule


def _shift(left):
    def rule(low, op):
        a, n = (low.v(v) for v in op.operands)
        d, b = _d(op), low.b
        big = b.icmp_unsigned(">=", n, ir.Constant(n.type, d.bits))
        # the amount saturated at width - 1 before the shift, not only the result selected
        # after it: LLVM drops such a select (a shift by >= width is poison) and NVPTX then
        # relies on PTX clamping an amount it truncates to 32 bits, so a 64-bit amount of
        # 2**32 + 1 shifted by 1 (fuzz seed 43933)
        amount = b.select(big, ir.Constant(n.type, d.bits - 1), n)
        if left or not d.is_signed:
            shifted = (b.shl if left else b.lshr)(a, amount)
            low.set(op, b.select(big, _zero(a), shifted))
        else:  # arithmetic shift by >= width fills with the sign
            low.set(op, b.ashr(a, amount))
    return rule


def _neg(low, op):
    a = low.v(op.operands[0])
    low.set(op, low.b.fneg(a) if _d(op).is_float else low.b.neg(a))


def _not(low, op):
    low.set(op, low.b.not_(low.v(op.operands[0])))


def _abs(low, op):
    a, d = low.v(op.operands[0]), _d(op)
    if d.is_float:
        low.set(op, _call_float(low, "llvm.fabs", [a], d, keep_type=True))
    elif d.is_signed:
        low.set(op, low.b.select(low.b.icmp_signed("<", a, _zero(a)), low.b.neg(a), a))
    else:
        low.set(op, a)


def _cmp(low, op):
    a, b_ = (low.v(v) for v in op.operands)
    pred, d = _PRED[op.attrs["pred"]], _d(op)
    if d.is_float:  # != is unordered so that nan != nan, as in Python
        fn = low.b.fcmp_unordered if pred == "!=" else low.b.fcmp_ordered
    else:
        fn = low.b.icmp_signed if d.is_signed else low.b.icmp_unsigned
    low.set(op, fn(pred, a, b_))


def _cast(low, op):
    a = low.v(op.operands[0])
    src, dst = _d(op), op.result.type.dtype
    b, to = low.b, llvm_type(dst)
    if dst.is_bool:
        low.set(op, b.fcmp_unordered("!=", a, ir.Constant(a.type, 0.0)) if src.is_float
                else b.icmp_unsigned("!=", a, _zero(a)))
    elif src.is_float and dst.is_float:
        if dst.bits > src.bits:
            low.set(op, b.fpext(a, to))
        elif dst.bits < src.bits:
            low.set(op, b.fptrunc(a, to))
        else:  # f16 <-> bf16 through f32, which holds both exactly
            low.set(op, b.fptrunc(b.fpext(a, F32), to))
    elif src.is_float:
        name = "llvm.fptosi.sat" if dst.is_signed else "llvm.fptoui.sat"
        fn = intrinsic(b.module, f"{name}.{to}.{_fname(a.type)}", to, [a.type])
        low.set(op, b.call(fn, [a]))
    elif dst.is_float and dst.name == "bf16" and src.bits > 24:
        low.set(op, _wide_int_to_bf16(b, a, src.is_signed))
    elif dst.is_float:
        low.set(op, (b.sitofp if src.is_signed else b.uitofp)(a, to))
    # integer to integer by register width: a bool is an i1 (8 bits only in memory), unsigned
    elif to.width == a.type.width:
        low.set(op, a)
    elif to.width < a.type.width:
        low.set(op, b.trunc(a, to))
    else:
        low.set(op, (b.sext if src.is_signed else b.zext)(a, to))


def _wide_int_to_bf16(b, a, signed):
    """An integer of more than 24 bits as bf16, rounded once: its magnitude rounded to odd at
    24 bits (truncate, then set the last kept bit if any dropped bit was set) converts to f32
    exactly, and f32 -> bf16 rounds to nearest even with the right result (see dtypes.py)."""
    t = a.type
    zero = ir.Constant(t, 0)
    negative = b.icmp_signed("<", a, zero) if signed else None
    mag = b.select(negative, b.neg(a), a) if signed else a  # |INT_MIN| as unsigned is exact
    ctlz = intrinsic(b.module, f"llvm.ctlz.i{t.width}", t, [t, ir.IntType(1)])
    leading = b.call(ctlz, [mag, ir.Constant(ir.IntType(1), 0)])  # 0 is not poison
    shift = b.sub(ir.Constant(t, t.width - 24), leading)
    shift = b.select(b.icmp_signed("<", shift, zero), zero, shift)
    mask = b.sub(b.shl(ir.Constant(t, 1), shift), ir.Constant(t, 1))
    sticky = b.zext(b.icmp_unsigned("!=", b.and_(mag, mask), zero), t)
    kept = b.or_(b.and_(mag, b.not_(mask)), b.shl(sticky, shift))
    f = b.uitofp(kept, F32)
    if signed:
        f = b.select(negative, b.fneg(f), f)
    return b.fptrunc(f, BFloatType())


def _fname(t: ir.Type) -> str:
    return {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16"}.get(str(t), str(t))


def _select(low, op):
    c, a, b_ = (low.v(v) for v in op.operands)
    low.set(op, low.b.select(c, a, b_))


def _constant(low, op):
    d = op.result.type.dtype
    low.set(op, ir.Constant(llvm_type(d), dtypes.cast(op.attrs["value"], d).item()))


def _call_float(low, name, args, d, keep_type=False):
    """Call a float intrinsic; f16/bf16 go through f32 unless the intrinsic takes them.
    ``d`` None: call it on the arguments' own type."""
    b = low.b
    if d is not None and d.bits == 16 and not keep_type:
        args = [b.fpext(a, F32) for a in args]
    t = args[0].type
    fn = intrinsic(b.module, f"{name}.{_fname(t)}", t, [t] * len(args))
    out = b.call(fn, args)
    return b.fptrunc(out, llvm_type(d)) if d is not None and out.type != llvm_type(d) else out


def _libdevice_call(low, name, args):
    """``__nv_<name>[f]`` of f32 or f64 arguments, and i32 ones where the function takes them
    (libdevice is linked in when used)."""
    t = args[0].type
    symbol = f"__nv_{name}{'' if str(t) == 'double' else 'f'}"
    fn = intrinsic(low.b.module, symbol, t, [a.type for a in args])
    low.uses_libdevice = True
    return low.b.call(fn, args)


def _libdevice(name):
    def rule(low, op):
        d, b = _d(op), low.b
        args = [low.v(v) for v in op.operands]
        if d.bits == 16:  # the float operands
            args = [b.fpext(a, F32) if v.type.dtype.is_float else a
                    for a, v in zip(args, op.operands)]
        out = _libdevice_call(low, name, args)
        low.set(op, b.fptrunc(out, llvm_type(d)) if d.bits == 16 else out)
    return rule


def _intrinsic(name):
    def rule(low, op):
        args = [low.v(v) for v in op.operands]
        low.set(op, _call_float(low, name, args, _d(op)))
    return rule


def _predicate(kind):
    def rule(low, op):
        a, d, b = low.v(op.operands[0]), _d(op), low.b
        if kind is Op.ISNAN:
            low.set(op, b.fcmp_unordered("uno", a, a))
            return
        mag = _call_float(low, "llvm.fabs", [a], d, keep_type=True)
        inf = ir.Constant(a.type, float("inf"))
        low.set(op, b.fcmp_ordered("==" if kind is Op.ISINF else "<", mag, inf))
    return rule


def _arith(int_name, float_name):
    def rule(low, op):
        a, b_ = (low.v(v) for v in op.operands)
        if _d(op).is_float:
            low.set(op, getattr(low.b, float_name)(a, b_, flags=_FMA))
        else:
            low.set(op, getattr(low.b, int_name)(a, b_))
    return rule


def _fdiv(low, op):
    a, b_ = (low.v(v) for v in op.operands)
    low.set(op, low.b.fdiv(a, b_))


RULES = {
    Op.CONSTANT: _constant,
    Op.ADD: _arith("add", "fadd"),
    Op.SUB: _arith("sub", "fsub"),
    Op.MUL: _arith("mul", "fmul"),
    Op.DIV: _fdiv,
    Op.FLOORDIV: _floordiv,
    Op.MOD: _mod,
    Op.MIN: _minmax(True),
    Op.MAX: _minmax(False),
    Op.AND: _bitwise("and_"),
    Op.OR: _bitwise("or_"),
    Op.XOR: _bitwise("xor"),
    Op.SHL: _shift(True),
    Op.SHR: _shift(False),
    Op.NEG: _neg,
    Op.NOT: _not,
    Op.ABS: _abs,
    Op.CMP: _cmp,
    Op.CAST: _cast,
    Op.SELECT: _select,
    **{op: _intrinsic(i) for op, i in _INTRINSIC.items()},
    **{op: _libdevice(op.base) for op in _LIBDEVICE},
    **{op: _predicate(op) for op in (Op.ISNAN, Op.ISINF, Op.ISFINITE)},
}
