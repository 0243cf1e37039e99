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
    """Three candidates over four rounds: round r starts at candidate r * 3 // 4, the flush
    comes before each timed replay, each run writes tensors its preparation made, and each
    candidate gets the median of its rounds."""
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
    assert prepared == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 2.0, 3.0, 1.0, 3.0, 1.0, 2.0]
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
def test_the_flush_kernel_reads_every_word_once_and_stores_only_a_nonzero_or(backend):
    """seen[i] is the OR of words i, i + T, i + 2T, ... (T threads): random words (a zero
    block in the middle) and a length that leaves a remainder past the unrolled steps; a
    thread whose words are all zero leaves its element as it was."""
    n, threads = 20 * 1024 + 77, 2 * flush.BLOCK
    words = np.random.default_rng(2).integers(0, 2 ** 32, n, dtype=np.uint32)
    words[np.arange(n) % threads == 5] = 0
    seen = fl.full(threads, 0xDEADBEEF, u32)
    flush.read_words[flush.read_words.prepare(threads)](fl.asarray(words), seen)
    want = np.array([np.bitwise_or.reduce(words[i::threads]) for i in range(threads)],
                    np.uint32)
    assert want[5] == 0 and (want != 0).sum() == threads - 1
    want[5] = 0xDEADBEEF
    np.testing.assert_array_equal(seen.numpy(), want)


def test_there_is_no_flush_on_the_cpu_backend():
    assert flush.l2_flush() is None and timing.l2_flush_bytes() == 0


@pytest.mark.gpu
def test_the_gpu_flush_reads_twice_the_l2():
    from fearless.runtime import device
    run = flush.l2_flush()
    run()
    fl.synchronize()
    words, seen, _ = flush._made[0]
    l2 = device.cuda_device().properties.l2_cache_size
    assert 4 * len(words) == timing.l2_flush_bytes() >= 2 * l2
    assert not seen.numpy().any()   # zero words: nothing stored over its zeros


def test_each_candidate_gets_its_own_times():
    """A candidate 64 times the work of the other (64 tiles against one, interpreted tile by
    tile on the cpu backend; on a GPU both would take a launch's few us), in both orders: its
    median is the larger one."""
    xs = {n: fl.asarray(np.ones(n, np.float32)) for n in (256, 256 * 64)}
    for n, x in xs.items():
        add_const(fl.empty(n, f32).partition(256), x, 0.0).sync()

    def candidate(n: int):
        def prepare():
            out = fl.empty(n, f32)
            return lambda: add_const(out.partition(256), xs[n], 1.0).enqueue()
        return prepare

    small, large = timing.interleaved_seconds([candidate(256), candidate(256 * 64)], 3)
    large2, small2 = timing.interleaved_seconds([candidate(256 * 64), candidate(256)], 3)
    assert large > small and large2 > small2
