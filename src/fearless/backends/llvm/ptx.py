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
DATA_LAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
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
        wanted = frozenset(fn.name for fn in mod.functions
                           if fn.is_declaration and fn.name.startswith("__nv_"))
        mod.link_in(llvm.parse_bitcode(_libdevice_part(wanted)))
        for fn in mod.functions:
            if fn.name != kernel and not fn.is_declaration:
                fn.linkage = "internal"
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


@functools.lru_cache(maxsize=64)
def _libdevice_part(names: frozenset[str]) -> bytes:
    """The bitcode of libdevice cut down to the functions ``names`` and what they use. Linking
    all of libdevice and optimising it before the unused part is dropped took ~0.4 s for each
    kernel that calls one math function; the cut is made once per set of names."""
    lib = llvm.parse_bitcode(nvvm.libdevice_bitcode())
    lib.triple, lib.data_layout = TRIPLE, DATA_LAYOUT
    for item in (*lib.functions, *lib.global_variables):
        if not item.is_declaration and item.name not in names:
            item.linkage = "internal"
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(lib, llvm.create_pass_builder(_target_machine("sm_80"),  # any: DCE ignores it
                                         llvm.create_pipeline_tuning_options()))
    return lib.as_bitcode()


def emit_ptx(mod: llvm.ModuleRef, arch: str) -> str:
    return _target_machine(arch).emit_assembly(mod)
