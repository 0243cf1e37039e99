"""The runtime side of ``fl.stats`` (``fearless/observe.py``): while it counts, the launch paths
(``pack.launch`` on cuda, ``dispatch.launch_cpu`` and ``tile_launch.launch_cpu`` on the cpu
backend) and ``memory.allocate`` tell an observer of each launch and allocation through their
``OBSERVER`` variable, which is None otherwise: one test before and one after a launch when off.
Launches recorded into a graph (``fl.capture()`` on cuda) and a cpu graph's replayed launches
are not counted as launches (``graphs.replays`` counts replays), nor is work ``Stats.quiet()``
wraps.

Profiling (``fl.profile()``): ``start`` before a launch and ``stop`` after it time it, with a
pair of CUDA events on cuda (``runtime/profile.py``, resolved lazily) or the wall clock around
the cpu backend's interpretation. Reading the stats resolves the pending events and reads the
device's free and total memory (cuda only, once fearless has used the GPU)."""
from __future__ import annotations

import time
import weakref

from fearless.observe import STATS
from fearless.runtime import dispatch, memory, pack, profile, tile_launch
from fearless.runtime.stream import current_stream

_MODULES = (pack, dispatch, tile_launch, memory)
_timer: list = []   # the process's EventTimer, made at the first timed cuda launch


class _Observer:
    def __init__(self, stats):
        self.stats = stats

    def launch(self, kernel: str) -> None:
        if current_stream().capture is None:
            self.stats.launch(kernel)

    def start(self, stream: int | None):
        """Begin timing a launch on the CUstream ``stream`` (None: the cpu backend): a mark
        for ``stop``, or None when not profiling, quiet or capturing."""
        stats = self.stats
        if not stats.profiling or stats._muted() or current_stream().capture is not None:
            return None
        if stream is None:
            return time.perf_counter()
        return _event_timer().start(stream)

    def stop(self, kernel: str, stream: int | None, mark) -> None:
        """End the timing ``start`` began (``mark`` not None)."""
        if stream is None:
            self.stats.time(kernel, time.perf_counter() - mark, "host_wall")
        else:
            _event_timer().stop(kernel, stream, mark)

    def allocation(self, buffer, nbytes: int) -> None:
        self.stats.allocated(nbytes)
        weakref.finalize(buffer, self.stats.freed, nbytes)
        if not _timer:   # the context the device memory is read in, from any thread
            _event_timer()


def _event_timer() -> profile.EventTimer:
    if not _timer:
        _timer.append(profile.EventTimer(
            lambda kernel, seconds: STATS.time(kernel, seconds, "cuda_events"),
            profile.current()))
    return _timer[0]


def install(stats) -> None:
    observer = _Observer(stats)
    for module in _MODULES:
        module.OBSERVER = observer


def uninstall() -> None:
    for module in _MODULES:
        module.OBSERVER = None


def read(stats) -> None:
    """Before a snapshot: the pending launch times, and the device's memory."""
    if _timer:
        timer = _timer[0]
        timer.resolve(wait=-1)
        found = profile.device_memory(timer.context)
        if found is not None:
            stats.device_memory(*found)


STATS.hook(install, uninstall)
STATS.reader(read)
