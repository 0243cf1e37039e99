"""Run the LLVM backend's scalar rules on this machine's CPU, to hold them to the CPU backend.

The rules of ``backends/llvm/arith.py`` build target-independent LLVM IR; only libdevice calls
and NVVM intrinsics tie it to the GPU. Here one IR op is lowered by its real rule inside a loop
over arrays, compiled for the host by llvmlite's MCJIT, and run on NumPy arrays: the same IR
the GPU compiles, with LLVM's own semantics, checked without a GPU. libdevice's ``__nv_fmod[f]``
(the only libdevice function these rules call) is bound to the C library's exact ``fmod``, and
the runtime-library conversions x86 code calls for half and bfloat (``__truncsfbf2`` ...) to
NumPy's correctly rounded ones (a 16-bit float travels in the low bits of an SSE register).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from fearless import dtypes
from fearless.backends.llvm import arith
from fearless.backends.llvm.nvvm import llvm_type
from fearless.ir import types as T
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
