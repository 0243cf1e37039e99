"""LLVM rules for block-level SIMT ops: block coordinates, barriers, shared memory, atomics
(warp ops: ``llvm/warp.py``).

Shared arrays live in ``addrspace(3)`` globals: the static ones at constant offsets in one
internal ``__fl_shared`` (see ``_shared_pool``; over 48 KB, at the start of the dynamic shared
memory instead); the dynamic one is an external zero-length array whose size the launch gives,
read from ``%dynamic_smem_size``.
A barrier is ``llvm.nvvm.barrier.cta.sync.aligned.all(0)`` (``bar.sync 0``). Atomics are PTX
``atom{.sem}{.scope}{.space}.op.type`` written as inline assembly, because LLVM's NVPTX backend
drops the scope and ordering of ``atomicrmw`` (it emits ``atom.global.add`` for every
``syncscope``); ``seq_cst`` is ``fence.sc`` followed by an ``acq_rel`` atom, as PTX's memory
model prescribes (PTX ISA, "Memory Consistency Model", mapping of C++ atomics).
"""
from __future__ import annotations

import math

from llvmlite import ir

from fearless.backends.llvm import nvvm, shared_pool
from fearless.backends.llvm.nvvm import I16, I32, I64
from fearless.ir.opdef import Op
from fearless.ir.types import Access

SHARED = 3  # NVPTX address space of shared memory
_SCOPE = {"block": "cta", "device": "gpu", "system": "sys"}
_SEM = {"relaxed": "relaxed", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel",
        "seq_cst": "acq_rel"}
_SREG = {"block_index": "ctaid", "block_dim": "ntid", "grid_dim": "nctaid",
         "thread_in_block": "tid"}


def _special(low, op):
    reg, axis = op.attrs["reg"], "xy"[op.attrs["axis"]]
    if reg == "lane":
        fn = nvvm.intrinsic(low.b.module, "llvm.nvvm.read.ptx.sreg.laneid", I32, [])
        low.set(op, low.b.zext(low.b.call(fn, []), I64))
        return
    if reg == "warp_index":  # the slot // 32 (not %warpid, which may change while running)
        low.set(op, low.b.lshr(block_slot(low), ir.Constant(I64, 5)))
        return
    low.set(op, nvvm.special_register(low.b, _SREG[reg], axis, low.block))


def block_thread_index(low, op):
    """The thread's position in its block: linear (1-d) or (tid.y, tid.x) (2-d)."""
    b = low.b
    if op.attrs["space"] == 2:
        return nvvm.special_register(b, "tid", "x" if op.attrs["axis"] == 1 else "y", low.block)
    return block_slot(low)


def block_slot(low):
    """threadIdx.y * blockDim.x + threadIdx.x: the linear slot, x fastest (as warps are cut);
    plus threadIdx.z * blockDim.x * blockDim.y in a 3-d kernel (only those launch along z).
    ``low.block``: the contract's exact block or None (see ``nvvm.special_register``)."""
    b, block = low.b, low.block
    ty = nvvm.special_register(b, "tid", "y", block)
    tx = nvvm.special_register(b, "tid", "x", block)
    ntx = nvvm.special_register(b, "ntid", "x", block)
    slot = b.add(b.mul(ty, ntx), tx)
    if low.fn.attrs.get("index_space") == 3:
        plane = b.mul(ntx, nvvm.special_register(b, "ntid", "y", block))
        slot = b.add(b.mul(nvvm.special_register(b, "tid", "z", block), plane), slot)
    return slot


def _barrier(low, op):
    fn = nvvm.intrinsic(low.b.module, "llvm.nvvm.barrier.cta.sync.aligned.all", ir.VoidType(),
                        [I32])
    low.b.call(fn, [ir.Constant(I32, 0)])


