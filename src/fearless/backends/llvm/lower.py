"""SIMT IR -> LLVM IR with llvmlite's IRBuilder: one rule per op in ``RULES``.

Kernel ABI (the runtime packs arguments in this order): per parameter, a scalar is passed by
value (bool as i8); an array as a global pointer, then its extents (i64 each), then, for arrays not
specialised as contiguous, its strides in elements (i64 each). Kernels with bounds-checked reads
take one more pointer last: the launch's error word, four i64 (site, index, extent, axis).
"""
from __future__ import annotations

from llvmlite import ir

from fearless.backends.llvm import arith, nvvm
from fearless.backends.llvm.nvvm import GPTR, I1, I8, I64, llvm_type
from fearless.errors import InternalError
from fearless.ir.core import Function, Operation, Region
from fearless.ir.types import Array, LocalRef, ThreadIndex


class ArrayArg:
    """The lowered pieces of one array parameter: pointer, extents, strides (elements)."""

    def __init__(self, ty: Array, ptr, shape, strides):
        self.ty, self.ptr, self.shape = ty, ptr, shape
        self.strides = strides


class Lowering:
    def __init__(self, fn: Function, module: ir.Module):
        self.fn = fn
        self.module = module
        self.env: dict[int, object] = {}
        self.loops: list[tuple] = []      # (continue block, break block)
        self.inlines: list = []           # exit blocks of scf.inline
        self.uses_libdevice = False
        self.checked = any(op.attrs.get("checked") for op in fn.walk() if op.name == "mem.load")

    # signature ------------------------------------------------------------------------------

    def build(self) -> ir.Function:
        arg_types, layout = [], []
        for p in self.fn.params:
            if isinstance(p.type, Array):
                n = p.type.ndim
                layout.append((p, len(arg_types)))
                arg_types += [GPTR] + [I64] * n + ([] if p.type.contiguous else [I64] * n)
            else:
                layout.append((p, len(arg_types)))
                arg_types.append(nvvm.memory_type(p.type.dtype))
        if self.checked:
            arg_types.append(GPTR)
        func = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arg_types), self.fn.name)
        func.calling_convention = "ptx_kernel"
        entry = func.append_basic_block("entry")
        self.b = ir.IRBuilder(entry)
        args = func.args
        for p, k in layout:
            if isinstance(p.type, Array):
                n = p.type.ndim
                args[k].name = p.name
                args[k].add_attribute("noalias")  # the host alias check guarantees it
                shape = list(args[k + 1:k + 1 + n])
                strides = (list(args[k + 1 + n:k + 1 + 2 * n]) if not p.type.contiguous
                           else self.contiguous_strides(shape))
                self.env[id(p.value)] = ArrayArg(p.type, args[k], shape, strides)
            else:
                v = args[k]
                self.env[id(p.value)] = self.b.trunc(v, I1) if p.type.dtype.is_bool else v
        self.error_word = args[-1] if self.checked else None
        self.exit = func.append_basic_block("exit")
        self.region(self.fn.body)
        if not self.b.block.is_terminated:
            self.b.branch(self.exit)
        self.b.position_at_end(self.exit)
        self.b.ret_void()
        return func

    def contiguous_strides(self, shape):
        strides, acc = [], ir.Constant(I64, 1)
        for extent in reversed(shape):
            strides.append(acc)
            acc = self.b.mul(acc, extent)
        return strides[::-1]

    # regions --------------------------------------------------------------------------------

    def region(self, region: Region) -> None:
        for op in region.ops:
            if self.b.block.is_terminated:
                return  # unreachable code after break/continue/return
            rule = RULES.get(op.name)
            if rule is None:
                raise InternalError(f"the llvm backend has no rule for {op.name}")
            rule(self, op)

    def v(self, value):
        return self.env[id(value)]

    def set(self, op: Operation, value) -> None:
        self.env[id(op.result)] = value

    def new_block(self, name: str):
        return self.b.append_basic_block(name)

    def close(self, target) -> None:
        if not self.b.block.is_terminated:
            self.b.branch(target)

    # memory ---------------------------------------------------------------------------------

    def address(self, arr: ArrayArg, indices):
        offset = None
        for idx, stride in zip(indices, arr.strides):
            term = idx if isinstance(stride, ir.Constant) and stride.constant == 1 else \
                self.b.mul(idx, stride)
            offset = term if offset is None else self.b.add(offset, term)
        return self.b.gep(arr.ptr, [offset], source_etype=nvvm.memory_type(arr.ty.dtype))

    def in_bounds(self, arr: ArrayArg, indices):
        ok = None
        for idx, extent in zip(indices, arr.shape):
            c = self.b.icmp_unsigned("<", idx, extent)  # negative indices are huge: out
            ok = c if ok is None else self.b.and_(ok, c)
        return ok

    def load_element(self, arr: ArrayArg, indices):
        """Read one element (bool memory is i8, made i1)."""
        d = arr.ty.dtype
        value = self.b.load(self.address(arr, indices), typ=nvvm.memory_type(d),
                            align=d.itemsize)
        return self.b.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if d.is_bool else value

    def record_bounds_error(self, op: Operation, arr: ArrayArg, indices) -> None:
        """First violation wins: CAS the site into word 0, then write index, extent, axis."""
        word = self.error_word
        site = ir.Constant(I64, op.attrs["site"])
        old = self.b.cmpxchg(word, ir.Constant(I64, 0), site, "monotonic", "monotonic")
        with self.b.if_then(self.b.extract_value(old, 1)):
            axis, index, extent = ir.Constant(I64, 0), indices[0], arr.shape[0]
            for k in reversed(range(1, len(indices))):  # ends on the lowest bad axis
                bad = self.b.icmp_unsigned(">=", indices[k], arr.shape[k])
                first_ok = self.b.icmp_unsigned("<", indices[0], arr.shape[0])
                take = self.b.and_(bad, first_ok)
                axis = self.b.select(take, ir.Constant(I64, k), axis)
                index = self.b.select(take, indices[k], index)
                extent = self.b.select(take, arr.shape[k], extent)
            for slot, value in ((1, index), (2, extent), (3, axis)):
                ptr = self.b.gep(word, [ir.Constant(I64, slot)], source_etype=I64)
                self.b.store(value, ptr)


