"""Stream-K workspaces: the partial sums and counters of stream-K tile launches, one per stream
(what the kernel does with them: ``backends/tileir/stream_k.py``).

A launch of ``P`` tile blocks takes ``2 P`` slots of its accumulator tile (two pieces per
block at most) and ``2 P`` i32 counters (fewer tiles are shared), every counter zero when it
starts. The kernel leaves them zero when it ends (the block that completes a tile resets its
counter), so one workspace serves the stream-K launches of a stream one after another; launches on different streams may overlap, so each stream has its
own, and so has each graph (a capture records on a stream of its own: ``graph.py``,
``capture.py``). The memory is allocated and zeroed on a private stream, which is synchronised
before the launch is enqueued (so no allocation becomes a node of a graph being captured). It
is kept while its stream lives (a graph keeps its capture stream until it is released), every
buffer of a stream that grew (a captured graph keeps the addresses of the one it used), and
freed when the stream is garbage (after its work has finished) or forgotten with a released
graph's (``dispatch.forget_stream``). Layout: the counters first (a fixed capacity per buffer), then the
slots; a launch with more blocks than the capacity, or bigger slots, gets a new buffer.
"""
from __future__ import annotations

import weakref
from math import prod

from fearless.runtime import memory

ALIGN = 256   # bytes: the slots' start (the kernel assumes 16: backends/tileir/stream_k.py)


class _Workspace:
    __slots__ = ("address", "slots", "slot_bytes", "buffers")

    def __init__(self):
        self.address, self.slots, self.slot_bytes = 0, 0, 0
        self.buffers: list = []   # every buffer this stream used: a graph keeps addresses


_spaces: dict[int, _Workspace] = {}
_quiet: list = []   # the private stream that allocates and zeroes workspaces


def views(stream, blocks: int, dtype, shape: tuple) -> list:
    """The launch views (``runtime/args.py``'s layout: pointer, shape, strides) of the partial
    sums and the counters for a stream-K launch of ``blocks`` tile blocks on ``stream`` whose
    accumulator is a ``dtype`` tile of ``shape``: the kernel's last two array parameters."""
    slot = -(-prod(shape) * dtype.itemsize // ALIGN) * ALIGN
    ws = _spaces.get(id(stream))
    if ws is None:
        ws = _spaces[id(stream)] = _Workspace()
        weakref.finalize(stream, _drop, id(stream), stream.core)
    slots = 2 * blocks
    if slots > ws.slots or slot > ws.slot_bytes:
        _grow(ws, max(slots, ws.slots), max(slot, ws.slot_bytes))
    counters = -(-ws.slots * 4 // ALIGN) * ALIGN
    return [(None, ws.address + counters, (slots,), (1,)), (None, ws.address, (slots,), (1,))]


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
    counters = -(-slots * 4 // ALIGN) * ALIGN
    buffer = memory.allocate(counters + slots * slot_bytes, quiet)
    address = int(buffer.handle)
    memory.memset(address, 0, counters, quiet)
    quiet.core.sync()
    ws.buffers.append(buffer)
    ws.address, ws.slots, ws.slot_bytes = address, slots, slot_bytes