def _shared_alloc(low, op):
    from fearless.backends.llvm.lower import ArrayArg
    ty = op.result.type
    module = low.b.module
    shape = op.attrs["shape"]
    if shape is None:  # after the pooled static arrays, if they are there
        _, _, pooled = _shared_pool(low)
        asm = ir.InlineAsm(ir.FunctionType(I32, []), "mov.u32 $0, %dynamic_smem_size;", "=r")
        size = low.b.sub(low.b.zext(low.b.call(asm, []), I64), ir.Constant(I64, pooled))
        dims = [low.b.udiv(size, ir.Constant(I64, ty.dtype.itemsize))]
        ptr = low.b.gep(_dynamic_shared(module), [ir.Constant(I64, pooled)],
                        source_etype=ir.IntType(8))
    else:
        pool, offsets, _ = _shared_pool(low)
        ptr = low.b.gep(pool, [ir.Constant(I64, offsets[id(op)])], source_etype=ir.IntType(8))
        dims = [ir.Constant(I64, e) for e in shape]
    strides, acc = [], 1
    for e in reversed(shape or (None,)):
        strides.append(ir.Constant(I64, acc))
        acc *= e or 1
    low.set(op, ArrayArg(ty, ptr, dims, strides[::-1]))


def _shared_pool(low):
    """The kernel's static shared memory: (global, {id(alloc op): byte offset}, bytes pooled at
    the start of dynamic shared memory). One global, ``__fl_shared``, rather than one per array:
    the stages of a pipeline then differ by constant offsets, which PTX folds into
    ``[reg + imm]`` addresses, so a shared index computed once serves every stage (fewer
    registers). Above ``shared_pool.STATIC_LIMIT`` (48 KB, as much as PTX lets a block declare)
    the arrays sit at the start of the dynamic shared memory instead, and the launch asks for
    their bytes too (``shared_pool.pooled_bytes``, ``runtime/dispatch.py``)."""
    if low.shared_pool is None:
        allocs = [op for op in low.fn.walk()
                  if op.name == Op.SIMT_SHARED_ALLOC and op.attrs["shape"] is not None]
        starts, total = shared_pool.pool(math.prod(op.attrs["shape"]) *
                                         op.result.type.dtype.itemsize for op in allocs)
        offsets = {id(op): start for op, start in zip(allocs, starts)}
        if total > shared_pool.STATIC_LIMIT:
            low.shared_pool = _dynamic_shared(low.b.module), offsets, total
            return low.shared_pool
        gv = ir.GlobalVariable(low.b.module, ir.ArrayType(ir.IntType(8), total), "__fl_shared",
                               addrspace=SHARED)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(gv.value_type, ir.Undefined)
        gv.align = 16
        gv.type = ir.PointerType(addrspace=SHARED)
        low.shared_pool = gv, offsets, 0
    return low.shared_pool


def _dynamic_shared(module):
    """The external zero-length ``__fl_dynamic_shared``: the block's dynamic shared memory,
    whose size the launch gives (one symbol per kernel, as CUDA C's ``extern __shared__``)."""
    gv = module.globals.get("__fl_dynamic_shared")
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 0), "__fl_dynamic_shared",
                               addrspace=SHARED)
        gv.linkage = "external"
        gv.align = 16
        gv.type = ir.PointerType(addrspace=SHARED)  # an opaque pointer, as array parameters have
    return gv


def _type_suffix(kind: str, dtype) -> str:
    bits = dtype.bits
    if dtype.is_float:
        if kind in ("add", "sub"):
            return {16: f"noftz.{dtype.name}", 32: "f32", 64: "f64"}[bits]
        return f"b{bits}"
    if kind in ("min", "max"):
        return f"{'s' if dtype.is_signed else 'u'}{bits}"
    if kind in ("add", "sub"):
        return f"u{bits}"
    return f"b{bits}"


def _reg(dtype) -> tuple[ir.Type, str]:
    """The register type an asm operand of ``dtype`` travels in, and its constraint letter."""
    return {16: (I16, "h"), 32: (I32, "r"), 64: (I64, "l")}[dtype.bits]


