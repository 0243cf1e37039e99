"""SIMT IR -> LLVM IR with llvmlite's IRBuilder: one rule per op in ``RULES``.

Kernel ABI (``abi()``; the runtime packs arguments in this order): per parameter, a scalar is
passed by value (bool as i8); an array as a global pointer, then its extents (i64 each), then, for
arrays not specialised as contiguous, its strides in elements (i64 each). Kernels with
bounds-checked reads then take the launch's error word, a pointer to i64 (site * 8 + axis) then
i64 (index); the host knows the extents. A coarsened kernel takes, last of all, the launch's
thread count along the coarsened axis (i64).
"""
from __future__ import annotations

from llvmlite import ir

from fearless.backends.llvm import arith, mma, nvvm, simt, warp
from fearless.backends.llvm.nvvm import GPTR, I1, I8, I64, llvm_type
from fearless.compiler.abi import ERROR_WORD, PTR, SCALAR, Abi, simt_abi
from fearless.errors import InternalError
from fearless.ir.core import Function, Operation, Region
from fearless.ir.opdef import Op, checked_reads, only
from fearless.ir.ops.control import EXITS
from fearless.ir.types import Array, LocalRef, ThreadIndex


class ArrayArg:
    """The lowered pieces of one array parameter: pointer, extents, strides (elements)."""

    def __init__(self, ty: Array, ptr, shape, strides):
        self.ty, self.ptr, self.shape = ty, ptr, shape
        self.strides = strides


class Lowering:
    def __init__(self, fn: Function, module: ir.Module, coarsen: int, block: tuple | None = None):
        self.fn = fn
        self.block = block  # the contract's exact block (x first), or None
        self.shared_pool = None  # (global, {id(alloc op): byte offset}), made on first use
        self.coarsen = coarsen
        self.logical = None  # the logical-thread counter j of a coarsened kernel
        self.module = module
        self.env: dict[int, object] = {}
        self.loops: list[tuple] = []      # (continue block, break block)
        self.inlines: list = []           # exit blocks of scf.inline
        self.uses_libdevice = False
        self.pending_errors: list = []  # deferred failed-check records (llvm/mma.py)
        reads = checked_reads()
        self.checked = any(op.attrs.get("checked") for op in fn.walk() if op.name in reads)

    # signature ------------------------------------------------------------------------------

    def build(self) -> ir.Function:
        slots = abi(self.fn, self.checked, self.coarsen).slots
        arg_types = [GPTR if s.kind in (PTR, ERROR_WORD) else
                     nvvm.memory_type(self.fn.params[s.param].type.dtype) if s.kind == SCALAR
                     else I64 for s in slots]
        layout = [(self.fn.params[s.param], k) for k, s in enumerate(slots)
                  if s.kind in (PTR, SCALAR)]
        func = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arg_types), self.fn.name)
        func.calling_convention = "ptx_kernel"
        # allocas go to a block of their own, so that the builder filling it never shares a
        # block with the main builder (llvmlite builders keep their insertion point by index)
        self.entry = func.append_basic_block("entry")
        self.b = ir.IRBuilder(func.append_basic_block("start"))
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
        extra = list(args[len(arg_types) - self.checked - (self.coarsen > 1):])
        self.error_word = extra.pop(0) if self.checked else None
        self.logical_threads = extra.pop(0) if self.coarsen > 1 else None
        done = func.append_basic_block("done")
        if self.coarsen == 1:
            self.exit = done
            self.region(self.fn.body)
            self.close(done)
        else:
            self.coarsened_body(done)
        self.b.position_at_end(done)
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(func.basic_blocks[1])
        return func

    def coarsened_body(self, done) -> None:
        """Run the body for ``coarsen`` logical threads: index + j * (all threads), j < coarsen.

        Each hardware thread then keeps several independent loads in flight, which a memory-bound
        kernel needs to reach the bandwidth of HBM (Little's law); the loop has a constant trip
        count and LLVM unrolls it. A kernel-level ``return`` ends one logical thread only.
        Logical threads past the launch's own thread count (the last parameter) do not run, so
        the kernel sees exactly the threads of the launch it was prepared for.
        """
        pre = self.b.block
        head, body, latch = (self.new_block(n) for n in ("thread", "run_thread", "next_thread"))
        self.b.branch(head)
        self.b.position_at_end(head)
        self.logical = self.b.phi(I64)
        self.logical.add_incoming(ir.Constant(I64, 0), pre)
        index = _global_index(self, _coarsened_axis(self.fn.attrs["index_space"]))
        self.b.cbranch(self.b.icmp_unsigned("<", index, self.logical_threads), body, latch)
        self.b.position_at_end(body)
        self.exit = latch
        self.region(self.fn.body)
        self.close(latch)
        self.b.position_at_end(latch)
        nxt = self.b.add(self.logical, ir.Constant(I64, 1))
        self.logical.add_incoming(nxt, latch)
        self.b.cbranch(self.b.icmp_unsigned("<", nxt, ir.Constant(I64, self.coarsen)), head, done)

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
            if op.regions or op.name in EXITS:
                mma.flush_errors(self)  # deferred checks are recorded on every path
            rule(self, op)
        if not self.b.block.is_terminated:
            mma.flush_errors(self)

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
        """Write (site * 8 + axis, index) of an out-of-bounds read to the error word; the first
        thread wins, by compare-and-swap on word 0. The host knows the extents."""
        b = self.b
        code, bad_index = ir.Constant(I64, op.attrs["site"] * 8), indices[0]
        for k in reversed(range(1, len(indices))):  # ends on the lowest out-of-bounds axis
            take = b.icmp_unsigned(">=", indices[k], arr.shape[k])
            take = b.and_(take, b.icmp_unsigned("<", indices[0], arr.shape[0]))
            code = b.select(take, ir.Constant(I64, op.attrs["site"] * 8 + k), code)
            bad_index = b.select(take, indices[k], bad_index)
        old = b.cmpxchg(self.error_word, ir.Constant(I64, 0), code, "monotonic", "monotonic")
        with b.if_then(b.extract_value(old, 1)):
            b.store(bad_index, b.gep(self.error_word, [ir.Constant(I64, 1)], source_etype=I64))