def lower(fn: Function) -> tuple[ir.Module, bool]:
    """An LLVM module holding kernel ``fn``, and whether it calls libdevice (to be linked)."""
    module = ir.Module(name=fn.name)
    module.triple = "nvptx64-nvidia-cuda"
    module.data_layout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
    lowering = Lowering(fn, module)
    lowering.build()
    return module, lowering.uses_libdevice


# Rules for control flow, memory and SIMT ops; scalar arithmetic rules live in llvm/arith.py.

def _if(low: Lowering, op):
    then, other, merge = low.new_block("then"), low.new_block("else"), low.new_block("endif")
    low.b.cbranch(low.v(op.operands[0]), then, other)
    for block, region in ((then, op.regions[0]), (other, op.regions[1])):
        low.b.position_at_end(block)
        low.region(region)
        low.close(merge)
    low.b.position_at_end(merge)


def _for(low: Lowering, op):
    lo, hi, step = (low.v(v) for v in op.operands)
    pre = low.b.block
    header, body, latch, done = (low.new_block(n) for n in ("for", "body", "next", "endfor"))
    low.b.branch(header)
    low.b.position_at_end(header)
    iv = low.b.phi(I64)
    iv.add_incoming(lo, pre)
    sign = op.attrs["step_sign"]
    if sign > 0:
        go = low.b.icmp_signed("<", iv, hi)
    elif sign < 0:
        go = low.b.icmp_signed(">", iv, hi)
    else:
        up = low.b.icmp_signed(">", step, ir.Constant(I64, 0))
        down = low.b.icmp_signed("<", step, ir.Constant(I64, 0))
        go = low.b.or_(low.b.and_(up, low.b.icmp_signed("<", iv, hi)),
                       low.b.and_(down, low.b.icmp_signed(">", iv, hi)))
    low.b.cbranch(go, body, done)
    low.b.position_at_end(body)
    low.env[id(op.regions[0].args[0])] = iv
    low.loops.append((latch, done))
    low.region(op.regions[0])
    low.loops.pop()
    low.close(latch)
    low.b.position_at_end(latch)
    nxt = low.b.add(iv, step)
    iv.add_incoming(nxt, latch)
    low.b.branch(header)
    low.b.position_at_end(done)