def atomic(low, op, arr, index):
    """Emit one atomic on ``arr[index]``; returns the old value (in the element's type)."""
    b = low.b
    d = arr.ty.dtype
    kind = op.attrs["op"]
    scope, order = _SCOPE[op.attrs["scope"]], op.attrs["order"]
    space = "shared" if arr.ty.access is Access.SHARED else "global"
    name = {"sub": "add", "exchange": "exch"}.get(kind, kind)
    text = (f"fence.sc.{scope};\n\t" if order == "seq_cst" else "") + \
        f"atom.{_SEM[order]}.{scope}.{space}.{name}.{_type_suffix(kind, d)} $0, [$1], $2" + \
        (", $3;" if kind == "cas" else ";")
    values = [low.v(v) for v in op.operands[2:]]
    if kind == "sub":
        values[0] = b.fneg(values[0]) if d.is_float else b.neg(values[0])
    reg, letter = _reg(d)
    elem = nvvm.memory_type(d)
    values = [v if v.type == reg else b.bitcast(v, reg) for v in values]
    address = b.ptrtoint(low.address(arr, [index]), I64)
    constraints = ",".join([f"={letter}", "l"] + [letter] * len(values) + ["~{memory}"])
    asm = ir.InlineAsm(ir.FunctionType(reg, [I64] + [reg] * len(values)), text, constraints,
                       side_effect=True)
    old = b.call(asm, [address, *values])
    return old if reg == elem else b.bitcast(old, elem)


def _atomic(low, op):
    arr = low.v(op.operands[0])
    index = low.v(op.operands[1])
    if not op.attrs.get("checked"):
        low.set(op, atomic(low, op, arr, index))
        return
    b = low.b
    ok = low.in_bounds(arr, [index])
    pre = b.block
    with b.if_then(ok):
        old = atomic(low, op, arr, index)
        done = b.block
    result = b.phi(old.type)
    result.add_incoming(old, done)
    result.add_incoming(ir.Constant(old.type, None), pre)
    low.set(op, result)
    with b.if_then(b.not_(ok), likely=False):
        low.record_bounds_error(op, arr, [index])


def _string(module, text: str):
    """A generic pointer to a NUL-terminated constant string (global memory)."""
    data = bytearray(text.encode() + b"\0")
    name = f"__fl_str_{len([g for g in module.globals if g.startswith('__fl_str')])}"
    gv = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), len(data)), name,
                           addrspace=nvvm.GLOBAL)
    gv.global_constant = True
    gv.linkage = "internal"
    gv.initializer = ir.Constant(gv.value_type, data)
    return gv


def _print(low, op):
    """``vprintf(format, args)``: the CUDA device printf ABI, one 8-byte slot per argument
    (integers widened to 64 bits, floats to double, bools as a pointer to "True"/"False")."""
    b = low.b
    fmt, slots = [], []
    for part in op.attrs["parts"]:
        if isinstance(part, str):
            fmt.append(part.replace("%", "%%"))
            continue
        v, d = low.v(op.operands[part]), op.operands[part].type.dtype
        if d.is_bool:
            fmt.append("%s")
            yes, no = (b.addrspacecast(_string(b.module, t), ir.PointerType())
                       for t in ("True", "False"))
            slots.append(b.ptrtoint(b.select(v, yes, no), I64))
        elif d.is_int:
            fmt.append("%lld" if d.is_signed else "%llu")
            slots.append(v if d.bits == 64 else (b.sext if d.is_signed else b.zext)(v, I64))
        else:
            fmt.append("%g")
            slots.append(b.bitcast(b.fpext(v, ir.DoubleType()) if d.bits < 64 else v, I64))
    text = b.addrspacecast(_string(b.module, "".join(fmt)), ir.PointerType())
    if slots:
        buf = ir.IRBuilder(low.entry).alloca(I64, size=ir.Constant(I32, len(slots)))
        for k, s in enumerate(slots):
            b.store(s, b.gep(buf, [ir.Constant(I64, k)], source_etype=I64))
        args = b.bitcast(buf, ir.PointerType())
    else:
        args = ir.Constant(ir.PointerType(), None)
    vprintf = nvvm.intrinsic(b.module, "vprintf", I32, [ir.PointerType(), ir.PointerType()])
    b.call(vprintf, [text, args])


RULES = {
    Op.SIMT_PRINT: _print,
    Op.SIMT_SPECIAL: _special,
    Op.SIMT_BARRIER: _barrier,
    Op.SIMT_SHARED_ALLOC: _shared_alloc,
    Op.MEM_ATOMIC: _atomic,
}