# Logical threads per hardware thread, by index space (0: the kernel uses no thread index).
# The launch divides the grid along its slowest axis, x (1-d), y (2-d) or z (3-d), by the same
# factor: a warp's threads stay consecutive along x (coalesced), and each thread gets the
# independent loads in flight that a memory-bound kernel needs, whatever the rank.
COARSEN = {0: 1, 1: 4, 2: 4, 3: 4}


def _coarsened_axis(space: int) -> str:
    """The launch axis a coarsened kernel repeats its logical threads along: the slowest."""
    return "xyz"[space - 1]


def abi(fn: Function, checked: bool, coarsen: int) -> Abi:
    """The entry's parameter slots (see the module docstring): ``checked`` when a read is
    bounds-checked (an error word), ``coarsen`` logical threads per thread (> 1: a thread
    count)."""
    params = [(p.type.dtype, p.type.ndim, p.type.contiguous) if isinstance(p.type, Array)
              else (p.type.dtype, None, True) for p in fn.params]
    # the slowest axis: x, y (2-d), z (3-d)
    axis = fn.attrs.get("index_space", 1) - 1 if coarsen > 1 else None
    return simt_abi(params, checked, axis)


def lower(fn: Function, block: tuple | None = None, max_threads: int | None = None
          ) -> tuple[ir.Module, bool, int]:
    """An LLVM module holding kernel ``fn``, whether it calls libdevice (to be linked), and the
    number of logical threads each hardware thread runs (see ``Lowering.coarsened_body``).
    ``block`` / ``max_threads``: the launch contract's exact block or bound (``.reqntid`` /
    ``.maxntid``)."""
    module = ir.Module(name=fn.name)
    module.triple = "nvptx64-nvidia-cuda"
    module.data_layout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
    # threads of a block meet at barriers and share memory: one logical thread each
    coarsen = 1 if fn.attrs.get("block_level") else COARSEN[fn.attrs.get("index_space", 0)]
    lowering = Lowering(fn, module, coarsen, block)
    nvvm.launch_bounds(module, lowering.build(), block, max_threads)
    return module, lowering.uses_libdevice, coarsen


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


