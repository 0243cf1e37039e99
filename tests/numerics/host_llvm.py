"""Run the LLVM backend's scalar rules, or a whole SIMT kernel's lowering, on this machine's CPU,
to hold them to the CPU backend.

The rules of ``backends/llvm/arith.py`` build target-independent LLVM IR; only libdevice calls
and NVVM intrinsics tie it to the GPU. Here one IR op is lowered by its real rule inside a loop
over arrays, compiled for the host by llvmlite's MCJIT, and run on NumPy arrays: the same IR
the GPU compiles, with LLVM's own semantics, checked without a GPU. libdevice's ``__nv_fmod[f]``
(the only libdevice function these rules call) is bound to the C library's exact ``fmod``, and
the runtime-library conversions x86 code calls for half and bfloat (``__truncsfbf2`` ...) to
NumPy's correctly rounded ones (a 16-bit float travels in the low bits of an SSE register).

``run_kernel`` runs a whole kernel as ``backends/llvm/lower.py`` builds it for NVPTX: the PTX
special registers (``%tid.x`` ...) become globals set here, the ``ptx_kernel`` calling convention
goes, and a wrapper loads the kernel's arguments (the ABI of ``lower.py``) from one buffer of
8-byte slots. Threads run one after another: enough for kernels without barriers, shared memory,
warp operations or atomics. No LLVM optimisation and no FMA (a generic CPU), so it shows what the
lowering rules compute, not what the NVPTX backend makes of them.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from fearless import dtypes
from fearless.backends.llvm import arith
from fearless.backends.llvm.lower import lower
from fearless.backends.llvm.nvvm import llvm_type
from fearless.ir import types as T
from fearless.compiler import compile_simt
from fearless.ir.core import Operation, Value

_I64 = ir.IntType(64)


class _Low:
    """The part of the LLVM lowering's state that the scalar rules use."""

    def __init__(self, builder, env):
        self.b, self.env, self.uses_libdevice = builder, env, False

    def v(self, value):
        return self.env[id(value)]

    def set(self, op, value):
        self.env[id(op.results[0])] = value


def _low16_float(bits: int) -> float:
    """A float whose f32 bit pattern holds ``bits`` in its low 16 bits."""
    return float(np.uint32(bits).view(np.float32))


def _bits16(x: float) -> int:
    return int(np.float32(x).view(np.uint32)) & 0xFFFF


def _to16(dst: dtypes.DType, src: type):
    return lambda x: _low16_float(int(dtypes.convert(np.asarray(x, src), dst).view(np.uint16)))


def _from16(src: dtypes.DType):
    return lambda x: float(np.uint16(_bits16(x)).view(src.numpy))


_F, _D = ctypes.c_float, ctypes.c_double
_LIBCALLS = {  # name: (C signature, implementation)
    "__truncsfbf2": ((_F, _F), _to16(dtypes.bf16, np.float32)),
    "__truncdfbf2": ((_F, _D), _to16(dtypes.bf16, np.float64)),
    "__truncsfhf2": ((_F, _F), _to16(dtypes.f16, np.float32)),
    "__truncdfhf2": ((_F, _D), _to16(dtypes.f16, np.float64)),
    "__extendhfsf2": ((_F, _F), _from16(dtypes.f16)),
    "__extendbfsf2": ((_F, _F), _from16(dtypes.bf16)),
}
_KEEP = []


@functools.cache
def _target():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    for name, c_name in (("__nv_fmodf", "fmodf"), ("__nv_fmod", "fmod")):
        llvm.add_symbol(name, ctypes.cast(getattr(libm, c_name), ctypes.c_void_p).value)
    for name, (signature, impl) in _LIBCALLS.items():
        callback = ctypes.CFUNCTYPE(*signature)(impl)
        _KEEP.append(callback)
        llvm.add_symbol(name, ctypes.cast(callback, ctypes.c_void_p).value)
    return llvm.Target.from_default_triple().create_target_machine()


def _bits(d: dtypes.DType) -> ir.IntType:
    return ir.IntType(8 if d.is_bool else d.bits)


