"""Shared memory, barriers, block coordinates, atomics and the race detector.

Accepted kernels run on the cpu backend (race detector on, as in the whole suite) and, marked
``gpu``, on the GPU; refused kernels give their exact diagnostic; the PTX shows what the LLVM
backend emits (shared globals, ``bar.sync``, scoped ``atom``).
"""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import fearless as fl
from fearless.errors import BarrierError, ContractError, RaceError, SafetyError
from fearless.ir import types as T
from tests.simt import kernels as k

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
FILE = k.__file__


def text(err) -> str:
    return str(err).replace(FILE, "kernels.py")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_block_sum_with_shared_memory_and_float_atomics(backend):
    x = np.random.default_rng(0).random(1000).astype(np.float32)
    sums, out = fl.zeros(8, fl.f32), fl.full(1000, np.nan, fl.f32)
    k.block_sum[k.block_sum.prepare(1000, block=128)](fl.asarray(x), out, sums)
    want = np.add.reduceat(x.astype(np.float64), np.arange(0, 1000, 128))
    np.testing.assert_allclose(sums.numpy(), want, rtol=1e-5)
    np.testing.assert_array_equal(out.numpy(), x)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_tree_reduction_with_barriers_in_a_uniform_loop(backend):
    x = np.random.default_rng(1).random(1000).astype(np.float32)
    part = fl.zeros(8, fl.f32)
    k.tree_sum[k.tree_sum.prepare(1000, block=128)](fl.asarray(x), part)
    np.testing.assert_allclose(part.numpy().sum(), x.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", ["tree_reduce", "tree_reduce_plus_equals"])
def test_tree_reduction_in_one_statement_reads_and_writes_disjoint_slots(backend, name):
    # small integers: every partial sum is exact in f32, whatever the order of the additions
    x = np.random.default_rng(5).integers(0, 100, 1000).astype(np.float32)
    kern, sums = getattr(k, name), fl.zeros(8, fl.f32)
    kern[kern.prepare(1000, block=128)](fl.asarray(x), sums)
    fl.synchronize()  # the race detector reports at the end of the launch
    np.testing.assert_array_equal(sums.numpy(), np.add.reduceat(x, np.arange(0, 1000, 128)))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_histograms_with_global_and_shared_atomics(backend):
    d = np.random.default_rng(2).integers(0, 128, 5000).astype(np.uint32)
    for kern in (k.histogram, k.shared_histogram):
        c = fl.zeros(128, fl.u32)
        kern[kern.prepare(5000, block=128)](fl.asarray(d), c)
        np.testing.assert_array_equal(c.numpy(), np.bincount(d, minlength=128))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_dynamic_shared_memory_sized_by_the_launch(backend):
    x = np.arange(1024, dtype=np.float32)
    out = fl.full(1024, np.nan, fl.f32)
    k.reverse_block[k.reverse_block.prepare(1024, block=128, shared=512)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), x.reshape(8, 128)[:, ::-1].ravel())
    with pytest.raises(ContractError, match="no dynamic shared memory"):
        k.reverse_block[k.reverse_block.prepare(1024, block=128)](fl.asarray(x), out)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_dynamic_shared_memory_read_at_a_constant_index(backend):
    # the bounds prover has no constant extent to compare 0 with: the read stays checked
    x = np.arange(256, dtype=np.float32)
    out = fl.full(256, np.nan, fl.f32)
    k.dynamic_first[k.dynamic_first.prepare(256, block=128, shared=512)](fl.asarray(x), out)
    np.testing.assert_array_equal(out.numpy(), np.repeat([0.0, 128.0], 128))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_tiled_transpose_with_a_2d_shared_tile(backend):
    a = np.random.default_rng(3).random((70, 45)).astype(np.float32)
    o = fl.full((45, 70), np.nan, fl.f32)
    k.transpose[k.transpose.prepare((45, 70), block=(32, 32))](fl.asarray(a), o)
    np.testing.assert_array_equal(o.numpy(), a.T)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_atomics_return_the_old_value_in_some_thread_order(backend):
    old, a = fl.zeros(256, fl.i32), fl.asarray(np.array([-5, 100, 7, 0], np.int32))
    k.atomics_all[k.atomics_all.prepare(256)](old, a)
    got, o = a.numpy(), old.numpy()
    assert got[0] == 252 and got[1] == 1 and got[3] != 0
    assert got[2] in range(2, 256, 4)
    assert max(o[1::4].tolist()) == 100  # min: the first update saw the initial value
    assert (o[3::4] == 0).sum() == 1            # exactly one compare_exchange succeeded


