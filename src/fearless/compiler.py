"""The SIMT compile pipeline as an ordered table of named stages.

    ast     the captured Python AST (printed with ast.dump)
    ir      fearless IR straight from the frontend
    passes  the IR after the safety passes (what the CPU backend interprets)
    llvm    optimised LLVM IR (libdevice linked when used)
    ptx     PTX for the target arch
    cubin   machine code, assembled by nvJitLink

``compile_simt(..., until=stage)`` runs the stages up to and including ``stage`` and returns a
``Compiled`` holding every stage's output; ``show(compiled, stage)`` renders one as text.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from fearless.backends.llvm.lower import lower
from fearless.backends.llvm.ptx import emit_ptx, optimize
from fearless.frontend.astgen import generate
from fearless.frontend.capture import Captured
from fearless.ir import types as T
from fearless.ir.core import Function
from fearless.ir.printer import print_function
from fearless.ir.verify import verify
from fearless.passes import PassOptions, run_all
from fearless.runtime.module import ptx_to_cubin


@dataclass
class Compiled:
    """What compiling one specialisation produced; later stages are None until run."""

    name: str
    param_types: tuple
    ast: str | None = None
    ir: str | None = None
    fn: Function | None = None          # IR after the passes
    llvm: str | None = None
    ptx: str | None = None
    cubin: bytes | None = None
    meta: dict = field(default_factory=dict)  # index_space, bounds_sites


@dataclass
class _State:
    cap: Captured
    params: list[tuple[str, T.Type]]
    options: PassOptions
    arch: str | None
    out: Compiled
    contract: object = None  # runtime.contract.Contract: launch bounds written into the PTX
    llvm_module: object = None


def _ast(s: _State):
    s.out.ast = ast.dump(s.cap.tree, indent=2)


def _ir(s: _State):
    s.out.fn = verify(generate(s.cap, s.params))
    s.out.ir = print_function(s.out.fn)


def _passes(s: _State):
    fn = run_all(s.out.fn, s.options, verify)
    s.out.fn = fn
    s.out.meta = {"index_space": fn.attrs["index_space"],
                  "bounds_sites": [(name, span) for name, span in fn.attrs["bounds_sites"]],
                  "shared": fn.attrs.get("shared", ()),
                  "warp_full": bool(fn.attrs.get("warp_full"))}


def _llvm(s: _State):
    c = s.contract
    module, uses_libdevice, coarsen = lower(s.out.fn, c.block if c else None,
                                            c.max_threads if c else None)
    s.out.meta["coarsen"] = coarsen
    s.llvm_module = optimize(module, s.cap.name, s.arch, uses_libdevice)
    s.out.llvm = str(s.llvm_module)


def _ptx(s: _State):
    s.out.ptx = emit_ptx(s.llvm_module, s.arch)


def _cubin(s: _State):
    s.out.cubin = ptx_to_cubin(s.out.ptx, s.arch, s.cap.name)


SIMT_STAGES = (("ast", _ast), ("ir", _ir), ("passes", _passes), ("llvm", _llvm),
               ("ptx", _ptx), ("cubin", _cubin))
STAGE_NAMES = tuple(name for name, _ in SIMT_STAGES)


def compile_simt(cap: Captured, params: list[tuple[str, T.Type]], options: PassOptions,
                 arch: str | None, until: str = "cubin", contract=None) -> Compiled:
    """Run the stages up to ``until``. GPU stages (llvm and later) need ``arch``; ``contract``
    (a launch contract) adds its launch bounds to the code."""
    if until not in STAGE_NAMES:
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(STAGE_NAMES)}")
    state = _State(cap, params, options, arch, Compiled(cap.name, tuple(t for _, t in params)),
                   contract)
    for name, stage in SIMT_STAGES:
        if name in ("llvm", "ptx", "cubin") and arch is None:
            raise ValueError(f"stage {name!r} needs a target arch such as 'sm_90'")
        stage(state)
        if name == until:
            break
    return state.out


def show(compiled: Compiled, stage: str) -> str:
    """The text of one stage's output (a cubin is summarised, not dumped)."""
    if stage == "passes":
        return print_function(compiled.fn)
    if stage == "cubin":
        return f"cubin: {len(compiled.cubin)} bytes\n"
    text = getattr(compiled, stage)
    return text if text.endswith("\n") else text + "\n"
