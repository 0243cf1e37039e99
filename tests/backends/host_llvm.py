"""Run a SIMT kernel's LLVM lowering on this machine's CPU, to check its values without a GPU.

The module ``backends/llvm/lower.py`` builds for NVPTX is rewritten for the host: the PTX special
registers (``%tid.x`` ...) become globals this harness sets, the ``ptx_kernel`` calling
convention goes, and a wrapper loads the kernel's arguments (the kernel ABI of ``lower.py``)
from one buffer of 8-byte slots, so no half-precision value crosses a C calling convention.
Threads run one after another, which is enough for kernels without barriers, shared memory,
warp operations or atomics. The code runs before LLVM's optimiser and without FMA (a generic
CPU with F16C only), so it shows what the lowering rules compute, not the NVPTX backend.
Kernels calling libdevice, or using bf16 (the host needs libgcc's bf16 conversions), are
refused with ``Unsupported``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import re

import llvmlite.binding as llvm
import numpy as np

from fearless.backends.llvm.lower import lower
from fearless.compiler import compile_simt
from fearless.ir import types as T

_REGS = [f"{reg}.{axis}" for reg in ("tid", "ctaid", "ntid", "nctaid") for axis in "xyz"]


class Unsupported(Exception):
    """The kernel needs something this harness does not provide."""


@functools.lru_cache(maxsize=1)
def _host() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        raise Unsupported(f"host LLVM runs on x86-64 here, not {platform.machine()}")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    gcc = ctypes.util.find_library("gcc_s")  # f64 -> f16 is a libgcc call on x86-64
    if gcc is None or not hasattr(ctypes.CDLL(gcc), "__truncdfhf2"):
        raise Unsupported("libgcc_s with __truncdfhf2 (GCC 12 or newer) is needed")
    llvm.load_library_permanently(gcc)


def _host_text(module, kernel: str) -> str:
    text = str(module).replace("ptx_kernel ", "")
    text = re.sub(r'target triple = ".*"', f'target triple = "{llvm.get_default_triple()}"', text)
    text = re.sub(r'target datalayout = ".*"', "", text)
    for reg in _REGS:
        name = f"llvm.nvvm.read.ptx.sreg.{reg}"
        text = re.sub(rf'declare i32 @"?{re.escape(name)}"?\(\)[^\n]*', "", text)
        text = text.replace(f"@{name}", f'@"fl.sreg.{reg}"').replace(f'@"{name}"',
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


def run(kernel, types: tuple, args: list, n: int) -> None:
    """Run ``kernel`` specialised to ``types`` over ``n`` threads of one 1-d block, on NumPy
    arrays (written in place) and NumPy scalars ``args``. Raises Unsupported."""
    _host()
    params = [(name, t) for (name, _), t in zip(kernel.params, types)]
    passes = compile_simt(kernel.captured, params, kernel._options(), None, "passes",
                          kernel.contract)
    module, libdevice, _ = lower(passes.fn)
    if libdevice or "bfloat" in str(module):
        raise Unsupported("libdevice or bf16")
    mod = llvm.parse_assembly(_host_text(module, kernel.name))
    mod.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(features="+f16c")
    engine = llvm.create_mcjit_compiler(mod, machine)  # owns the machine
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
