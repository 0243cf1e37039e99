"""Timing device work.

``interleaved_seconds``, for choosing among kernel configurations (``fearless.tile.tuning``,
``fl.autotune``): each candidate's work is captured into a graph and replayed, each replay
timed with CUDA events on the current stream (cuda), so the host's cost of building and
enqueueing the work is not counted, or with the wall clock around a replay and a
synchronisation (cpu); the candidates take turns, round after round.

``run_seconds``, for ``fearless bench`` (``fearless/bench.py``): each run of eager work timed
apart, with the L2 cache flushed before each on the GPU. Benchmarks time with the peers' own
tools instead (``benchmarks/``).

The flush itself is a kernel (``autotuning/flush.py``, a read: a memset leaves dirty lines that
the timed run writes back), so both take it as a function."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from fearless.runtime import device
from fearless.runtime.stream import current_stream, synchronize


def interleaved_seconds(candidates: Sequence[Callable[[], Callable[[], None]]], rounds: int = 5,
                        before: Callable[[], None] | None = None) -> list[float]:
    """Median seconds of the device work of each candidate over ``rounds`` rounds. A candidate
    is a function that prepares a run (makes the tensors it writes) and returns the function
    that enqueues it on the current stream (it must not wait: ``op.enqueue()``, not
    ``.sync()``; its kernels compiled already). Round r takes the candidates in turn from
    ``r * n // rounds`` on (n candidates; wrapping round), so the turns' starts spread over the
    candidates; each is prepared, captured into a graph (``fl.capture()``), replayed once
    untimed, and replayed once timed after ``before()`` (an L2 flush) is enqueued; its graph is
    released before the next is prepared. Fresh tensors each time: with one output shared by
    the candidates, under compute-sanitizer on the H200 a view of it outlived the released
    graph that wrote it, and the next candidate's partition of it was refused (not understood;
    not seen without the sanitizer, nor on the cpu backend).

    Why rounds: timed one after another, back to back, the same H200 GEMM config's time moved
    by up to 17% with the order the configs ran in (benchmarks/RESULTS.md, 2026-12-03; the GPU's
    clocks following its power and temperature, which the earlier runs set, is our guess), so a
    tuner picked by the order. Taking turns spreads such drift over the candidates. Raises what
    an enqueue or ``before`` raises, BackendError from the driver."""
    from fearless.runtime.capture import capture
    n, cuda = len(candidates), device.current_backend() == "cuda"
    times: list[list[float]] = [[] for _ in range(n)]
    marks: list = []   # [candidate, start event, end event], read once every round is enqueued
    try:
        for r in range(rounds):
            first = r * n // rounds % n
            for i in (*range(first, n), *range(first)):
                enqueue = candidates[i]()
                with capture() as graph:
                    enqueue()
                del enqueue   # its tensors go with the graph's release, before the next's
                try:
                    graph.replay()
                    if before is not None:
                        before()
                    if cuda:
                        mark = [i]   # in marks before its events exist: none can leak
                        marks.append(mark)
                        mark.append(_event())
                        mark.append(_event())
                        _record(mark[1])
                        graph.replay()
                        _record(mark[2])
                    else:
                        synchronize()
                        start = time.perf_counter()
                        graph.replay()
                        synchronize()
                        times[i].append(time.perf_counter() - start)
                finally:
                    graph.release()   # waits for its replays
        synchronize()   # the flushes' deferred checks too
        for i, start, end in marks:
            times[i].append(_elapsed(start, end))
    finally:
        _destroy(e for mark in marks for e in mark[1:])
    return [statistics.median(t) for t in times]


def _event():
    from cuda.bindings import driver

    from fearless.runtime.memory import check_result
    err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
    check_result((err,), "cuEventCreate")
    return event


def _record(event) -> None:
    from cuda.bindings import driver

    from fearless.runtime.memory import check_result
    check_result(driver.cuEventRecord(event, current_stream().handle), "cuEventRecord")


def _elapsed(start, end) -> float:
    """Seconds between two recorded events (waits for the second)."""
    from cuda.bindings import driver

    from fearless.runtime.memory import check_result
    check_result(driver.cuEventSynchronize(end), "cuEventSynchronize")
    err, ms = driver.cuEventElapsedTime(start, end)
    check_result((err,), "cuEventElapsedTime")
    return ms / 1e3


def _destroy(events) -> None:
    from cuda.bindings import driver
    for event in events:
        driver.cuEventDestroy(event)


def l2_flush_bytes() -> int:
    """Bytes that an L2 flush reads (``autotuning/flush.py``): twice the GPU's L2 cache (so none
    of the last run's data is left in it), at least 64 MiB; 0 on the cpu backend."""
    if device.current_backend() != "cuda":
        return 0
    return max(2 * device.cuda_device().properties.l2_cache_size, 64 << 20)


def run_seconds(run, runs: int, before: Callable[[], None] | None = None) -> list[float]:
    """Seconds of each of ``runs`` calls of ``run()``, which enqueues work on the current stream
    without waiting. cuda: ``before()`` (an L2 flush, which also keeps the GPU busy while the
    host enqueues the run, so the host's launch cost is not in the time), then a pair of CUDA
    events around the run; one synchronisation at the end (which reports the runs' bounds
    errors). cpu: the wall clock around each run and a synchronisation. Raises what ``run``
    raises, BackendError from the driver."""
    times = []
    if device.current_backend() != "cuda":
        for _ in range(runs):
            start = time.perf_counter()
            run()
            synchronize()
            times.append(time.perf_counter() - start)
        return times
    marks: list = []
    try:
        for _ in range(runs):
            if before is not None:
                before()
            mark: list = []   # in marks before its events exist: none can leak
            marks.append(mark)
            mark.append(_event())
            mark.append(_event())
            _record(mark[0])
            run()
            _record(mark[1])
        synchronize()   # fearless's: its deferred checks (bounds errors) report here
        return [_elapsed(start, end) for start, end in marks]
    finally:
        _destroy(e for mark in marks for e in mark)
