"""The clocks of ``fl.profile()`` (``fearless/observe.py``): CUDA events around each eager cuda
launch, resolved lazily; and the device's free and total memory.

``EventTimer.start(stream)`` records the first event of a pair on the launch's stream (a
timing event, CUDA Driver API ``cuEventRecord``), ``stop`` the second, and queues the pair.
Nothing waits at a launch: ``resolve()`` turns the finished pairs into seconds
(``cuEventElapsedTime``), oldest first, when the queue holds ``RING`` pairs and when the stats
are read. A full queue whose oldest pair has not finished (the GPU ``RING`` launches behind)
waits for the oldest half, so a profiled program holds at most ``RING`` pairs of events; a
program that reads its stats waits for the timed work still running. Pairs are reused.

Not timed: a launch into a stream that is capturing a graph (``cuStreamIsCapturing``: fearless's
``fl.capture()`` and ``fl.graph`` and another library's capture alike), whose events would
become graph nodes. A pair whose events report an error (a faulted context), or whose launch
the driver refused, is dropped, not reused.
"""
from __future__ import annotations

import contextlib
import threading
from collections import deque

RING = 1024   # timed launches in flight before the oldest are resolved

_driver = None


def _d():
    global _driver
    if _driver is None:
        from cuda.bindings import driver
        _driver = driver
    return _driver


class EventTimer:
    """CUDA event pairs around launches; ``record(kernel, seconds)`` receives each time."""

    def __init__(self, record, context):
        self.record = record
        self.free: list = []          # (start, end) pairs ready to record again
        self.pending: deque = deque()  # (kernel, (start, end)) in launch order
        self.lock = threading.Lock()
        self.context = context        # the CUcontext of the events (for other threads)

    def start(self, stream: int):
        """Record the start of a launch on ``stream`` (a CUstream address): the pair, or None
        when the stream is capturing a graph."""
        d = _d()
        err, status = d.cuStreamIsCapturing(stream)
        if err != d.CUresult.CUDA_SUCCESS or \
                status != d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return None
        pair = self.free.pop() if self.free else self._pair()
        if pair is None or d.cuEventRecord(pair[0], stream)[0] != d.CUresult.CUDA_SUCCESS:
            return None
        return pair

    def stop(self, kernel: str, stream: int, pair) -> None:
        """Record the end of the launch that ``start`` began and queue the pair."""
        d = _d()
        if d.cuEventRecord(pair[1], stream)[0] != d.CUresult.CUDA_SUCCESS:
            return
        self.pending.append((kernel, pair))
        if len(self.pending) >= RING:
            self.resolve()
            if len(self.pending) >= RING:
                self.resolve(wait=RING // 2)

    def _pair(self):
        d = _d()
        pair = []
        for _ in range(2):
            err, event = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DEFAULT)
            if err != d.CUresult.CUDA_SUCCESS:
                return None
            pair.append(event)
        return tuple(pair)

    def resolve(self, wait: int = 0) -> None:
        """Record the times of the finished pairs, oldest first, after waiting for the oldest
        ``wait`` (``-1``: all) to finish; stops at the first pair still running."""
        d = _d()
        ready, not_ready = d.CUresult.CUDA_SUCCESS, d.CUresult.CUDA_ERROR_NOT_READY
        with self.lock, current_context(self.context):
            done = 0
            while self.pending:
                kernel, pair = self.pending[0]
                if wait < 0 or done < wait:
                    (err,) = d.cuEventSynchronize(pair[1])
                else:
                    (err,) = d.cuEventQuery(pair[1])
                    if err == not_ready:
                        return
                self.pending.popleft()
                done += 1
                if err == ready:
                    err, ms = d.cuEventElapsedTime(pair[0], pair[1])
                    if err == ready:
                        self.free.append(pair)
                        self.record(kernel, ms / 1e3)


def current():
    """This thread's current CUcontext (the launching thread's, when the timer is made)."""
    return _d().cuCtxGetCurrent()[1]


@contextlib.contextmanager
def current_context(context):
    """Make ``context`` (a CUcontext) current on this thread for the block when none is: a
    thread that never launched (one that serves the metrics) reads the stats."""
    d = _d()
    if context is None or int(d.cuCtxGetCurrent()[1]) != 0:
        yield
        return
    d.cuCtxPushCurrent(context)
    try:
        yield
    finally:
        d.cuCtxPopCurrent()


def device_memory(context) -> tuple[int, int] | None:
    """The device's free and total bytes (``cuMemGetInfo``) in ``context``, or None."""
    d = _d()
    with current_context(context):
        err, free, total = d.cuMemGetInfo()
    return (int(free), int(total)) if err == d.CUresult.CUDA_SUCCESS else None