GOLDEN = {
    "neighbour_write": """\
kernel 'neighbour_write', parameter 's': a thread may write 's' only at its own slot, and this \
index is a computed integer
   --> kernels.py:114:5
    |
114 |     s[t + 1] = 1.0
    |     ^^^^^^^^^^^^^^
help: index with fl.thread.index_in_block() itself (index_in_block_2d() for a 2-d array), or \
wrap the write in `with fl.unsafe():`""",
    "no_barrier": """\
kernel 'no_barrier', parameter 's': this reads another thread's slot of 's', written on line 123 \
with no barrier in between
   --> kernels.py:124:35
    |
124 |     out[fl.thread.index_1d()] = s[(t + 1) % B]
    |                                   ^^^^^^^^^^^
help: call fl.sync_threads() after the writes and before this read""",
    "divergent_barrier": """\
kernel 'divergent_barrier': not every thread of the block may reach this barrier: the condition \
on line 132 can differ between threads (it depends on a thread index or on data)
   --> kernels.py:134:9
    |
134 |         fl.sync_threads()
    |         ^^^^^^^^^^^^^^^^^
help: move fl.sync_threads() out of the branch so that every thread reaches it (guard the \
work, not the barrier); if every thread does, wrap it in `with fl.unsafe():`""",
    "early_return": """\
kernel 'early_return': not every thread of the block may reach this barrier: the condition on \
line 143 can differ between threads (it depends on a thread index or on data)""",
    "write_after_read": """\
kernel 'write_after_read', parameter 's': this write to 's' may overwrite a slot that another \
thread reads on line 159 with no barrier in between
   --> kernels.py:157:9""",
    "shared_plus_equals": """\
kernel 'shared_plus_equals', parameter 's': a thread may write 's' only at its own slot, and this \
index is a computed integer (several threads may update one element)
   --> kernels.py:166:5
    |
166 |     s[0] += 1.0
    |     ^^^^^^^^^^^
help: use an atomic method such as s.add(i, v) to update shared elements from several threads""",
    "global_plus_equals": """\
kernel 'global_plus_equals', parameter 'counts': a DisjointSlice may be read only at this \
thread's own index, and this index is a computed integer
   --> kernels.py:173:12
    |
173 |     counts[x[i]] += 1
    |            ^^^^
help: several threads may update this element: declare 'counts' fl.AtomicSlice[T] and write \
counts.add(i, v)""",
    "tree_off_by_one": """\
kernel 'tree_off_by_one', parameter 's': this write to 's' may overwrite a slot that another \
thread reads on line 291 with no barrier in between
   --> kernels.py:291:13
    |
291 |             s[t] = s[t] + s[t + stride - 1]
    |             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
help: call fl.sync_threads() after the reads and before this write; or, within one barrier \
interval, guard the write of the own slot t with `if t < n:` (n the same in every thread) and \
read only slots at or above n, such as t + n""",
    "neighbour_sum": """\
kernel 'neighbour_sum', parameter 's': this write to 's' may overwrite a slot that another \
thread reads on line 303 with no barrier in between
   --> kernels.py:303:5
    |
303 |     s[t] = s[t] + s[t + 1]
    |     ^^^^^^^^^^^^^^^^^^^^^^
help: call fl.sync_threads() after the reads and before this write; or, within one barrier \
interval, guard the write of the own slot t with `if t < n:` (n the same in every thread) and \
read only slots at or above n, such as t + n""",
    "tree_no_loop_barrier": """\
kernel 'tree_no_loop_barrier', parameter 's': this reads another thread's slot of 's', written \
on line 317 with no barrier in between
   --> kernels.py:317:23
    |
317 |             s[t] += s[t + stride]
    |                       ^^^^^^^^^^
help: call fl.sync_threads() after the writes and before this read""",
    "tree_varying_stride": """\
kernel 'tree_varying_stride', parameter 's': this write to 's' may overwrite a slot that another \
thread reads on line 333 with no barrier in between
   --> kernels.py:333:9""",
    "tree_stride_changed_between": """\
kernel 'tree_stride_changed_between', parameter 's': this write to 's' may overwrite a slot that \
another thread reads on line 360 with no barrier in between
   --> kernels.py:364:13""",
    "unsafe_outside": """\
kernel 'unsafe_outside', parameter 'out': 'out' is an UnsafeSlice; it may be written only inside \
`with fl.unsafe():`""",
    "atomic_read": """\
kernel 'atomic_read', parameter 'a': 'a' is an AtomicSlice; it is read only through its atomic \
methods""",
}


def _args(kern, n=200):
    pool = {"x": fl.zeros(n), "out": fl.zeros(n), "counts": fl.zeros(n, fl.i32),
            "a": fl.zeros(n, fl.i32), "idx": fl.asarray(np.arange(n, dtype=np.int32) % 7),
            "sums": fl.zeros(n)}
    if kern is k.global_plus_equals:
        pool["x"] = fl.zeros(n, fl.i32)
    if kern is k.atomic_read:
        pool["out"] = fl.zeros(n, fl.i32)
    return [pool[p.name] for p in kern.params]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_refused_with_a_caret(name):
    kern = getattr(k, name)
    with pytest.raises(SafetyError) as info:
        kern[kern.prepare(200, block=128)](*_args(kern))
    assert text(info.value).startswith(GOLDEN[name])


