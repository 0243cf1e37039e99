"""``fl.async_copy`` / ``fl.async_commit`` / ``fl.async_wait``: global -> shared copies that
run in the background (PTX ``cp.async``, sm_80+), for multi-stage shared-memory pipelines.

    fl.async_copy(dst, slot, src, index, size=16, cache=None)
        copy ``size`` bytes (4, 8 or 16; E = size // itemsize elements) from the read-only array
        ``src`` at ``index`` (a tuple, one index per axis; E consecutive elements on the last
        axis, which must be contiguous) to chunk ``slot[-1]`` of the shared array ``dst`` at the
        leading indices ``slot[:-1]``: elements ``slot[-1] * E .. + E`` of the last axis.
        ``cache``: "cg" (L2 only; 16 bytes) or "ca" (L1 and L2); default "cg" for 16 bytes.
    fl.async_commit()   close this thread's current group of copies (cp.async.commit_group)
    fl.async_wait(n=0)  wait until at most ``n`` (a constant) of this thread's most recently
                        committed groups are still in flight (cp.async.wait_group n)

Safety, proved by the compiler (else it asks for ``with fl.unsafe():``):
- a thread copies only into its own chunk: ``slot[-1]`` is ``fl.thread.index_in_block()``
  itself (the leading indices are free: they pick a stage or a row of chunks), and an array
  filled by async copies is written by nothing else;
- the data is read (by anyone, ``fl.mma.ldmatrix`` included) only after an ``fl.async_wait``
  that covers its copy's group, and by other threads only after a ``fl.sync_threads()`` that
  follows the wait; a new copy into an array is separated from earlier reads of it by a
  barrier. The analysis counts groups per shared array, so a pipeline with one shared array
  per stage and ``fl.async_wait(stages - 2)`` is proved safe.
A source chunk out of bounds or not aligned to ``size`` copies zeros and raises
``KernelBoundsError`` at the next synchronisation; a destination chunk outside the array is
skipped. The cpu backend performs each copy at the wait that completes it, so a read before its
wait sees the old contents. Every function here is an intrinsic: only valid inside kernels
(CompileError on the host).
"""
from __future__ import annotations

from typing import Any, Literal

from fearless.simt.stub import intrinsic
from fearless.simt.views import Index, SharedArray

_intrinsic = intrinsic("fearless")

__all__ = ["async_copy", "async_commit", "async_wait"]


@_intrinsic
def async_copy(dst: SharedArray, slot: Index, src: Any, index: Index, size: int = 16,
               cache: Literal["ca", "cg"] | None = None) -> None:
    """Start copying ``size`` bytes (4, 8 or 16, a constant) from the read-only array ``src``
    at ``index`` into chunk ``slot[-1]`` of the shared array ``dst`` (PTX ``cp.async``, sm_80+).

    ``index``: one index per axis of ``src``; the ``E = size // itemsize`` elements from there
    on its last (contiguous) axis are copied. ``slot``: the leading indices of ``dst``, then
    the chunk number, which must be ``fl.thread.index_in_block()`` itself (a thread copies only
    into its own chunk): elements ``slot[-1] * E .. + E`` of the last axis. ``cache``: "cg"
    (L2 only; 16 bytes) or "ca" (L1 and L2); default "cg" for 16 bytes. The copy joins this
    thread's current group (``async_commit``) and lands by the ``async_wait`` that covers it.
    Safety rules and bounds: the module docstring.
    """


@_intrinsic
def async_commit() -> None:
    """Close this thread's current group of async copies (PTX ``cp.async.commit_group``)."""


@_intrinsic
def async_wait(n: int = 0) -> None:
    """Wait until at most ``n`` (a constant, 0..7) of this thread's most recently committed
    groups of async copies are still in flight (PTX ``cp.async.wait_group n``). Other
    threads' copies are visible only after a ``fl.sync_threads()`` that follows the wait."""
