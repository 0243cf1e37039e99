"""LLVM module -> optimised LLVM IR -> PTX text, with llvmlite's NVPTX target (no CUDA toolkit).

libdevice is linked only when the kernel calls it; afterwards every function but the kernel is
made internal so that the optimiser drops the unused rest of libdevice.
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm
from llvmlite import ir

from fearless.backends.llvm import nvvm
from fearless.errors import InternalError

TRIPLE = "nvptx64-nvidia-cuda"
PTX_VERSION = "+ptx80"  # PTX ISA 8.0: sm_90 support; accepted by CUDA 12.0+ drivers


@functools.lru_cache(maxsize=None)
def _target_machine(arch: str):
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=arch, features=PTX_VERSION, opt=3)


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


def optimize(module: ir.Module, kernel: str, arch: str, libdevice: bool) -> llvm.ModuleRef:
    """Parse, link libdevice if asked, internalise helpers and run LLVM's O3 pipeline."""
    tm = _target_machine(arch)
    try:
        mod = llvm.parse_assembly(str(module))
        mod.verify()
    except RuntimeError as exc:
        raise InternalError(f"fearless produced invalid LLVM IR for '{kernel}': {exc}") from exc
    if libdevice:
        lib = llvm.parse_bitcode(nvvm.libdevice_bitcode())
        lib.triple = mod.triple
        lib.data_layout = mod.data_layout
        mod.link_in(lib)
        for fn in mod.functions:
            if fn.name != kernel and not fn.is_declaration:
                fn.linkage = "internal"
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


def emit_ptx(mod: llvm.ModuleRef, arch: str) -> str:
    return _target_machine(arch).emit_assembly(mod)
