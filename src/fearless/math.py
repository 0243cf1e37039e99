"""``fearless.math``: math functions that kernels of both tracks call and that neither Python's
``math`` nor NumPy has.

    @fl.kernel
    def gauss(u: fl.Slice[fl.f32], out: fl.DisjointSlice[fl.f32]):
        i = fl.thread.index_1d()
        if i < len(out):
            out[i] = math.sqrt(2.0) * fl.math.erfinv(2 * u[i] - 1)

The functions apply elementwise to tiles in tile kernels. Each is an intrinsic (its op in
``ir/ops/math.py`` maps to it through the op's user names); called on the host it raises
CompileError. What each computes, and its error bound on the GPU, is docs/semantics.md's.
"""
from __future__ import annotations

from fearless.simt.stub import intrinsic

_intrinsic = intrinsic("fearless.math", "a @fearless.kernel, @fearless.tile.kernel or "
                                        "@fearless.func")


@_intrinsic
def erfinv(x: float) -> float:
    """The inverse error function: the ``y`` with ``erf(y) == x``, for a float ``x`` in
    [-1, 1] (an integer becomes f64 in SIMT kernels, f32 in tile kernels); +-inf at +-1, NaN
    outside [-1, 1] and for NaN. The result has ``x``'s float type."""
