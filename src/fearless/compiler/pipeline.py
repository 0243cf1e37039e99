"""The compile pipelines (SIMT and tile) as ordered tables of named stages.

    ast     the captured Python AST (printed with ast.dump)
    types   each variable's type, per function, with its line (``frontend/typing.py``)
    ir      fearless IR straight from the frontend
    passes  the IR after the safety passes (what the CPU backend interprets)
    llvm    optimised LLVM IR (libdevice linked when used)
    ptx     PTX for the target arch
    cubin   machine code, assembled by nvJitLink
    sass    the cubin disassembled (nvdisasm or cuobjdump, when installed: ``runtime/disasm.py``)

Tile kernels (TILE_STAGES) share ``ast``, ``types``, ``ir`` and ``passes``
(``passes.TILE_PASSES``: what the CPU backend interprets and the GPU lowers), then:

    tileir  CUDA Tile IR bytecode (printed by tileirdisasm when tileiras is installed)
    cubin   machine code, from tileiras
    sass    the cubin disassembled

``compile_simt(..., until=stage)`` (and ``compile_tile``) runs the stages up to and including
``stage`` and returns a ``Compiled`` holding every stage's output; ``show(compiled, stage)``
renders one as text, and the stages named in ``dump`` (FEARLESS_DUMP) are printed to stderr as
they finish.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field, replace

from fearless.backends.cubin import frame_bytes
from fearless.backends.llvm.lower import abi as simt_abi, lower
from fearless.backends.llvm.ptx import emit_ptx, optimize
from fearless.backends.tileir import tileiras
from fearless.backends.tileir.hints import SPILLING_ACC_BYTES, entry_hints, kept_out, \
    largest_accumulator, sm_number
from fearless.backends.tileir.lower import abi as tile_abi, is_grouped, lower_tile, uses_pdl
from fearless.compiler.info import KernelInfo, ParamInfo
from fearless.errors import BackendError, PerformanceWarning
from fearless.frontend import tile_intrinsics, typing
from fearless.frontend.astgen import Dialect, generate
from fearless.frontend.capture import Captured
from fearless.frontend.tile_emit import TileEmitter
from fearless.ir import types as T
from fearless.ir.core import Function
from fearless.ir.opdef import Op, checked_reads
from fearless.ir.printer import print_function
from fearless.ir.verify import verify
from fearless.passes import TILE_PASSES, PassOptions, run_all
from fearless.runtime import disasm
from fearless.runtime.module import ptx_to_cubin
from fearless.tracebacks import warn_user

DEFAULT_TILE_VERSION = (13, 4)  # bytecode version when no tileiras is installed to ask
TILE = Dialect(TileEmitter, tile_intrinsics.attribute, tile_intrinsics.call,
               "tile kernels support numbers, tiles, tensor parameters, if and for (range), "
               "calls of @fearless.func functions, the math module and fearless.tile")


@dataclass
class Compiled:
    """What compiling one specialisation produced; later stages are None until run."""

    name: str
    param_types: tuple
    ast: str | None = None
    types: typing.Types | None = None   # the typing stage's (frontend/typing.py)
    ir: str | None = None
    fn: Function | None = None          # IR after the passes
    llvm: str | None = None
    ptx: str | None = None
    cubin: bytes | None = None
    sass: str | None = None
    tileir: bytes | None = None         # tile kernels: the Tile IR bytecode
    info: KernelInfo | None = None      # the facts the runtime reads (compiler/info.py)
    from_cache: bool = False            # read from the disk cache, not compiled here
    label: str = ""                     # what a compile prints: types, constants, target


@dataclass
class _State:
    cap: Captured
    params: list[tuple[str, T.Type]]
    options: PassOptions
    arch: str | None
    out: Compiled
    contract: object = None  # runtime.contract.Contract: launch bounds written into the PTX
    llvm_module: object = None
    constants: dict = field(default_factory=dict)  # tile kernels: ft.Const values by name
    hints: dict = field(default_factory=dict)      # tile kernels: Tile IR entry hints
    tma: bool = True                               # tile kernels: loads/stores may use TMA


def _ast(s: _State):
    s.out.ast = ast.dump(s.cap.tree, indent=2)


def _types(s: _State):
    s.out.types = typing.infer(s.cap, s.params)


def _ir(s: _State):
    s.out.fn = verify(generate(s.cap, s.params, s.out.types.slots))
    s.out.ir = print_function(s.out.fn)


def _passes(s: _State):
    fn = run_all(s.out.fn, s.options, verify)
    s.out.fn = fn
    # no read left checked: no error word (the lowering then takes no such parameter)
    reads = checked_reads()
    checked = any(op.attrs.get("checked") for op in fn.walk() if op.name in reads)
    s.out.info = KernelInfo(
        params_info(s.params), index_space=fn.attrs["index_space"],
        bounds_sites=tuple((name, span) for name, span in fn.attrs["bounds_sites"])
        if checked else (),
        bounds_preconditions=tuple(fn.attrs.get("bounds_preconditions", ())),
        shared=tuple(fn.attrs.get("shared", ())), warp_full=bool(fn.attrs.get("warp_full")),
        coverage=tuple(fn.attrs.get("coverage", {}).items()))


def params_info(params: list[tuple[str, T.Type]]) -> tuple[ParamInfo, ...]:
    """The runtime's view of IR parameters (SIMT arrays, tile tensor views, scalars)."""
    out = []
    for name, t in params:
        if isinstance(t, T.Array):
            out.append(ParamInfo(name, t.dtype, t.ndim, t.contiguous, t.access.writable,
                                 t.access is T.Access.DISJOINT))
        elif isinstance(t, T.TensorView):
            out.append(ParamInfo(name, t.dtype, t.ndim, True, t.role.written))
        else:
            out.append(ParamInfo(name, t.dtype))
    return tuple(out)


