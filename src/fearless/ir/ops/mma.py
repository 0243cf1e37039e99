"""Tensor-core and asynchronous-copy ops of SIMT kernels (PTX ``mma.sync``, ``ldmatrix``,
``cp.async``; sm_80 and newer).

    warp.mma %a0..%a3: u32, %b0, %b1: u32, %c0..%c3: f32 -> 4 x f32
        attrs shape "m16n8k16", ab (f16 | bf16), full (True: every lane of the warp takes part)
        D = A @ B + C for a 16x16 A (row), a 16x8 B (col), f32 C/D; each u32 packs two
        16-bit elements, the lower-indexed one in bits 0..15 (PTX ISA, "Matrix Fragments for
        mma.m16n8k16 with floating point type")
    warp.ldmatrix %shared, %i0, ... -> count x u32
        attrs count (1, 2, 4), trans (bool), full; the lane's indices name a row of 8 16-bit
        elements (lanes 8k .. 8k + 7 give the rows of matrix k); lane l gets, per matrix, the
        elements (l // 4, 2 (l % 4) + {0, 1}), or their transpose (PTX ``ldmatrix.m8n8``)
    mma.pack %lo, %hi -> u32                two f16 or bf16 values as one fragment register
    mem.async_copy %dst, %d0.., %src, %s0.. attrs size (4, 8, 16 bytes), cache (ca | cg),
        ndst (the dst's rank): copy ``size`` bytes from ``src[s0.., s_last : s_last + E]`` to
        chunk ``d_last`` of ``dst[d0..]`` (elements ``d_last * E ..``), E = size // itemsize;
        the data lands at a later ``mem.async_wait`` (PTX ``cp.async``)
    mem.async_commit                        close the thread's current group of copies
    mem.async_wait                          attr n: wait until at most n of the thread's latest
                                            groups are pending (``cp.async.wait_group n``)
"""
from __future__ import annotations

from fearless.dtypes import f32, u32
from fearless.ir.opdef import Op, define, no_results
from fearless.ir.types import INDEX, Access, Array, Scalar, ThreadIndex

REG = Scalar(u32)
ACC = Scalar(f32)
AB_TYPES = ("f16", "bf16")
COPY_SIZES = (4, 8, 16)


def _mma(op):
    if op.attrs.get("shape") != "m16n8k16" or op.attrs.get("ab") not in AB_TYPES:
        return f"bad mma attributes {op.attrs!r}"
    ops = op.operands
    if any(v.type != REG for v in ops[:6]) or any(v.type != ACC for v in ops[6:]):
        return "mma takes 4 + 2 u32 fragment registers and 4 f32 accumulators"
    return None if all(r.type == ACC for r in op.results) else "mma gives 4 f32"


def _index_ok(v):
    return v.type == INDEX or isinstance(v.type, ThreadIndex)


def _ldmatrix(op):
    count = op.attrs.get("count")
    if count not in (1, 2, 4) or len(op.results) != count:
        return f"ldmatrix gives 1, 2 or 4 registers, got count {count!r}"
    arr = op.operands[0]
    if not (isinstance(arr.type, Array) and arr.type.access is Access.SHARED
            and arr.type.dtype.bits == 16):
        return "ldmatrix reads a shared array of 16-bit elements"
    if len(op.operands) != 1 + arr.type.ndim or not all(map(_index_ok, op.operands[1:])):
        return "ldmatrix takes one index per axis"
    return None if all(r.type == REG for r in op.results) else "ldmatrix gives u32 registers"


def _pack(op):
    lo, hi = op.operands
    if lo.type != hi.type or not (isinstance(lo.type, Scalar) and lo.type.dtype.name in AB_TYPES):
        return "packs two f16 or two bf16 values"
    return None


def _async_copy(op):
    nd = op.attrs.get("ndst")
    size, cache = op.attrs.get("size"), op.attrs.get("cache")
    if size not in COPY_SIZES or cache not in ("ca", "cg") or (cache == "cg" and size != 16):
        return f"bad copy size {size!r} / cache {cache!r}"
    dst = op.operands[0]
    if not (isinstance(nd, int) and isinstance(dst.type, Array) and dst.type.ndim == nd
            and dst.type.access is Access.SHARED):
        return "the destination must be a shared array"
    src = op.operands[1 + nd]
    if not (isinstance(src.type, Array) and src.type.access is Access.READ
            and src.type.dtype == dst.type.dtype):
        return "the source must be a read-only array of the destination's dtype"
    if len(op.operands) != 2 + nd + src.type.ndim:
        return "one index per axis of each array"
    if not all(_index_ok(v) for k, v in enumerate(op.operands) if k not in (0, 1 + nd)):
        return "indices are i64 or thread indices"
    return None if size % dst.type.dtype.itemsize == 0 else "size is whole elements"


def _async_wait(op):
    n = op.attrs.get("n")
    return None if isinstance(n, int) and 0 <= n <= 7 else f"bad wait count {n!r}"


define(Op.WARP_MMA, "warp-wide tensor-core matrix multiply-accumulate (mma.sync.aligned)",
       _mma, side_effects=True, track="simt", warp_collective=True, operands=10, results=4,
       result=lambda ts, attrs: [ACC] * 4)
define(Op.WARP_LDMATRIX, "warp-wide load of 8x8 16-bit matrices from shared memory (ldmatrix)",
       _ldmatrix, side_effects=True, track="simt", checked_read=True, warp_collective=True,
       result=lambda ts, attrs: [REG] * attrs["count"])
define(Op.MMA_PACK, "two 16-bit floats as one u32 fragment register", _pack,
       track="simt", result=lambda ts, attrs: [Scalar(u32)], operands=2, results=1)
define(Op.MEM_ASYNC_COPY, "asynchronous global -> shared copy of 4/8/16 bytes (cp.async)",
       _async_copy, side_effects=True, track="simt", checked_read=True, result=no_results)
define(Op.MEM_ASYNC_COMMIT, "close the thread's group of async copies (cp.async.commit_group)",
       None, side_effects=True, track="simt", result=no_results, operands=0, results=0)
define(Op.MEM_ASYNC_WAIT, "wait for all but the n latest groups (cp.async.wait_group n)",
       _async_wait, side_effects=True, track="simt",
       result=no_results, operands=0, results=0)
