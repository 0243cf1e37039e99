"""LLVM rules for tensor-core and async-copy ops: ``mma.sync``, ``ldmatrix``, ``cp.async``.

Each is PTX inline assembly (sm_80+): ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.
{f16,bf16}.f32`` on 4 + 2 ``.b32`` fragment registers and 4 f32 accumulators,
``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`` and ``cp.async.{ca,cg}.shared.global
[dst], [src], size{, src_size}`` with ``cp.async.commit_group`` / ``cp.async.wait_group n``.
Warp-collective asm calls are ``convergent`` (LLVM may not sink them into a branch); those that
touch memory clobber it, so no load of shared memory moves across a wait.

Checked forms (the bounds pass's ``checked``): an ldmatrix row that is out of bounds or not
16-byte aligned reads row 0 of the array instead; an async copy whose source chunk is out of
bounds or misaligned copies zeros (``src_size`` 0); both record the first event in the error
word (a misalignment as axis 7 with ``offset * 32 + alignment``); a run of async copies records
behind one branch (``flush_errors``). A destination chunk outside the shared array is skipped,
as a store past the end is, unless the bounds pass proved every thread's chunk inside.
"""
from __future__ import annotations

from llvmlite import ir

from fearless.backends.llvm.nvvm import F32, I32, I64
from fearless.ir.opdef import Op

MISALIGNED = 7


def _asm(b, ret, args, text, constraints, *, memory=False, convergent=False):
    if memory:
        constraints += ",~{memory}" if constraints else "~{memory}"
    asm = ir.InlineAsm(ir.FunctionType(ret, [a.type for a in args]), text, constraints,
                       side_effect=memory or ret == ir.VoidType())
    return b.call(asm, args, attrs=("convergent",) if convergent else ())


def _unpack(b, value, n):
    return [value] if n == 1 else [b.extract_value(value, k) for k in range(n)]


def _mma(low, op):
    b = low.b
    ab = op.attrs["ab"]
    args = [low.v(v) for v in op.operands]
    text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    ret = ir.LiteralStructType([F32] * 4)
    d = _asm(b, ret, args, text, ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4),
             convergent=True)
    for r, v in zip(op.results, _unpack(b, d, 4)):
        low.env[id(r)] = v


def _pack(low, op):
    b = low.b
    lo, hi = (b.zext(b.bitcast(low.v(v), ir.IntType(16)), I32) for v in op.operands)
    low.set(op, b.or_(lo, b.shl(hi, ir.Constant(I32, 16))))


def _record_code(low, code, index) -> None:
    """First error of the launch: (code = site * 8 + axis, index) into the error word."""
    b = low.b
    old = b.cmpxchg(low.error_word, ir.Constant(I64, 0), code, "monotonic", "monotonic")
    with b.if_then(b.extract_value(old, 1)):
        b.store(index, b.gep(low.error_word, [ir.Constant(I64, 1)], source_etype=I64))


def flush_errors(low) -> None:
    """Record the first failed check among the deferred ones (program order), behind one
    branch. The lowering calls it before any op with regions or a jump and at the end of each
    region, so the checks of a pipeline stage's copies cost one branch, not one each: a branch
    between the copies would split the basic block that ptxas schedules them in."""
    pending, low.pending_errors = low.pending_errors, []
    if not pending:
        return
    b = low.b
    bad_any, code, index = None, None, None
    for good, code_k, index_k in reversed(pending):  # the earliest failure wins
        bad = b.not_(good)
        code = code_k if code is None else b.select(bad, code_k, code)
        index = index_k if index is None else b.select(bad, index_k, index)
        bad_any = bad if bad_any is None else b.or_(bad_any, bad)
    with b.if_then(bad_any, likely=False):
        _record_code(low, code, index)


def _row_check(low, arr, indices, width: int):
    """(in bounds, axis of the first bad index, that index) for a row of ``width`` elements
    starting at ``indices`` (the last axis holds the row)."""
    b = low.b
    ok, axis, bad = None, ir.Constant(I64, 0), indices[0]
    last = len(indices) - 1
    for k in reversed(range(len(indices))):
        idx, extent = indices[k], arr.shape[k]
        good = (b.icmp_unsigned("<=", b.add(idx, ir.Constant(I64, width)), extent)
                if k == last else b.icmp_unsigned("<", idx, extent))
        if k == last:  # a negative index is huge; idx + width could wrap: compare both
            good = b.and_(good, b.icmp_unsigned("<", idx, extent))
        axis = b.select(good, axis, ir.Constant(I64, k))
        bad = b.select(good, bad, idx)
        ok = good if ok is None else b.and_(ok, good)
    return ok, axis, bad