RACES = {
    "race_shared_counter": (RaceError, (r"data race on 's' element \[0\]: thread \d+ of block 0 "
                                        r"writes it here, and thread \d+ of block 0 (reads|writes) "
                                        r"it at kernels.py:198:9 with no barrier in between")),
    "race_skipped_barrier": (BarrierError, (r"this barrier was reached by 72 of the 128 threads "
                                            r"of a block: thread 72 of block 1 has left the loop "
                                            r"or the kernel\n   --> kernels.py:212:9")),
    "race_scatter": (RaceError, (r"data race on 'out' element \[0\]: thread 7 of block 0 writes "
                                 r"it here, and thread 0 of block 0 writes it at "
                                 r"kernels.py:221:13")),
    "race_tree_off_by_one": (RaceError, (r"data race on 's' element \[63\]: thread 63 of block 0 "
                                         r"writes it here, and thread 0 of block 0 reads it at "
                                         r"kernels.py:346:27 with no barrier in between")),
    "race_unsafe_neighbour_read": (RaceError, (r"data race on 's' element \[1\]: thread 0 of "
                                               r"block 0 reads it here, and thread 1 of block 0 "
                                               r"writes it at kernels.py:228:5 with no barrier")),
}


@pytest.mark.parametrize("name", sorted(RACES))
def test_race_detector_names_both_lines_and_threads(name):
    kern = getattr(k, name)
    cls, pattern = RACES[name]
    with pytest.raises(cls) as info:
        kern[kern.prepare(200, block=128)](*_args(kern))
        fl.synchronize()
    assert re.search(pattern, text(info.value)), text(info.value)


def test_blocks_of_one_launch_race_on_global_memory(monkeypatch):
    idx = fl.asarray((np.arange(256, dtype=np.int32) * 0) + 3)  # everyone writes element 3
    with pytest.raises(RaceError, match="different blocks|no barrier"):
        k.race_scatter[k.race_scatter.prepare(256, block=128)](idx, fl.zeros(256), fl.zeros(8))
    idx = fl.asarray(np.arange(256, dtype=np.int32))  # a permutation: no race
    k.race_scatter[k.race_scatter.prepare(256, block=128)](idx, fl.zeros(256), fl.zeros(256))


def test_race_detector_is_off_without_racecheck(monkeypatch):
    from fearless import config
    monkeypatch.setattr(sys.modules["fearless.kernel.base"], "CONFIG",
                        config.Config.from_env({"FEARLESS_RACECHECK": "0"}))
    kern = k.race_shared_counter
    kern[kern.prepare(200, block=128)](*_args(kern))  # races, unnoticed


def test_barrier_in_unsafe_is_checked_at_run_time_on_cpu():
    kern = k.race_skipped_barrier
    x = fl.zeros(256)
    kern[kern.prepare(256, block=128)](x, fl.zeros(256))  # every thread reaches it: fine


READ = T.Array(fl.f32, 1, T.Access.READ, True)
OUT = T.Array(fl.f32, 1, T.Access.DISJOINT, True)


def test_ptx_has_shared_globals_barriers_and_scoped_atomics():
    u32 = T.Array(fl.u32, 1, T.Access.READ, True)
    text = k.shared_histogram.inspect("ptx", (u32, T.Array(fl.u32, 1, T.Access.ATOMIC, True)))
    assert re.search(r"\.shared \.align 16 \.b8 __fl_shared\[512\]", text)
    assert "bar.sync" in text
    assert "atom.relaxed.cta.shared.add.u32" in text and "atom.relaxed.gpu.global.add.u32" in text
    text = k.atomics_all.inspect("ptx", (T.Array(fl.i32, 1, T.Access.DISJOINT, True),
                                         T.Array(fl.i32, 1, T.Access.ATOMIC, True)))
    for want in ("atom.relaxed.gpu.global.max.s32", "atom.relaxed.cta.global.min.s32",
                 "atom.acq_rel.gpu.global.exch.b32", "fence.sc.sys",
                 "atom.acq_rel.sys.global.cas.b32"):
        assert want in text
    text = k.reverse_block.inspect("ptx", (READ, OUT))
    assert ".extern .shared .align 16 .b8 __fl_dynamic_shared[]" in text
    assert "%dynamic_smem_size" in text


def test_block_level_kernels_are_not_coarsened():
    text = k.tree_sum.inspect("llvm", (READ, T.Array(fl.f32, 1, T.Access.UNSAFE, True)))
    assert "logical" not in text
    meta = k.tree_sum.compile_for((READ, T.Array(fl.f32, 1, T.Access.UNSAFE, True)), "cpu").info
    assert meta.shared == (("s", (128,), "f32"),)


@pytest.mark.parametrize("dt", ["f16", "bf16", "f64", "i64", "u64"])
def test_float_and_64_bit_atomic_adds_lower(dt):
    d = getattr(fl, dt)
    suffix = {"f16": "noftz.f16", "bf16": "noftz.bf16", "f64": "f64", "i64": "u64",
              "u64": "u64"}[dt]
    src = T.Array(d, 1, T.Access.READ, True)
    text = _adder.inspect("ptx", (src, T.Array(d, 1, T.Access.ATOMIC, True)))
    assert f"atom.relaxed.gpu.global.add.{suffix}" in text


@fl.kernel
def _adder(x: fl.Slice, acc: fl.AtomicSlice):
    i = fl.thread.index_1d()
    if i < len(x):
        acc.add(0, x[i])
