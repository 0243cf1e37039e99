"""Passes over a kernel's IR, in the order they run. Each is one module with one ``run`` function.

``run(fn, options) -> fn``: a pass either returns the function (updating op attributes and
``fn.attrs`` in place) or raises a user-facing error (SafetyError, CompileError) that points at the
kernel's source. SIMT kernels run ``SIMT_PASSES``, tile kernels ``TILE_PASSES``; the compile
pipeline (``compiler/pipeline.py``) runs the verifier after each pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from fearless.passes import (access, barriers, bounds, contract, disjoint, inbounds,
                             memory_order, own_tile, persistent, shared, simplify, stream_k,
                             tile_subset, warps)


@dataclass(frozen=True)
class PassOptions:
    bounds_checks: bool = True  # False for fl.unchecked kernels
    prove_bounds: bool = True   # False: keep every check (the variant run when a precondition fails)
    block: tuple | None = None  # the launch contract's exact block (x, y), when it fixes one


SIMT_PASSES = (
    ("access", access.run),        # no writes to read-only arrays
    ("disjoint", disjoint.run),    # DisjointSlice accesses only at the thread's own index
    ("barriers", barriers.run),    # every barrier is reached by the whole block
    ("warps", warps.run),          # every lane of a warp op's mask reaches it
    ("shared", shared.run),        # shared memory: own-slot writes, barriers between threads
    ("contract", contract.run),    # the index space the kernel uses (none, 1-d or 2-d)
    ("simplify", simplify.run),    # drop unused pure ops
    ("bounds", bounds.run),        # mark reads bounds-checked, number their sites
    ("inbounds", inbounds.run),    # drop the checks of reads proven in bounds by their guards
)

TILE_PASSES = (  # the checks first: simplify would drop an unused read they refuse
    ("own_tile", own_tile.run),          # an Out partition only at the block's own tile
    ("subset", tile_subset.run),         # only what Tile IR expresses: the GPU runs the same
    ("simplify", simplify.run),          # drop unused pure ops
    ("persistent", persistent.run),      # a persistent schedule: the body once per tile
    ("stream_k", stream_k.run),          # stream-K: tiles and pieces of their loops per block
    ("memory_order", memory_order.run),  # the loads and stores that tokens must order
)


def run_all(fn, options: PassOptions, verify=None, passes=SIMT_PASSES):
    """Run ``passes`` over ``fn`` in order, then ``verify(fn)`` after each when given."""
    for _, run in passes:
        fn = run(fn, options)
        if verify is not None:
            verify(fn)
    return fn
