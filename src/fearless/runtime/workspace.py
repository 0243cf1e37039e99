"""Stream-K workspaces: the partial sums of stream-K tile calls, one per stream (what the
kernels do with them: ``passes/stream_k.py``, ``backends/tileir/stream_k.py``).

A call of ``P`` tile blocks takes ``2 P`` slots of its accumulator tile (two pieces per block at
most): its pieces launch writes the slots it uses and its fixup launch, after it on the same
stream, reads them, so the memory needs no clearing and one workspace serves the calls of a
stream one after another. Calls on different streams may overlap, so each stream has its
own, and so has each graph (a capture records on a stream of its own: ``graph.py``,
``capture.py``). The memory is allocated on a private stream, which is synchronised before the
launch is enqueued (so no allocation becomes a node of a graph being captured). It is kept
while its stream lives (a graph keeps its capture stream until it is released), every buffer
of a stream that grew (a captured graph keeps the addresses of the one it used), and freed
when the stream is garbage (after its work has finished) or forgotten with a released graph's
(``dispatch.forget_stream``). A call with more blocks than the capacity, or bigger slots, gets
a new buffer.
"""
from __future__ import annotations

import weakref
from math import prod

from fearless.runtime import memory

ALIGN = 256   # bytes: a buffer's slot capacity is rounded up to it (kernels stride by the tile)


class _Workspace:
    __slots__ = ("address", "slots", "slot_bytes", "buffers")

    def __init__(self):
        self.address, self.slots, self.slot_bytes = 0, 0, 0
        self.buffers: list = []   # every buffer this stream used: a graph keeps addresses


_spaces: dict[int, _Workspace] = {}
_quiet: list = []   # the private stream that allocates workspaces


def views(stream, blocks: int, dtype, shape: tuple) -> list:
    """The launch view (``runtime/args.py``'s layout: pointer, shape, strides) of the partial
    sums for a stream-K call of ``blocks`` tile blocks on ``stream`` whose accumulator is a
    ``dtype`` tile of ``shape``: the kernel's last array parameter."""
    slot = -(-prod(shape) * dtype.itemsize // ALIGN) * ALIGN
    ws = _spaces.get(id(stream))
    if ws is None:
        ws = _spaces[id(stream)] = _Workspace()
        weakref.finalize(stream, _drop, id(stream), stream.core)
    slots = 2 * blocks
    if slots > ws.slots or slot > ws.slot_bytes:
        _grow(ws, max(slots, ws.slots), max(slot, ws.slot_bytes))
    return [(None, ws.address, (slots,), (1,))]


def forget(stream) -> None:
    """Free ``stream``'s workspace (a released graph's: nothing will launch on it again)."""
    _spaces.pop(id(stream), None)


def _drop(key: int, core) -> None:
    """A stream became garbage: free its workspace once its work has finished."""
    try:
        core.sync()
    except Exception:  # noqa: BLE001 - interpreter shutdown: the context is already gone
        pass
    _spaces.pop(key, None)


def _grow(ws: _Workspace, slots: int, slot_bytes: int) -> None:
    from fearless.runtime.stream import Stream

    if not _quiet:
        _quiet.append(Stream())
    quiet = _quiet[0]
    buffer = memory.allocate(slots * slot_bytes, quiet)
    quiet.core.sync()
    ws.buffers.append(buffer)
    ws.address, ws.slots, ws.slot_bytes = int(buffer.handle), slots, slot_bytes