def _checked_address(low, op, arr, indices, width: int, align: int, defer: bool = False):
    """The i64 address of ``arr[indices]`` (a ``width``-element row), or of element 0 when the
    row is out of bounds or misaligned, and whether it was good; records the first error (with
    ``defer``, at the next ``flush_errors``)."""
    b = low.b
    ok, axis, bad = _row_check(low, arr, indices, width)
    zero = ir.Constant(I64, 0)
    # the address of the indices as given (wrapping integer arithmetic, only used when good),
    # not of indices selected by `ok`: so the loop-invariant row * stride stays out of loops
    addr = b.ptrtoint(low.address(arr, indices), I64)
    aligned = b.icmp_unsigned("==", b.and_(addr, ir.Constant(I64, align - 1)), zero)
    good = b.and_(ok, aligned)
    if op.attrs.get("checked"):
        def report():
            offset = b.and_(addr, ir.Constant(I64, 4095))
            misaligned = b.add(b.mul(offset, ir.Constant(I64, 32)), ir.Constant(I64, align))
            return (b.add(ir.Constant(I64, op.attrs["site"] * 8),
                          b.select(ok, ir.Constant(I64, MISALIGNED), axis)),
                    b.select(ok, misaligned, bad))
        if defer:  # recorded by flush_errors, one branch for a run of copies
            low.pending_errors.append((good, *report()))
        else:
            with b.if_then(b.not_(good), likely=False):
                _record_code(low, *report())
    base = b.ptrtoint(low.address(arr, [zero] * len(indices)), I64)
    return b.select(good, addr, base), good


def _ldmatrix(low, op):
    b = low.b
    arr = low.v(op.operands[0])
    indices = [low.v(v) for v in op.operands[1:]]
    count = op.attrs["count"]
    if op.attrs.get("checked"):
        addr, _ = _checked_address(low, op, arr, indices, 8, 16)
    else:
        addr = b.ptrtoint(low.address(arr, indices), I64)
    regs = ", ".join(f"${k}" for k in range(count))
    text = (f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if op.attrs['trans'] else ''}"
            f".shared.b16 {{{regs}}}, [${count}];")
    ret = I32 if count == 1 else ir.LiteralStructType([I32] * count)
    out = _asm(b, ret, [addr], text, ",".join(["=r"] * count + ["l"]), memory=True,
               convergent=True)
    for r, v in zip(op.results, _unpack(b, out, count)):
        low.env[id(r)] = v


def _async_copy(low, op):
    b = low.b
    nd = op.attrs["ndst"]
    e = op.attrs["size"] // low.v(op.operands[0]).ty.dtype.itemsize
    didx = [low.v(v) for v in op.operands[1:1 + nd]]
    didx[-1] = b.mul(didx[-1], ir.Constant(I64, e))
    if op.attrs.get("dst_proved"):  # passes/inbounds.py: every thread's chunk is inside
        _copy(low, op, didx, e, defer=True)
        return
    dst = low.v(op.operands[0])
    with b.if_then(_row_check(low, dst, didx, e)[0]):  # a chunk outside is skipped
        _copy(low, op, didx, e, defer=False)


def _copy(low, op, didx, e: int, defer: bool) -> None:
    """The ``cp.async`` itself; a checked source copies zeros when out of bounds or
    misaligned. ``defer``: its check is recorded at the next ``flush_errors`` (only where the
    copy is not itself under a branch, whose values would not reach the flush)."""
    b = low.b
    nd, size, cache = op.attrs["ndst"], op.attrs["size"], op.attrs["cache"]
    dst, src = low.v(op.operands[0]), low.v(op.operands[1 + nd])
    sidx = [low.v(v) for v in op.operands[2 + nd:]]
    daddr = b.ptrtoint(low.address(dst, didx), I64)
    if op.attrs.get("checked"):
        saddr, good = _checked_address(low, op, src, sidx, e, size, defer=defer)
        src_size = b.select(good, ir.Constant(I32, size), ir.Constant(I32, 0))
        _asm(b, ir.VoidType(), [daddr, saddr, src_size],
             f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;", "l,l,r", memory=True)
    else:
        saddr = b.ptrtoint(low.address(src, sidx), I64)
        _asm(b, ir.VoidType(), [daddr, saddr],
             f"cp.async.{cache}.shared.global [$0], [$1], {size};", "l,l", memory=True)


def _async_commit(low, op):
    _asm(low.b, ir.VoidType(), [], "cp.async.commit_group;", "", memory=True)


def _async_wait(low, op):
    _asm(low.b, ir.VoidType(), [], f"cp.async.wait_group {op.attrs['n']};", "", memory=True)


RULES = {
    Op.WARP_MMA: _mma,
    Op.WARP_LDMATRIX: _ldmatrix,
    Op.MMA_PACK: _pack,
    Op.MEM_ASYNC_COPY: _async_copy,
    Op.MEM_ASYNC_COMMIT: _async_commit,
    Op.MEM_ASYNC_WAIT: _async_wait,
}
