"""Drop pure ops whose results are never used (fewer ops for the CPU interpreter to run and for
the GPU lowerings to emit). In both pass lists; on the tile track after the checks, which must see
every op the user wrote."""
from __future__ import annotations

from fearless.ir.core import Function, Region
from fearless.ir.opdef import REGISTRY


def _uses(fn: Function) -> set[int]:
    return {id(v) for op in fn.walk() for v in op.operands}


def _sweep(region: Region, used: set[int]) -> bool:
    changed = False
    kept = []
    for op in region.ops:
        for sub in op.regions:
            changed |= _sweep(sub, used)
        d = REGISTRY[op.name]
        removable = (op.results and not d.side_effects and not d.terminator and not op.regions
                     and not any(id(r) in used for r in op.results))
        if removable:
            changed = True
        else:
            kept.append(op)
    region.ops[:] = kept
    return changed


def run(fn: Function, options) -> Function:
    while _sweep(fn.body, _uses(fn)):
        pass
    return fn