def _while(low: Lowering, op):
    header, body, done = low.new_block("while"), low.new_block("body"), low.new_block("endwhile")
    low.b.branch(header)
    low.b.position_at_end(header)
    cond_region, body_region = op.regions
    low.region(cond_region)
    low.b.cbranch(low.v(cond_region.ops[-1].operands[0]), body, done)
    low.b.position_at_end(body)
    low.loops.append((header, done))
    low.region(body_region)
    low.loops.pop()
    low.close(header)
    low.b.position_at_end(done)


def _condition(low: Lowering, op):
    pass  # read by the scf.while rule


def _inline(low: Lowering, op):
    done = low.new_block(f"end.{op.attrs.get('name', 'inline')}")
    low.inlines.append(done)
    low.region(op.regions[0])
    low.inlines.pop()
    low.close(done)
    low.b.position_at_end(done)


def _break(low: Lowering, op):
    low.b.branch(low.loops[-1][1])


def _continue(low: Lowering, op):
    low.b.branch(low.loops[-1][0])


def _return(low: Lowering, op):
    low.b.branch(low.inlines[-1] if low.inlines else low.exit)


def _thread_index(low: Lowering, op):
    axis = "x" if op.attrs["space"] == 1 or op.attrs["axis"] == 1 else "y"
    b = low.b
    block = b.mul(nvvm.special_register(b, "ctaid", axis), nvvm.special_register(b, "ntid", axis))
    low.set(op, b.add(block, nvvm.special_register(b, "tid", axis)))


def _index_value(low: Lowering, op):
    low.set(op, low.v(op.operands[0]))


def _dim(low: Lowering, op):
    low.set(op, low.v(op.operands[0]).shape[op.attrs["axis"]])


def _load(low: Lowering, op):
    arr = low.v(op.operands[0])
    indices = [low.v(v) for v in op.operands[1:]]
    if not op.attrs.get("checked"):
        low.set(op, low.load_element(arr, indices))
        return
    ok = low.in_bounds(arr, indices)
    hit, miss, merge = low.new_block("inbounds"), low.new_block("oob"), low.new_block("loaded")
    low.b.cbranch(ok, hit, miss)
    low.b.position_at_end(hit)
    value = low.load_element(arr, indices)
    hit_end = low.b.block
    low.b.branch(merge)
    low.b.position_at_end(miss)
    low.record_bounds_error(op, arr, indices)
    miss_end = low.b.block
    low.b.branch(merge)
    low.b.position_at_end(merge)
    phi = low.b.phi(value.type)
    phi.add_incoming(value, hit_end)
    phi.add_incoming(ir.Constant(value.type, None), miss_end)
    low.set(op, phi)


def _store(low: Lowering, op):
    arr = low.v(op.operands[0])
    indices = [low.v(v) for v in op.operands[1:-1]]
    value = low.v(op.operands[-1])
    d = arr.ty.dtype
    if d.is_bool:
        value = low.b.zext(value, I8)
    with low.b.if_then(low.in_bounds(arr, indices)):  # the last block's tail is skipped
        low.b.store(value, low.address(arr, indices), align=d.itemsize)


def _slot_type(ref_type: LocalRef) -> ir.Type:
    elem = ref_type.elem
    return I64 if isinstance(elem, ThreadIndex) else llvm_type(elem.dtype)


def _alloc(low: Lowering, op):
    ty = _slot_type(op.result.type)
    slot = low.b.alloca(ty)
    low.b.store(ir.Constant(ty, None), slot)
    low.set(op, slot)


def _local_load(low: Lowering, op):
    low.set(op, low.b.load(low.v(op.operands[0]), typ=_slot_type(op.operands[0].type)))


def _local_store(low: Lowering, op):
    low.b.store(low.v(op.operands[1]), low.v(op.operands[0]))


RULES = {
    "scf.if": _if, "scf.for": _for, "scf.while": _while, "scf.condition": _condition,
    "scf.inline": _inline, "cf.break": _break, "cf.continue": _continue, "cf.return": _return,
    "simt.thread_index": _thread_index, "simt.index_value": _index_value,
    "mem.dim": _dim, "mem.load": _load, "mem.store": _store,
    "local.alloc": _alloc, "local.load": _local_load, "local.store": _local_store,
    **arith.RULES,
}
