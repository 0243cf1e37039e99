"""Timing for the tuners and ``fearless bench``: the interleaved rounds of
``timing.interleaved_seconds``, ``timing.run_seconds``, and the L2 flush by a read
(``autotuning/flush.py``) that both run before each timed run on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.autotuning import flush
from fearless.dtypes import f32, u32
from fearless.runtime import timing
from tests.support import BACKENDS


@ft.kernel
def add_const(o: ft.Out[f32], x: ft.In[f32], c: f32):
    o.store(ft.load_like(x, o) + c)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_candidates_take_turns_each_on_fresh_tensors_and_timed_after_the_flush(backend):
    """Three candidates: each round prepares and captures them in an order rotated by one,
    the flush comes before each timed replay, each run writes tensors its preparation made,
    and each candidate gets the median of its rounds."""
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    xs, log, outs = fl.asarray(x), [], []
    add_const(fl.empty(256, f32).partition(64), xs, 0.0).sync()   # compiled before the timing

    def candidate(c: float):
        def prepare():
            log.append(c)
            out = [fl.full(256, np.nan, f32)]
            outs.append((c, out))

            def enqueue():
                out[0] = add_const(out[0].partition(64), xs, c).enqueue()[0].unpartition()
            return enqueue
        return prepare

    seconds = timing.interleaved_seconds([candidate(1.0), candidate(2.0), candidate(3.0)], 4,
                                         lambda: log.append("flush"))
    prepared = [c for c in log if c != "flush"]
    assert prepared == [1.0, 2.0, 3.0, 2.0, 3.0, 1.0, 3.0, 1.0, 2.0, 1.0, 2.0, 3.0]
    assert log.count("flush") == 12 and log[1] == "flush"   # after the capture, before time
    assert len(seconds) == 3 and all(0 < s < 10 for s in seconds)
    for c, out in outs:   # every run wrote its own tensor (the graphs are released: readable)
        np.testing.assert_array_equal(out[0].numpy(), x + np.float32(c))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_run_seconds_times_each_run_after_its_flush(backend):
    x = fl.asarray(np.random.default_rng(1).standard_normal(1024).astype(np.float32))
    out, flushes = [fl.empty(1024, f32)], []

    def run():
        out[0] = add_const(out[0].partition(256), x, 1.0).enqueue()[0].unpartition()

    run()
    fl.synchronize()
    times = timing.run_seconds(run, 5, lambda: flushes.append(1))
    assert len(times) == 5 and all(0 < t < 10 for t in times)
    assert len(flushes) == (5 if backend == "cuda" else 0)   # the cpu backend has no L2


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_the_flush_kernel_reads_every_word_once_then_holds(backend):
    """seen[i] is the OR of words i, i + T, i + 2T, ... (T threads): random words, a length
    that leaves a remainder past the unrolled steps; held[0] is thread 0's hold, ``hold``
    steps of the generator from seen[0]."""
    n, threads, hold = 20 * 1024 + 77, 2 * flush.BLOCK, 37
    words = np.random.default_rng(2).integers(0, 2 ** 32, n, dtype=np.uint32)
    seen, held = fl.full(threads, 0xDEADBEEF, u32), fl.full(1, 0xDEADBEEF, u32)
    flush.read_words[flush.read_words.prepare(threads)](fl.asarray(words), seen, held, hold)
    want = np.array([np.bitwise_or.reduce(words[i::threads]) for i in range(threads)],
                    np.uint32)
    np.testing.assert_array_equal(seen.numpy(), want)
    h = int(want[0])
    for _ in range(hold):
        h = (h * 1664525 + 1013904223) % 2 ** 32
    assert held.numpy()[0] == h


def test_there_is_no_flush_on_the_cpu_backend():
    assert flush.l2_flush() is None and timing.l2_flush_bytes() == 0


@pytest.mark.gpu
def test_the_gpu_flush_reads_twice_the_l2():
    from fearless.runtime import device
    run = flush.l2_flush()
    run()
    fl.synchronize()
    words, seen, held, _ = flush._made[0]
    l2 = device.cuda_device().properties.l2_cache_size
    assert 4 * len(words) == timing.l2_flush_bytes() >= 2 * l2
    assert not seen.numpy().any()   # the words are zeroed once, so every OR is 0
