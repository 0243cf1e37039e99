"""``fearless.mma``: tensor cores from SIMT code (PTX ``mma.sync`` and ``ldmatrix``; sm_80+).

The operations of one warp on 16x16 (A), 16x8 (B) and 16x8 (C/D) matrix *fragments*: each lane
holds a few registers of each matrix, in the layout of the PTX ISA ("Matrix Fragments for
mma.m16n8k16 with floating point type"). With ``g = lane // 4`` and ``t = lane % 4``:

    A (16x16, row-major)  a = (a0, a1, a2, a3), u32 each holding 2 f16/bf16 (low half first):
                          a0 = A[g, 2t:2t+2], a1 = A[g+8, 2t:2t+2], a2 = A[g, 2t+8:2t+10],
                          a3 = A[g+8, 2t+8:2t+10]
    B (16x8, K x N)       b = (b0, b1): b0 = B[2t:2t+2, g], b1 = B[2t+8:2t+10, g]
    C, D (16x8, f32)      c = (c0, c1, c2, c3): c0, c1 = C[g, 2t], C[g, 2t+1];
                          c2, c3 = C[g+8, 2t], C[g+8, 2t+1]

    sync_m16n8k16(a, b, c, dtype=fl.f16) -> d     D = A @ B + C with f32 accumulation
                                  (``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}...f32``);
                                  ``dtype``: what the packed halves of a and b are, f16 or bf16
    ldmatrix(shared, index, count=4, trans=False) -> tuple of count u32
                                  ``ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16``:
                                  loads ``count`` 8x8 matrices of a 16-bit shared array; lanes
                                  8k .. 8k+7 give, as ``index`` (a tuple, one index per axis),
                                  the first element of rows 0..7 of matrix k (8 consecutive
                                  elements on the last axis, 16-byte aligned). Lane l receives,
                                  per matrix, row l // 4, elements 2 (l % 4) and 2 (l % 4) + 1
                                  (``trans``: column l // 4, rows 2 (l % 4) and 2 (l % 4) + 1).
                                  With count=4 and lane l giving (r0 + l % 16, k0 + 8 (l // 16))
                                  the result is exactly the A fragment of the 16x16 tile at
                                  (r0, k0); with trans=True over a K x N row-major tile, two B
                                  fragments (n0 .. n0+7 and n0+8 .. n0+15).
    pack(lo, hi) -> u32           two f16 (or two bf16) values as one fragment register

Safety: these are warp-collective (``.sync.aligned``): all 32 lanes must execute them together,
so a call under a condition that can differ within a warp (or after some lanes left a loop or
the kernel) is a ``SafetyError``, as for ``fl.warp`` operations; kernels using them need blocks
of whole warps. ``ldmatrix`` reads other threads' slots of the shared array, so the writes before
it must be separated by ``fl.sync_threads()`` (and, for ``fl.async_copy``, an
``fl.async_wait``). Its rows are bounds- and alignment-checked: a bad row reads row 0 instead and
raises ``KernelBoundsError`` at the next synchronisation. Every function here is an
intrinsic: only valid inside kernels (CompileError on the host).
"""
from __future__ import annotations

from fearless import dtypes
from fearless.simt.stub import intrinsic
from fearless.simt.views import DTypeLike, Index, SharedArray

_intrinsic = intrinsic("fearless.mma")

__all__ = ["sync_m16n8k16", "ldmatrix", "pack"]


@_intrinsic
def sync_m16n8k16(a: tuple[int, ...], b: tuple[int, ...], c: tuple[float, ...],
                  dtype: DTypeLike = dtypes.f16) -> tuple[float, float, float, float]:
    """``D = A @ B + C`` on the tensor cores, for one warp: A 16x16, B 16x8, C and D 16x8 f32
    (PTX ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32``).

    ``a``: 4 u32 registers and ``b``: 2, each holding two ``dtype`` values (f16 or bf16, a
    constant), ``c``: 4 f32; each lane holds its part in the PTX ISA's fragment layout (the
    module docstring). Returns this lane's 4 f32 of D. Warp-collective: under a condition that
    can differ within a warp it is a SafetyError; fragments of the wrong length or type are a
    CompileError. Needs sm_80+.
    """


@_intrinsic
def ldmatrix(shared: SharedArray, index: Index, count: int = 4,
             trans: bool = False) -> tuple[int, ...]:
    """``count`` (1, 2 or 4, a constant) 8x8 matrices of the 16-bit shared array ``shared``,
    as ``count`` u32 fragment registers (PTX ``ldmatrix.sync.aligned.m8n8.x{count}``).

    Lanes 8k .. 8k+7 give, as ``index`` (one index per axis), the first element of rows 0..7 of
    matrix k (8 consecutive elements on the last axis, 16-byte aligned); lane l receives, per
    matrix, row l // 4, elements 2 (l % 4) and 2 (l % 4) + 1 (``trans=True``: the transposed
    matrix). Warp-collective (SafetyError under a condition that can differ within a warp); the
    writes it reads must be before a ``fl.sync_threads()``. A row out of bounds or misaligned
    reads row 0 and raises ``KernelBoundsError`` at the next synchronisation.
    """


@_intrinsic
def pack(lo: float, hi: float) -> int:
    """Two f16 (or two bf16) values as one u32 fragment register, ``lo`` in the low half.
    Other dtypes are a CompileError (convert first: ``fl.mma.pack(fl.f16(x), fl.f16(y))``)."""