def _llvm(s: _State):
    c = s.contract
    module, uses_libdevice, coarsen = lower(s.out.fn, c.block if c else None,
                                            c.max_threads if c else None)
    s.out.info = replace(s.out.info, coarsen=coarsen,
                         abi=simt_abi(s.out.fn, bool(s.out.info.bounds_sites), coarsen))
    s.llvm_module = optimize(module, s.cap.name, s.arch, uses_libdevice)
    s.out.llvm = str(s.llvm_module)


def _ptx(s: _State):
    s.out.ptx = emit_ptx(s.llvm_module, s.arch)


def _cubin(s: _State):
    s.out.cubin = ptx_to_cubin(s.out.ptx, s.arch, s.cap.name)


def _sass(s: _State):
    s.out.sass = disasm.disassemble(s.out.cubin, s.cap.name)


SIMT_STAGES = (("ast", _ast), ("types", _types), ("ir", _ir), ("passes", _passes),
               ("llvm", _llvm), ("ptx", _ptx), ("cubin", _cubin), ("sass", _sass))
STAGE_NAMES = tuple(name for name, _ in SIMT_STAGES)


def compile_simt(cap: Captured, params: list[tuple[str, T.Type]], options: PassOptions,
                 arch: str | None, until: str = "cubin", contract=None,
                 resume: Compiled | None = None, dump=frozenset()) -> Compiled:
    """Run the stages up to ``until``. GPU stages (llvm and later) need ``arch``; ``contract``
    (a launch contract) adds its launch bounds to the code. ``resume``: a compile of the same
    kernel, parameters, options and contract that ran to ``passes`` (the cpu backend's); the
    GPU stages continue from its IR, which they only read, instead of proving it again."""
    if until not in STAGE_NAMES:
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(STAGE_NAMES)}")
    state = _State(cap, params, options, arch, Compiled(cap.name, tuple(t for _, t in params)),
                   contract)
    skip = ()
    if resume is not None:
        state.out.ast, state.out.ir, state.out.fn = resume.ast, resume.ir, resume.fn
        state.out.types = resume.types
        state.out.info = resume.info
        skip = STAGE_NAMES[:STAGE_NAMES.index("passes") + 1]
    for name, stage in SIMT_STAGES:
        if name in ("llvm", "ptx", "cubin", "sass") and arch is None:
            raise ValueError(f"stage {name!r} needs a target arch such as 'sm_90'")
        if name not in skip:
            stage(state)
            _dump(state, name, dump)
        if name == until:
            break
    return state.out


def _tile_types(s: _State):
    s.out.types = typing.infer(s.cap, s.params, TILE, s.constants)


def _tile_ir(s: _State):
    s.out.fn = verify(generate(s.cap, s.params, s.out.types.slots, TILE, s.constants))
    s.out.ir = print_function(s.out.fn)
    s.out.info = KernelInfo(params_info(s.params))


def _tile_passes(s: _State):
    s.out.fn = run_all(s.out.fn, s.options, verify, TILE_PASSES)


def _tileir(s: _State):
    tc = tileiras.find()
    version = tc.pick_version() if tc is not None else DEFAULT_TILE_VERSION
    s.out.tileir = lower_tile(s.out.fn, version, entry_hints(s.out.fn, s.hints, s.arch),
                              s.arch, tma=s.tma)
    types = [t for _, t in s.params]
    acc = s.out.fn.attrs.get("stream_k")
    s.out.info = KernelInfo(params_info(s.params), tile_abi(types, acc is not None),
                            grouped=is_grouped(types), pdl=uses_pdl(version, s.arch),
                            stream_k=() if acc is None else (acc.dtype, tuple(acc.shape)),
                            mma=any(op.name == Op.TILE_MMA for op in s.out.fn.walk()))