def _global_index(low: Lowering, axis: str, coarsened: bool = True):
    """blockIdx * blockDim + threadIdx along ``axis``, plus j * (threads of the grid) for the
    j-th logical thread of a coarsened kernel."""
    b = low.b
    ntid = nvvm.special_register(b, "ntid", axis, low.block)
    index = b.add(b.mul(nvvm.special_register(b, "ctaid", axis), ntid),
                  nvvm.special_register(b, "tid", axis, low.block))
    if coarsened and low.logical is not None:
        threads = b.mul(nvvm.special_register(b, "nctaid", axis), ntid)
        index = b.add(index, b.mul(low.logical, threads))
    return index


def _thread_index(low: Lowering, op):
    if op.attrs.get("block"):
        low.set(op, simt.block_thread_index(low, op))
        return
    space = op.attrs["space"]
    axis = "xyz"[space - 1 - op.attrs["axis"]]  # the last index is x, the fast axis
    low.set(op, _global_index(low, axis, axis == _coarsened_axis(space)))


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
    # The load itself is unconditional: an out-of-bounds read loads element 0 instead (the
    # host passes a valid dummy pointer for an empty array) and yields 0, so loads stay
    # straight-line code the scheduler can overlap; recording the error is a cold branch.
    b = low.b
    ok = low.in_bounds(arr, indices)
    zero = ir.Constant(I64, 0)
    value = low.load_element(arr, [b.select(ok, i, zero) for i in indices])
    low.set(op, b.select(ok, value, ir.Constant(value.type, None)))
    with b.if_then(b.not_(ok), likely=False):
        low.record_bounds_error(op, arr, indices)


def _store(low: Lowering, op):
    arr = low.v(op.operands[0])
    indices = [low.v(v) for v in op.operands[1:-1]]
    value = low.v(op.operands[-1])
    d = arr.ty.dtype
    if d.is_bool:
        value = low.b.zext(value, I8)
    if op.attrs.get("proved"):  # passes/inbounds.py: in bounds wherever it runs
        low.b.store(value, low.address(arr, indices), align=d.itemsize)
        return
    with low.b.if_then(low.in_bounds(arr, indices)):  # the last block's tail is skipped
        low.b.store(value, low.address(arr, indices), align=d.itemsize)


def _slot_type(ref_type: LocalRef) -> ir.Type:
    elem = ref_type.elem
    return I64 if isinstance(elem, ThreadIndex) else llvm_type(elem.dtype)


def _alloc(low: Lowering, op):
    ty = _slot_type(op.result.type)
    slot = ir.IRBuilder(low.entry).alloca(ty)  # in the entry block, where mem2reg finds them
    low.b.store(ir.Constant(ty, None), slot)  # zeroed at each (logical) thread's start
    low.set(op, slot)


def _local_load(low: Lowering, op):
    low.set(op, low.b.load(low.v(op.operands[0]), typ=_slot_type(op.operands[0].type)))


def _local_store(low: Lowering, op):
    low.b.store(low.v(op.operands[1]), low.v(op.operands[0]))


RULES = {
    Op.SCF_IF: _if, Op.SCF_FOR: _for, Op.SCF_WHILE: _while, Op.SCF_CONDITION: _condition,
    Op.SCF_INLINE: _inline, Op.CF_BREAK: _break, Op.CF_CONTINUE: _continue, Op.CF_RETURN: _return,
    Op.SIMT_THREAD_INDEX: _thread_index, Op.SIMT_INDEX_VALUE: _index_value,
    Op.MEM_DIM: _dim, Op.MEM_LOAD: _load, Op.MEM_STORE: _store,
    Op.LOCAL_ALLOC: _alloc, Op.LOCAL_LOAD: _local_load, Op.LOCAL_STORE: _local_store,
    **arith.RULES,
    **simt.RULES,
    **warp.RULES,
    **mma.RULES,
}

# tile ops belong to tile kernels, which run on the cpu tile interpreter and the Tile IR backend
UNSUPPORTED = {name: "tile kernels only" for name in only("tile")}