@functools.cache
def compiled(name: str, operands: tuple, result: dtypes.DType, attrs: tuple = ()):
    """A callable running op ``name`` (operand dtypes ``operands``, result ``result``) elementwise
    over NumPy arrays through its LLVM rule, on the host."""
    values = [Value(T.Scalar(d)) for d in operands]
    op = Operation(name, values, [T.Scalar(result)], dict(attrs))
    module = ir.Module("host")
    module.triple = llvm.get_process_triple()
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (len(values) + 1) + [_I64]),
                     "run")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    n = fn.args[-1]
    b.cbranch(b.icmp_signed(">", n, ir.Constant(_I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(_I64)
    i.add_incoming(ir.Constant(_I64, 0), entry)
    env = {}
    for value, d, p in zip(values, operands, fn.args):
        raw = b.load(b.gep(p, [i], source_etype=_bits(d)), typ=_bits(d))
        env[id(value)] = (b.trunc(raw, ir.IntType(1)) if d.is_bool
                          else b.bitcast(raw, llvm_type(d)))
    low = _Low(b, env)
    arith.RULES[name](low, op)
    out = low.v(op.results[0])
    out = b.zext(out, ir.IntType(8)) if result.is_bool else b.bitcast(out, _bits(result))
    b.store(out, b.gep(fn.args[len(values)], [i], source_etype=_bits(result)))
    nxt = b.add(i, ir.Constant(_I64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, _target())
    engine.finalize_object()
    address = engine.get_function_address("run")
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(values) + 1), ctypes.c_int64)(address)

    def run(*arrays):
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
        arrays = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, d.numpy), shape))
                  for a, d in zip(arrays, operands)]
        out = np.empty(shape, result.numpy)
        cfunc(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
        return out
    run.keep = engine  # the machine code lives as long as the engine
    return run


class Unsupported(Exception):
    """The kernel needs something ``run_kernel`` does not provide (libdevice beyond fmod)."""


_REGS = [f"{reg}.{axis}" for reg in ("tid", "ctaid", "ntid", "nctaid") for axis in "xyz"]


def _host_text(module: ir.Module, kernel: str) -> str:
    """The kernel module's text for the host, with the entry ``fl.entry(ptr slots)``."""
    text = str(module).replace("ptx_kernel ", "")
    text = re.sub(r'target triple = ".*"', f'target triple = "{llvm.get_process_triple()}"', text)
    text = re.sub(r'target datalayout = ".*"', "", text)
    for reg in _REGS:
        name = f"llvm.nvvm.read.ptx.sreg.{reg}"
        text = re.sub(rf'declare i32 @"?{re.escape(name)}"?\(\)[^\n]*', "", text)
        text = text.replace(f'@"{name}"', f'@"fl.sreg.{reg}"').replace(f"@{name}",
                                                                       f'@"fl.sreg.{reg}"')
        text += (f'\n@"fl.reg.{reg}" = global i32 0\n'
                 f'define i32 @"fl.sreg.{reg}"() {{\n'
                 f'  %v = load i32, ptr @"fl.reg.{reg}"\n  ret i32 %v\n}}\n')
    args = module.get_global(kernel).args
    loads = "".join(f"  %p{k} = getelementptr i64, ptr %slots, i64 {k}\n"
                    f"  %a{k} = load {a.type}, ptr %p{k}\n" for k, a in enumerate(args))
    call = ", ".join(f"{a.type} %a{k}" for k, a in enumerate(args))
    return text + (f"\ndefine void @fl.entry(ptr %slots) {{\n{loads}"
                   f'  call void @"{kernel}"({call})\n  ret void\n}}\n')


def run_kernel(kernel, types: tuple, args: list, n: int) -> None:
    """Run SIMT ``kernel`` specialised to ``types`` over ``n`` threads of one 1-d block, on NumPy
    arrays (written in place) and NumPy scalars ``args``, through its LLVM lowering on the host.
    Raises Unsupported, or AssertionError when a bounds-checked read failed."""
    _target()  # the runtime-library bindings
    params = [(p.name, t) for p, t in zip(kernel.params, types)]
    passes = compile_simt(kernel.captured, params, kernel._options(), None, "passes",
                          kernel.contract)
    module, _, _ = lower(passes.fn)
    libdevice = {f.name for f in module.functions if f.name.startswith("__nv_")}
    if libdevice - {"__nv_fmod", "__nv_fmodf"}:
        raise Unsupported(f"libdevice's {sorted(libdevice)}")
    mod = llvm.parse_assembly(_host_text(module, kernel.name))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple()
                                        .create_target_machine())  # it owns the machine
    engine.finalize_object()
    slots = []
    for t, a in zip(types, args):
        if isinstance(t, T.Array):
            slots += [a.ctypes.data, *a.shape]
            if not t.contiguous:
                slots += [s // a.itemsize for s in a.strides]
        else:
            raw = np.zeros(8, np.uint8)
            raw[:a.itemsize] = np.asarray(a).reshape(1).view(np.uint8)
            slots.append(int(raw.view(np.uint64)[0]))
    error_word = np.zeros(2, np.int64)
    extra = module.get_global(kernel.name).args[len(slots):]  # error word, thread count
    slots += [error_word.ctypes.data if a.type.is_pointer else n for a in extra]
    buffer = np.array(slots, dtype=np.uint64)
    reg = {r: ctypes.c_int32.from_address(engine.get_global_value_address(f"fl.reg.{r}"))
           for r in _REGS}
    for r in _REGS:
        reg[r].value = 1 if r.startswith("n") else 0
    reg["ntid.x"].value = n
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address("fl.entry"))
    for tid in range(n):
        reg["tid.x"].value = tid
        entry(buffer.ctypes.data)
    if error_word[0]:
        raise AssertionError(f"an out-of-bounds read: error word {error_word.tolist()}")