def _tile_cubin(s: _State):
    tc = tileiras.find()
    if tc is None:
        raise BackendError("compiling a tile kernel for the GPU needs tileiras, which is not "
                           "installed", kernel=s.cap.name, help=tileiras.FIX)
    s.out.cubin = tc.compile(s.out.tileir, s.arch, kernel=s.cap.name)
    spilled = frame_bytes(s.out.cubin)
    if spilled:  # in a tile kernel's code (no calls, no local arrays) the frame holds spills
        tiles = [t.tile_shape for _, t in s.params if getattr(t, "tile_shape", None)]
        warn_user(f"tile kernel '{s.cap.name}' spills registers on {s.arch}: {spilled} bytes "
                  f"of stack per thread{f' with tiles {tiles[0]}' if tiles else ''}; "
                  f"{_spill_advice(s, tiles)}", PerformanceWarning)


def _spill_advice(s: _State, tiles: list) -> str:
    """What to do about a tile kernel's spills: for an ft.mma kernel with a 128 x 256 f32
    accumulator or larger on sm_90 whose hints kept the worker-warp default away
    (``backends/tileir/hints.py``), that default; else smaller tiles or a lower occupancy hint,
    which leaves each thread more registers."""
    if largest_accumulator(s.out.fn) >= SPILLING_ACC_BYTES and sm_number(s.arch) == 90 \
            and kept_out(s.hints, s.arch):
        return (f"an f16 GEMM of 128 x 256 or 256 x 128 tiles that spills so runs at 6-10% of "
                f"cuBLAS on the H200; leave out the hints that keep fearless's default "
                f"hints={{'{s.arch}': {{'num_worker_warps_per_cta': 8}}}} away (two consumer warp "
                f"groups: no spills, 92-97% of cuBLAS), or use smaller tiles")
    return ("spills cost local-memory traffic in the kernel's loops; use smaller tiles, or a "
            "lower 'occupancy' hint (more registers per thread)")


TILE_STAGES = (("ast", _ast), ("types", _tile_types), ("ir", _tile_ir),
               ("passes", _tile_passes), ("tileir", _tileir), ("cubin", _tile_cubin),
               ("sass", _sass))
TILE_STAGE_NAMES = tuple(name for name, _ in TILE_STAGES)


def compile_tile(cap: Captured, params: list[tuple[str, T.Type]], constants: dict,
                 arch: str | None, until: str = "cubin", hints: dict | None = None,
                 dump=frozenset(), tma: bool = True) -> Compiled:
    """Run the tile stages up to ``until``; ``tileir`` and ``cubin`` need ``arch``. A compile
    that makes the IR also runs the passes: they refuse what the GPU cannot run, and the CPU
    backend interprets their output (``compiled.fn``), so ``until="ir"`` gives the same ``fn``
    as ``until="passes"`` (and ``compiled.ir``, the frontend's text). ``tma=False``: no tile
    load or store may use TMA (``FEARLESS_TMA``)."""
    if until not in TILE_STAGE_NAMES:
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(TILE_STAGE_NAMES)}")
    state = _State(cap, params, PassOptions(), arch,
                   Compiled(cap.name, tuple(t for _, t in params)), constants=constants,
                   hints=dict(hints or {}), tma=tma)
    if until == "ir":
        until = "passes"
    for name, stage in TILE_STAGES:
        if name in ("tileir", "cubin", "sass") and arch is None:
            raise ValueError(f"stage {name!r} needs a target arch such as 'sm_90'")
        stage(state)
        _dump(state, name, dump)
        if name == until:
            break
    return state.out


def _dump(s: _State, stage: str, dump) -> None:
    if stage in dump:
        print(f"// fearless: kernel '{s.cap.name}', stage {stage}, for {s.arch or 'cpu'}\n"
              f"{show(s.out, stage)}", end="", file=sys.stderr, flush=True)


def show(compiled: Compiled, stage: str) -> str:
    """The text of one stage's output (a cubin is summarised, not dumped)."""
    if stage == "passes":
        return print_function(compiled.fn)
    if stage == "types":
        return typing.show(compiled.types)
    if stage == "cubin":
        return f"cubin: {len(compiled.cubin)} bytes\n"
    if stage == "tileir":
        tc = tileiras.find()
        if tc is None:
            return f"Tile IR bytecode: {len(compiled.tileir)} bytes (install fearless[tile] " \
                   f"for tileirdisasm's text)\n"
        return tc.disasm(compiled.tileir)
    text = getattr(compiled, stage)
    return text if text.endswith("\n") else text + "\n"
