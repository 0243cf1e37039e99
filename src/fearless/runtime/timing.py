"""Timing a piece of device work for choosing among kernel configurations
(``fearless.tile.tuning``): the work is captured once into a graph and replayed, each replay
timed with CUDA events with timing on the current stream (cuda), so the host's cost of building
and enqueueing the work is not counted, or with the wall clock around a replay and a
synchronisation (cpu). Benchmarks time with the peers' own tools instead (``benchmarks/``)."""
from __future__ import annotations

import statistics
import time

from fearless.runtime import device
from fearless.runtime.stream import current_stream, synchronize


def replay_seconds(enqueue, reps: int = 5) -> float:
    """Median seconds of the device work ``enqueue()`` puts on the current stream (it must
    not wait: ``op.enqueue()``, not ``.sync()``): run once eagerly (which compiles), captured
    once with ``fl.capture()``, then ``reps`` timed replays after an untimed one. Raises what
    ``enqueue`` raises, and BackendError from the driver."""
    from fearless.runtime.capture import capture
    enqueue()
    synchronize()
    with capture() as graph:
        enqueue()
    try:
        graph.replay()
        synchronize()
        if device.current_backend() != "cuda":
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                graph.replay()
                synchronize()
                times.append(time.perf_counter() - start)
            return statistics.median(times)
        return statistics.median(_event_times(graph.replay, reps))
    finally:
        graph.release()


def _event_times(replay, reps: int) -> list[float]:
    from cuda.bindings import driver

    from fearless.runtime.memory import check_result
    stream = current_stream().handle
    events = []
    try:
        for _ in range(2 * reps):
            err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
            check_result((err,), "cuEventCreate")
            events.append(event)
        for k in range(reps):
            check_result(driver.cuEventRecord(events[2 * k], stream), "cuEventRecord")
            replay()
            check_result(driver.cuEventRecord(events[2 * k + 1], stream), "cuEventRecord")
        synchronize()
        times = []
        for k in range(reps):
            err, ms = driver.cuEventElapsedTime(events[2 * k], events[2 * k + 1])
            check_result((err,), "cuEventElapsedTime")
            times.append(ms / 1e3)
        return times
    finally:
        for event in events:
            driver.cuEventDestroy(event)
