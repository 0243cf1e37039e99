"""Bounds checks on reads: mark every read of user memory (the ops whose OpDef says
``checked_read``: ``mem.load``, and ``mem.atomic``, ``warp.ldmatrix``, ``mem.async_copy``, which
also check alignment) checked and number it.

A checked read that is out of bounds is skipped (it yields zero) and the first such event of a
launch is recorded (site, index, extent, axis) in the launch's error word; the host raises
``KernelBoundsError`` at the next synchronisation. ``fn.attrs["bounds_sites"]`` maps a site number
to ``(parameter name, span)`` for that message. ``fl.unchecked`` kernels skip this pass's marks.
"""
from __future__ import annotations

from fearless.analysis.common import array_name, params_by_value
from fearless.ir.core import Function
from fearless.ir.opdef import Op, checked_reads


def run(fn: Function, options) -> Function:
    params = params_by_value(fn)
    sites = []
    reads = checked_reads()
    for op in fn.walk():
        if op.name not in reads:
            continue
        op.attrs["checked"] = options.bounds_checks
        if options.bounds_checks:
            op.attrs["site"] = len(sites) + 1  # 0 means "no error" in the error word
            # an async copy reads its source (operand 1 + the destination's rank)
            array = op.operands[1 + op.attrs["ndst"] if op.name == Op.MEM_ASYNC_COPY else 0]
            sites.append((array_name(params, array), op.span))
    fn.attrs["bounds_sites"] = tuple(sites)
    return fn
