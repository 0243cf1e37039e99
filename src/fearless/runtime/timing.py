"""Timing device work.

``replay_seconds``, for choosing among kernel configurations (``fearless.tile.tuning``): the
work is captured once into a graph and replayed, each replay timed with CUDA events with timing
on the current stream (cuda), so the host's cost of building and enqueueing the work is not
counted, or with the wall clock around a replay and a synchronisation (cpu).

``run_seconds``, for ``fearless bench`` (``fearless/bench.py``): each run of eager work timed
apart, with the L2 cache flushed before each on the GPU. Benchmarks time with the peers' own
tools instead (``benchmarks/``)."""
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


def l2_flush_bytes() -> int:
    """Bytes that ``run_seconds`` writes before each run on cuda: twice the GPU's L2 cache
    (so none of the last run's data is left in it), at least 64 MiB; 0 on the cpu backend."""
    if device.current_backend() != "cuda":
        return 0
    return max(2 * device.cuda_device().properties.l2_cache_size, 64 << 20)


def run_seconds(run, runs: int, flush: bool = True) -> list[float]:
    """Seconds of each of ``runs`` calls of ``run()``, which enqueues work on the current stream
    without waiting. cuda: a pair of CUDA events around each run; with ``flush``, a memset of
    ``l2_flush_bytes()`` on the stream before each pair, so every run starts with a cold L2
    (the memset also keeps the GPU busy while the host enqueues the run, so the host's launch
    cost is not in the time); one synchronisation at the end. cpu: the wall clock around each
    run and a synchronisation. Raises what ``run`` raises, BackendError from the driver."""
    if device.current_backend() != "cuda":
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            run()
            synchronize()
            times.append(time.perf_counter() - start)
        return times
    from cuda.bindings import driver

    from fearless.runtime import memory
    stream = current_stream()
    nbytes = l2_flush_bytes() if flush else 0
    scratch = memory.allocate(nbytes, stream) if nbytes else None
    events = []
    try:
        for _ in range(2 * runs):
            err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
            memory.check_result((err,), "cuEventCreate")
            events.append(event)
        for k in range(runs):
            if scratch is not None:
                memory.memset(int(scratch.handle), k & 0xFF, nbytes, stream)
            memory.check_result(driver.cuEventRecord(events[2 * k], stream.handle),
                                "cuEventRecord")
            run()
            memory.check_result(driver.cuEventRecord(events[2 * k + 1], stream.handle),
                                "cuEventRecord")
        synchronize()
        times = []
        for k in range(runs):
            err, ms = driver.cuEventElapsedTime(events[2 * k], events[2 * k + 1])
            memory.check_result((err,), "cuEventElapsedTime")
            times.append(ms / 1e3)
        return times
    finally:
        for event in events:
            driver.cuEventDestroy(event)
