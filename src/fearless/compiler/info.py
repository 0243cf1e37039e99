"""KernelInfo: the frozen, typed facts a compile hands the runtime and the disk cache stores.

The compiler fills one per specialisation; the launcher reads it and nothing else of the
compiler (``runtime/`` imports this module, never ``fearless.ir`` or the backends). It replaces
the string-keyed ``meta`` dictionaries that used to travel from ``fn.attrs`` to the launcher.
"""
from __future__ import annotations

from dataclasses import dataclass

from fearless.compiler.abi import Abi

# A stream-K launch (passes/stream_k.py) splits the loops of the R tiles left after its whole
# waves only when they number at most 1/TAIL_SPLIT of its P blocks; else its whole-tiles launch
# runs them too, one per block in turn (and where they are all the tiles, one block per tile
# without the loop over tiles, as `persistent` runs: runtime/partition.one_block_per_tile).
# Splitting saves (1 - R/P) of a tile's time and costs two more launches, the partial sums'
# stores and the fixup's loads: on the H200 (128 x 128 f16 tiles, 64 iterations) about 0.7-0.9
# of a tile's time (session 17: R/P 0.76 at 4096^3 and 0.97 at 512 x 4096 x 4096 ran 9% and 57%
# slower than persistent, 0.24 and 0.06 at M 128 13% and 29% faster).
TAIL_SPLIT = 4


def tail_split(tiles: int, blocks: int) -> bool:
    """Whether a stream-K launch of ``blocks`` blocks splits the loops of the ``tiles % blocks``
    tiles left after its whole waves: the runtime's choice of launches
    (``runtime/partition.stream_k_phases``) and the whole-tiles launch's loop bound
    (``passes/stream_k.py``) both follow it."""
    return 0 < (tiles % blocks) * TAIL_SPLIT <= blocks


@dataclass(frozen=True)
class ParamInfo:
    """One runtime parameter: ``name``; ``dtype`` (a fearless DType); ``ndim`` (-1 for a
    scalar); ``contiguous`` (specialised as C-contiguous); ``written`` (a SIMT array with a
    writable access, a tile kernel's Out partition or Atomic tensor); ``disjoint`` (a SIMT
    DisjointSlice or DisjointArray: each element is its own thread's, so a launch must cover
    them all)."""

    name: str
    dtype: object
    ndim: int = -1
    contiguous: bool = True
    written: bool = False
    disjoint: bool = False

    @property
    def is_array(self) -> bool:
        return self.ndim >= 0


@dataclass(frozen=True)
class KernelInfo:
    """What the runtime needs to check and launch one compiled specialisation.

    ``params``: the runtime parameters in order. ``abi``: the entry's slots (None on the cpu
    backend, which interprets the IR). SIMT facts: ``index_space`` (1 or 2 for index_1d/2d, 0
    for neither); ``bounds_sites`` ((parameter name, Span) of each checked read, empty when no
    read is checked: then no error word); ``bounds_preconditions`` (extents under which the
    unchecked reads were proved in bounds, ``passes/inbounds.py``); ``shared`` ((name, shape or
    None for dynamic, dtype name) per shared array); ``warp_full`` (full-mask warp ops: whole
    warps needed); ``coverage`` (per written array, the elements a launch reaches,
    ``analysis/owners.py``, as ``(name, cover)`` pairs); ``coarsen`` (logical threads per
    hardware thread). Tile facts: ``grouped`` (a 2-d Out partition launched 1-d in grouped
    order); ``built_by`` (the tileiras that built the cubin); ``pdl`` (the kernel waits for the
    grids it depends on before any memory access, so it may be launched with programmatic
    stream serialization: ``backends/tileir/lower.py``'s ``uses_pdl``); ``stream_k`` (a
    stream-K launch's workspace: the dtype and tile shape of one block's partial sum, ``()``
    for other kernels; ``runtime/workspace.py``); ``mma`` (the kernel calls ``ft.mma``: its
    speed is the tensor cores', which ``tile_launch.idle_sm_advice`` weighs)."""

    params: tuple
    abi: Abi | None = None
    index_space: int = 0
    bounds_sites: tuple = ()
    bounds_preconditions: tuple = ()
    shared: tuple = ()
    warp_full: bool = False
    coverage: tuple = ()
    coarsen: int = 1
    grouped: bool = False
    built_by: str | None = None
    pdl: bool = False
    stream_k: tuple = ()
    mma: bool = False

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def covered(self) -> dict:
        return dict(self.coverage)
