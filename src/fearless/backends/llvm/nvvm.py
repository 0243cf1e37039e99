"""NVPTX specifics: types of dtypes, special registers, LLVM intrinsics and libdevice.

libdevice (``libdevice.10.bc``, NVIDIA's math library as LLVM bitcode) is found with
cuda.pathfinder (the ``nvidia-nvvm`` wheel, or a CUDA toolkit), parsed by llvmlite and linked
into a kernel module only when the kernel calls one of its functions.
"""
from __future__ import annotations

import functools

from llvmlite import ir

from fearless import dtypes
from fearless.dtypes import DType, Kind
from fearless.errors import BackendError

GLOBAL = 1  # NVPTX address space of global memory


class BFloatType(ir.Type):
    """LLVM's ``bfloat``, which llvmlite.ir lacks; constants print as ``0xR`` + 4 hex digits."""

    null = "0xR0000"
    intrinsic_name = "bf16"

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, BFloatType)

    def __hash__(self):
        return hash(BFloatType)

    def format_constant(self, value):
        return f"0xR{dtypes.float_bits(value, dtypes.bf16):04X}"  # rounded once


I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
GPTR = ir.PointerType(addrspace=GLOBAL)


def llvm_type(d: DType) -> ir.Type:
    """Register type of a dtype (bool is i1 in registers, i8 in memory)."""
    if d.kind is Kind.BOOL:
        return I1
    if d.is_int:
        return ir.IntType(d.bits)
    return {16: BFloatType() if d.name == "bf16" else ir.HalfType(), 32: F32,
            64: ir.DoubleType()}[d.bits]


def memory_type(d: DType) -> ir.Type:
    return I8 if d.kind is Kind.BOOL else llvm_type(d)


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def special_register(builder: ir.IRBuilder, reg: str, axis: str,
                     block: tuple | None = None) -> ir.Value:
    """``%tid.x`` and friends, zero-extended to i64 (reg: tid, ctaid, ntid, nctaid).

    ``block``: the launch contract's exact block (x first), which ``launch_bounds`` makes the
    only one the driver accepts. Then ``%ntid`` is that constant and ``%tid`` carries the range
    ``[0, extent)`` (0 itself along an axis of extent 1), so LLVM folds index arithmetic and
    drops the bounds checks that only fail for threads outside the block."""
    if block is not None and reg in ("tid", "ntid"):
        extent = (tuple(block) + (1, 1))["xyz".index(axis)]
        if reg == "ntid":
            return ir.Constant(I64, extent)
        if extent == 1:
            return ir.Constant(I64, 0)
    fn = intrinsic(builder.module, f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", I32, [])
    value = builder.call(fn, [])
    if block is not None and reg == "tid":
        value.set_metadata("range", builder.module.add_metadata(
            [ir.Constant(I32, 0), ir.Constant(I32, extent)]))
    return builder.zext(value, I64)


@functools.lru_cache(maxsize=1)
def libdevice_path() -> str:
    try:
        from cuda.pathfinder import find_bitcode_lib
        return find_bitcode_lib("device")
    except Exception as exc:  # not installed: math functions cannot be compiled
        raise BackendError(f"libdevice.10.bc was not found ({exc})",
                           help="pip install nvidia-nvvm (it ships libdevice)") from None


@functools.lru_cache(maxsize=1)
def libdevice_bitcode() -> bytes:
    with open(libdevice_path(), "rb") as f:
        return f.read()


def launch_bounds(module: ir.Module, fn: ir.Function, block: tuple | None,
                  max_threads: int | None) -> None:
    """Annotate kernel ``fn`` with ``.reqntid x, y, z`` (an exact block, x first) or
    ``.maxntid n``: ``nvvm.annotations`` metadata, which LLVM 22 upgrades to the
    ``"nvvm.reqntid"``/``"nvvm.maxntid"`` function attributes when it parses the module. The
    driver then refuses any other block, even on a raw launch."""
    if block is None and max_threads is None:
        return
    items: list = [fn]
    if block is not None:
        for axis, n in zip("xyz", tuple(block) + (1,) * (3 - len(block))):
            items += [ir.MetaDataString(module, f"reqntid{axis}"), ir.Constant(I32, n)]
    else:
        items += [ir.MetaDataString(module, "maxntidx"), ir.Constant(I32, max_threads)]
    module.add_named_metadata("nvvm.annotations").add(module.add_metadata(items))
