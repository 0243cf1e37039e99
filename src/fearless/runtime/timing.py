"""Timing a piece of device work: the median seconds of repeated runs, measured with CUDA events
with timing on the current stream (cuda), or the wall clock around a run and a synchronisation
(cpu). For choosing among kernel configurations (``fearless.tile.tuning``), not for
benchmarks, which time with the peers' own tools (``benchmarks/``)."""
from __future__ import annotations

import statistics
import time

from fearless.runtime import device
from fearless.runtime.stream import current_stream, synchronize


def median_seconds(run, reps: int = 5, warmup: int = 1) -> float:
    """Median seconds of ``run()`` (which enqueues work on the current stream) over ``reps``
    runs after ``warmup`` untimed ones. Raises what ``run`` raises, and BackendError from the
    driver."""
    for _ in range(warmup):
        run()
    synchronize()
    if device.current_backend() != "cuda":
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            run()
            synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    from cuda.bindings import driver

    from fearless.runtime.memory import _check
    stream = current_stream().handle
    events = []
    for _ in range(2 * reps):
        err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
        _check((err,), "cuEventCreate")
        events.append(event)
    try:
        for k in range(reps):
            _check(driver.cuEventRecord(events[2 * k], stream), "cuEventRecord")
            run()
            _check(driver.cuEventRecord(events[2 * k + 1], stream), "cuEventRecord")
        synchronize()
        times = []
        for k in range(reps):
            err, ms = driver.cuEventElapsedTime(events[2 * k], events[2 * k + 1])
            _check((err,), "cuEventElapsedTime")
            times.append(ms / 1e3)
        return statistics.median(times)
    finally:
        for event in events:
            driver.cuEventDestroy(event)
