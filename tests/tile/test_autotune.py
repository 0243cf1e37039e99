"""``ft.autotune``: configs chosen by measurement on scratch twins, never on the caller's data.

The tuning runs on the cpu backend here (the ``tune`` fixture of ``conftest.py``) with a
stand-in timer that still runs every candidate's work (so the twins are exercised) and ranks the
configs as each test says. The scenarios are the public autotuner failures of Triton's: an
in-place kernel that the tuner ran on live data several times (B12), an accumulating kernel
whose first call added more than once (B18), a config that writes half the output winning
because benchmark runs filled the rest (B32)."""
from __future__ import annotations

import dataclasses
import importlib
from typing import TypeVar

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.dtypes import f32, i32
from fearless.errors import AliasError, ArgumentTypeError, AutotuneError, PerformanceWarning

tuning = importlib.import_module("fearless.autotuning.driver")
BASE = importlib.import_module("fearless.kernel.base")


@ft.kernel
def scale(o: ft.Out[f32], factor: f32):
    o.store(o.load() * factor)


@ft.kernel
def accumulate(o: ft.Out[f32], x: ft.In[f32]):
    o.store(o.load() + ft.load_like(x, o))


@ft.kernel
def scale_like(o: ft.Out[f32], factor: f32):
    o.store(ft.load_like(o, o) * factor)     # reads its own tile without o.load()


@ft.kernel
def maybe_add(o: ft.Out[f32], x: ft.In[f32], add: ft.Const[int] = 0):
    if add:
        o.store(o.load() + ft.load_like(x, o))
    else:
        o.store(ft.load_like(x, o))


@ft.kernel(requires=("n * bk <= 64",))
def limited(o: ft.Out[f32], x: ft.In[f32], n: i32, bk: ft.Const[int] = 32):
    o.store(ft.load_like(x, o))


@ft.kernel
def copy_some(o: ft.Out[f32], x: ft.In[f32], skip: ft.Const[int] = 0, off: ft.Const[int] = 0):
    if skip == 0 or o.tile_index[0] % 2 == 0:
        o.store(ft.load_like(x, o) + off)


T = TypeVar("T")


@ft.kernel
def copy_half(o: ft.Out[T], x: ft.In[T], skip: ft.Const[int] = 0):
    if skip == 0 or o.tile_index[0] % 2 == 0:
        o.store(ft.load_like(x, o))


def _host(values) -> fl.Tensor:
    """A copy: on the cpu backend fl.asarray wraps a NumPy array's own memory."""
    return fl.asarray(np.array(values, np.float32))


def test_an_in_place_kernel_scales_its_data_exactly_once(tune):
    fake, timed = tune
    fake.times = [2.0, 1.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)])(scale)
    data = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    o, _ = tuned(_host(data), 3.0).sync()
    got = o.unpartition().numpy()
    np.testing.assert_array_equal(got, data * np.float32(3.0))   # once, not once per candidate
    assert len(timed) == 2 and [c.seconds for c in tuned.report] == [2.0, 1.0]
    o, _ = tuned(_host(got), 5.0).sync()     # the cached winner (scalars are not in the key)
    np.testing.assert_array_equal(o.unpartition().numpy(), got * np.float32(5.0))
    assert len(timed) == 2 and o.tile_shape == (32,)


def test_an_accumulating_kernel_adds_once_per_call(tune):
    fake, _ = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=8), ft.Config(tile=64)])(accumulate)
    x = np.arange(64, dtype=np.float32)
    acc = fl.zeros(64, f32)
    for call in range(1, 5):
        o, _ = tuned(acc, _host(x)).sync()
        acc = o.unpartition()
        np.testing.assert_array_equal(acc.numpy(), x * call)   # the first call as the fourth


def test_a_config_that_leaves_half_the_output_unwritten_cannot_win(tune):
    fake, _ = tune
    fake.times = [5.0]   # only the full config is timed
    tuned = ft.autotune([ft.Config(tile=16, skip=1), ft.Config(tile=16)])(copy_some)
    x = np.arange(64, dtype=np.float32)
    o, _ = tuned(fl.full(64, -1.0, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    assert tuned.report[0].dropped == "leaves 32 of the 64 elements of 'o' unwritten"
    assert tuned.report[1].seconds == 5.0


@ft.kernel(requires=("n * acc <= 64",))
def read_or_half(o: ft.Out[f32], x: ft.In[f32], n: i32, acc: ft.Const[int] = 0,
                 skip: ft.Const[int] = 0):
    if acc:
        o.store(o.load() + ft.load_like(x, o))
    elif skip == 0 or o.tile_index[0] % 2 == 0:
        o.store(ft.load_like(x, o))


@pytest.mark.parametrize("configs, compare", [
    # config 0 reads o but refuses these arguments (n * acc > 64): it must not spare config 1
    # the coverage check (the review's finding: config 1 won and left 32 elements unwritten)
    ([ft.Config(tile=16, acc=1000), ft.Config(tile=16, skip=1)], True),
    # config 0 reads o and runs; without the comparison only coverage guards config 1
    ([ft.Config(tile=16, acc=1), ft.Config(tile=16, skip=1)], False)])
def test_a_config_reading_the_output_does_not_spare_another_the_coverage_check(
        tune, configs, compare):
    fake, _ = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune(configs, compare=compare)(read_or_half)
    x = np.arange(64, dtype=np.float32)
    out = fl.full(64, -1.0, f32)
    if compare:
        with pytest.raises(AutotuneError, match="every config failed"):
            tuned(out, _host(x), 1)
        assert "leaves 32 of the 64 elements of 'o' unwritten" in tuned.report[1].dropped
        return
    o, _, _ = tuned(out, _host(x), 1).sync()
    assert tuned.report[1].dropped == "leaves 32 of the 64 elements of 'o' unwritten"
    np.testing.assert_array_equal(o.unpartition().numpy(), x - 1.0)   # config 0 won


def test_configs_computing_other_values_are_an_error_not_a_choice(tune):
    fake, _ = tune
    fake.times = [3.0, 1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32, off=1), ft.Config(tile=32)])(
        copy_some)
    out = fl.empty(64, f32)
    with pytest.raises(AutotuneError, match=r"configs 0 Config\(tile=16\) and 1 "
                                            r"Config\(tile=32, off=1\) compute different "
                                            r"values: 'o' element 0: 1.0 against 0.0"):
        tuned(out, _host(np.arange(64)))
    assert out.numpy().shape == (64,)   # the caller's tensor is not moved


def test_every_config_failing_lists_each_and_gives_the_output_back(tune):
    # config 1 refuses the call: its requires= (n * acc <= 64) fails
    tuned = ft.autotune([ft.Config(tile=16, acc=0, skip=1),
                         ft.Config(tile=16, acc=1000, skip=0)])(read_or_half)
    out = fl.empty(64, f32)
    with pytest.raises(AutotuneError, match=r"every config failed:\n  config 0 .*unwritten\n"
                                            r"  config 1 Config\(tile=16, acc=1000, skip=0\): "
                                            r"refuses these arguments"):
        tuned(out, _host(np.zeros(64)), 1)
    assert out.numpy().shape == (64,)


def test_a_call_the_kernel_refuses_is_refused_before_tuning_and_gives_the_output_back(tune):
    fake, timed = tune
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)])(copy_some)
    out = fl.empty(64, f32)
    view = out[:8]
    with pytest.raises(AliasError):
        tuned(out, _host(np.zeros(64)))     # another view of out is alive
    del view
    with pytest.raises(ArgumentTypeError):
        tuned(out, fl.asarray(np.zeros(64, np.int32)))   # x's dtype differs from o's
    assert timed == [] and out.numpy().shape == (64,)


def test_outputs_of_every_dtype_are_checked_for_coverage(tune):
    fake, _ = tune
    fake.times = [1.0, 1.0, 1.0]
    for dt, values in ((fl.u8, np.array([0, 255] * 32)), (fl.i32, np.array([0, -2**31] * 32)),
                       (fl.bool_, np.array([True, False] * 32))):
        tuned = ft.autotune([ft.Config(tile=16, skip=1), ft.Config(tile=16)])(copy_half)
        x = fl.asarray(values.astype(dt.numpy))
        o, _ = tuned(fl.empty(64, dt), x).sync()
        np.testing.assert_array_equal(o.unpartition().numpy(), values.astype(dt.numpy))
        assert tuned.report[0].dropped.startswith("leaves 32 of the 64"), dt
        fake.times.append(1.0)


def test_an_atomic_argument_is_updated_once(tune):
    kernels = importlib.import_module("tests.tile.memory_kernels")
    fake, timed = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=64)], compare=False)(
        kernels.histogram)
    x = np.random.default_rng(5).integers(0, 8, 100).astype(np.int32)
    hist = fl.zeros(8, fl.i32)
    ranks, hist, _ = tuned(fl.empty(100, fl.i32), hist, fl.asarray(x)).sync()
    np.testing.assert_array_equal(hist.numpy(), np.bincount(x, minlength=8))
    assert len(timed) == 2


def test_the_winner_persists_and_a_new_config_list_tunes_again(tune):
    fake, timed = tune
    fake.times = [2.0, 1.0]
    configs = [ft.Config(tile=16), ft.Config(tile=32)]
    x = _host(np.arange(64))
    ft.autotune(configs)(copy_some)(fl.empty(64, f32), x).sync()
    assert len(timed) == 2
    again = ft.autotune(configs)(copy_some)     # a new process would do the same: the disk
    again(fl.empty(64, f32), x).sync()
    assert len(timed) == 2 and list(again._winners.values()) == [[1, 0]]
    other = ft.autotune(configs + [ft.Config(tile=8)])(copy_some)
    fake.times = [2.0, 1.0, 0.5]
    other(fl.empty(64, f32), x).sync()
    assert len(timed) == 5 and list(other._winners.values()) == [[2, 1, 0]]


def test_a_new_key_tunes_once_more(tune):
    fake, timed = tune
    fake.times = [1.0, 2.0] * 2
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)], key=("x",))(copy_some)
    for n in (64, 64, 128):
        tuned(fl.empty(n, f32), _host(np.arange(n))).sync()
    assert len(timed) == 4


def test_a_const_no_config_sets_is_the_callers_and_keys_the_tuning(tune):
    """copy_some's ``off`` is the caller's (no config sets it): passed by keyword or position,
    its default otherwise, and each value tunes once; ``skip``, which the configs set, is not
    an argument."""
    fake, timed = tune
    fake.times = [1.0, 2.0] * 3
    tuned = ft.autotune([ft.Config(tile=16, skip=0), ft.Config(tile=32, skip=0)])(copy_some)
    x = _host(np.arange(64))
    for call in (lambda o: tuned(o, x, off=3), lambda o: tuned(o, x, 3),
                 lambda o: tuned(o, x, off=5), lambda o: tuned(o, x)):
        o, _ = call(fl.empty(64, f32)).sync()
        assert o.tile_shape == (16,)
    assert len(timed) == 6    # off 3 (twice: one tuning), off 5, off 0 (the default)
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))
    got, _ = tuned(fl.empty(64, f32), x, off=5).sync()
    np.testing.assert_array_equal(got.unpartition().numpy(), np.arange(64) + 5)
    out = fl.empty(64, f32)
    with pytest.raises(ArgumentTypeError, match=r"'skip' is set by the configs \(config 0, "
                                                r"config 1\), not by the call"):
        tuned(out, x, skip=1)
    assert out.numpy().shape == (64,)   # not moved


@ft.kernel
def copy_first(o: ft.Out[f32], x: ft.In[f32], tiles: ft.Const[int] = 0):
    """tiles > 0: only the first ``tiles`` tiles of o are written (a config that covers some
    shapes and not others)."""
    if tiles == 0 or o.tile_index[0] < tiles:
        o.store(ft.load_like(x, o))


def _bucket(t) -> int:
    return 1 << (t.shape[0] - 1).bit_length()


def test_a_key_function_tunes_once_per_bucket(tune):
    """key={"o": bucket of the length, "x": bucket}: 60 and 64 elements share the bucket 64
    (one tuning), 100 is in 128 (a second); the report shows the bucket. (An entry None would
    key x by its exact shape.)"""
    fake, timed = tune
    fake.times = [2.0, 1.0] * 2
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)],
                        key={"o": _bucket, "x": _bucket})(copy_some)
    for n in (60, 64, 60, 100):
        o, _ = tuned(fl.full(n, np.nan, f32), _host(np.arange(n))).sync()
        np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(n))
        assert o.tile_shape == (32,)
    assert len(timed) == 4 and "o~128" in tuned.report.key
    assert tuned.config_for(fl.empty(100, f32), _host(np.arange(100))) == tuned.configs[1]


def test_a_bucket_winner_that_misses_part_of_another_shape_does_not_run_it(tune):
    """Config 0 writes only the first 4 tiles of 16: all of 64 elements, not all of 80. Tuned
    at 64 it wins (faster); at 80, a new shape in the same bucket, it is checked on twins, left
    out, and config 1 (every tile) runs: no element is left unwritten, and no new tuning."""
    fake, timed = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16, tiles=4), ft.Config(tile=16, tiles=0)],
                        key={"o": lambda o: "one bucket"})(copy_first)
    o, _ = tuned(fl.full(64, np.nan, f32), _host(np.arange(64))).sync()
    assert tuned.report.winner == 0 and len(timed) == 2
    for _ in range(2):
        o, _ = tuned(fl.full(80, np.nan, f32), _host(np.arange(80))).sync()
        np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(80))
    assert len(timed) == 2
    assert tuned.config_for(fl.empty(80, f32), _host(np.arange(80))) == tuned.configs[1]
    o, _ = tuned(fl.full(64, np.nan, f32), _host(np.arange(64))).sync()   # 64: still config 0
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))


def _fast_first_bucket(fake):
    """copy_first tuned in one bucket at 64 elements: config 0 (4 tiles of 16, faster) wins,
    config 1 writes every tile."""
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16, tiles=4), ft.Config(tile=16, tiles=0)],
                        key={"o": lambda o: "one bucket"})(copy_first)
    tuned(fl.full(64, np.nan, f32), _host(np.arange(64))).sync()
    assert tuned.report.winner == 0
    return tuned


def test_one_shapes_miss_leaves_the_buckets_ranking_alone(tune):
    """80 elements run config 1 (config 0 misses a tile there); 48 still run config 0, the
    bucket's winner, which covers them; config_for names nothing before a shape's first call."""
    fake, timed = tune
    tuned = _fast_first_bucket(fake)
    assert tuned.config_for(fl.empty(80, f32), _host(np.arange(80))) is None
    tuned(fl.full(80, np.nan, f32), _host(np.arange(80))).sync()
    o, _ = tuned(fl.full(48, np.nan, f32), _host(np.arange(48))).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(48))
    assert tuned.config_for(fl.empty(48, f32), _host(np.arange(48))) == tuned.configs[0]
    assert tuned.config_for(fl.empty(80, f32), _host(np.arange(80))) == tuned.configs[1]
    assert len(timed) == 2


def test_each_shapes_coverage_is_checked_once(tune, monkeypatch):
    fake, timed = tune
    tuner = importlib.import_module("fearless.autotuning.tuner")
    checked, real = [], tuner.covers
    monkeypatch.setattr(tuner, "covers", lambda t, n, b: checked.append(n) or real(t, n, b))
    tuned = _fast_first_bucket(fake)
    for _ in range(3):
        tuned(fl.full(80, np.nan, f32), _host(np.arange(80))).sync()
    # config 1 (tiles=0: the condition folds away) stores o in the kernel's body: its IR
    # proves it covers every shape, so only config 0 is run on twins to check
    assert checked == [0]


@ft.kernel
def accumulate_gathered(o: ft.Out[f32], x: ft.In[f32]):
    (n,) = o.tile_shape
    o.store(ft.gather(o, ft.arange(n) + o.tile_index[0] * n) + ft.load_like(x, o))


def test_a_gather_of_the_own_tile_is_a_read(tune):
    """ft.gather of o's own elements reads o: the trial starts from a copy of it, as the real
    call does (o + x, not 0 + x, is what the configs are compared on)."""
    fake, _ = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)])(accumulate_gathered)
    start, x = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    bound = tuned._bind([fl.asarray(start.copy()), _host(x)], {})
    assert tuned._outs_read(bound, 0) == {"o"}
    want = start + 1
    o, _ = tuned(fl.asarray(start.copy()), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), want)


@ft.kernel
def half_scaled(o: ft.Out[f32], x: ft.In[f32], s, skip: ft.Const[int] = 0):
    if skip == 0 or o.tile_index[0] % 2 == 0:
        o.store(ft.load_like(x, o) * s)


def test_an_unannotated_scalar_does_not_spare_a_config_the_coverage_check(tune):
    """The IR the tuner reads is typed from the call's scalar (unannotated here), so a config
    writing half of o is found and dropped, not taken for one that reads o."""
    fake, _ = tune
    fake.times = [1.0]
    tuned = ft.autotune([ft.Config(tile=16, skip=1), ft.Config(tile=16)])(half_scaled)
    o, _, _ = tuned(fl.full(64, -1.0, f32), _host(np.ones(64)), 2.0).sync()
    assert tuned.report[0].dropped == "leaves 32 of the 64 elements of 'o' unwritten"
    np.testing.assert_array_equal(o.unpartition().numpy(), np.full(64, 2.0))


@ft.kernel
def copy_or_leave(o: ft.Out[f32], x: ft.In[f32], leave: ft.Const[int] = 0):
    if leave == 1 and o.tile_index[0] == 1:
        return
    for _ in range(leave):
        if o.tile_index[0] == 2:
            return
    o.store(ft.load_like(x, o))


@pytest.mark.parametrize("kernel, consts, proven", [
    (copy_some, {}, True),                   # store in the body (skip == 0 folds away)
    (copy_some, {"skip": 1}, False),         # store under a runtime condition
    (copy_or_leave, {}, False),              # a loop holding a return (0 trips) is kept
    (copy_or_leave, {"leave": 1}, False),    # a return before the store
    (copy_or_leave, {"leave": 2}, False),    # a return in a loop before the store
])
def test_an_out_stored_whole_in_the_kernels_body_needs_no_coverage_run(
        tune, monkeypatch, kernel, consts, proven):
    """The IR shows the Out's own tile stored on every path: the trial runs once, from zero
    bytes (no second run from one bytes); otherwise twice, and half-written configs are
    still dropped."""
    fake, _ = tune
    fake.times = [1.0]
    tuner = importlib.import_module("fearless.autotuning.tuner")
    fills, real = [], tuner.twin
    monkeypatch.setattr(tuner, "twin", lambda t, copy, fill=0: fills.append((copy, fill))
                        or real(t, copy, fill))
    tuned = ft.autotune([ft.Config(tile=16, **consts)], compare=False)(kernel)
    args = [fl.empty(64, f32), _host(np.arange(64))]
    bound = tuned._bind(args, {})
    assert tuned._outs_stored(bound, 0) == ({"o"} if proven else set())
    try:
        tuned(*args).sync()
    except AutotuneError:
        assert not proven   # the check found a tile unwritten
    # the trial's twins (one from zero bytes, or from zero and from one bytes), then the
    # timing's (not a copy: the real output may hold memory nothing has written yet)
    covers = proven or (kernel is copy_or_leave and not consts)
    assert fills == ([(False, 0)] if proven else [(False, 0), (False, 0xFF)]) + (
        [(False, 0)] if covers else [])


def test_with_tuning_off_a_bucket_never_runs_a_config_known_to_miss(tune, monkeypatch):
    """Both configs miss part of 96 elements (6 tiles of 16): an AutotuneError naming them,
    the output given back unwritten, every call; with tuning on, the bucket tunes again and
    every config fails."""
    fake, timed = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16, tiles=4), ft.Config(tile=16, tiles=5)],
                        key={"o": lambda o: "one bucket"})(copy_first)
    tuned(fl.full(64, np.nan, f32), _host(np.arange(64))).sync()
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, autotune=False))
    for _ in range(2):
        out = fl.full(96, np.nan, f32)
        with pytest.raises(AutotuneError, match=r"no config writes every element of the "
                                                r"outputs for these arguments \(configs 0, 1 "
                                                r"were checked"):
            tuned(out, _host(np.arange(96)))
        assert np.isnan(out.numpy()).all()
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, autotune=True))
    with pytest.raises(AutotuneError, match="every config failed"):
        tuned(fl.full(96, np.nan, f32), _host(np.arange(96)))


def test_inside_a_capture_an_unchecked_shape_runs_with_a_warning(tune):
    fake, timed = tune
    tuned = _fast_first_bucket(fake)
    with pytest.warns(PerformanceWarning, match="config 0, this bucket's choice, runs on "
                                                "argument shapes it was not checked to cover"):
        with fl.capture() as graph:
            tuned(fl.full(48, np.nan, f32), _host(np.arange(48))).enqueue()
    graph.sync()
    graph.release()


def test_tuning_again_makes_every_shape_choose_again(tune):
    """A new ranking (``tune()``) drops the choices made under the old one."""
    fake, timed = tune
    tuned = _fast_first_bucket(fake)
    tuned(fl.full(48, np.nan, f32), _host(np.arange(48))).sync()
    assert tuned.config_for(fl.empty(48, f32), _host(np.arange(48))) == tuned.configs[0]
    fake.times = [2.0, 1.0]
    assert tuned.tune(fl.empty(64, f32), _host(np.arange(64))).winner == 1
    assert tuned.config_for(fl.empty(48, f32), _host(np.arange(48))) is None
    o, _ = tuned(fl.full(48, np.nan, f32), _host(np.arange(48))).sync()
    assert tuned.config_for(fl.empty(48, f32), _host(np.arange(48))) == tuned.configs[1]
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(48))


def test_configs_may_come_from_a_generator(tune):
    fake, timed = tune
    fake.times = [2.0, 1.0]
    tuned = ft.autotune(ft.Config(tile=t, skip=0) for t in (16, 32))(copy_some)
    o, _ = tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert o.tile_shape == (32,) and len(tuned.configs) == 2


def test_a_callers_const_of_the_wrong_type_is_refused_as_a_plain_call_refuses_it(tune):
    tuned = ft.autotune([ft.Config(tile=16, skip=0)])(copy_some)
    for bad in (None, [1, 2], 1.5, True):
        with pytest.raises(ArgumentTypeError, match=r"parameter 'off': expects a compile-time "
                                                    r"int, got"):
            tuned(fl.empty(64, f32), _host(np.arange(64)), off=bad)


def test_bad_key_functions_are_refused(tune):
    with pytest.raises(AutotuneError, match=r"the key maps 'o' to 3 \(int\), not a function"):
        ft.autotune([ft.Config(tile=16)], key={"o": 3})(copy_some)
    with pytest.raises(AutotuneError, match="the key names 'n', which is not a runtime"):
        ft.autotune([ft.Config(tile=16)], key={"n": len})(copy_some)
    tuned = ft.autotune([ft.Config(tile=16)], key={"o": lambda o: 1 // 0})(copy_some)
    out = fl.full(64, np.nan, f32)
    with pytest.raises(AutotuneError, match="the key function of 'o' raised ZeroDivisionError"):
        tuned(out, _host(np.arange(64)))
    assert out.numpy().shape == (64,)   # not moved: nothing ran


def test_fearless_autotune_0_runs_the_first_config(tune, monkeypatch):
    fake, timed = tune
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, autotune=False))
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)])(copy_some)
    o, _ = tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert timed == [] and o.tile_shape == (16,)


def test_inside_a_capture_the_first_config_runs(tune):
    fake, timed = tune
    tuned = ft.autotune([ft.Config(tile=32), ft.Config(tile=16)])(copy_some)
    out, x = fl.empty(64, f32), _host(np.arange(64))
    with pytest.warns(PerformanceWarning, match="fl.capture"):
        with fl.capture() as graph:
            o, _ = tuned(out, x).enqueue()
    graph.sync()
    assert timed == [] and o.tile_shape == (32,)
    graph.release()


def test_the_cpu_backend_runs_the_first_config_and_says_so():
    tuned = ft.autotune([ft.Config(tile=32), ft.Config(tile=16)])(copy_some)
    with pytest.warns(PerformanceWarning, match="the cpu backend does not tune"):
        o, _ = tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert o.tile_shape == (32,)
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))


def test_bad_configs_and_keys_are_refused_before_anything_runs():
    with pytest.raises(AutotuneError, match="the config list is empty"):
        ft.autotune([])(copy_some)
    with pytest.raises(AutotuneError, match="config 0 sets 'bk', which is not an ft.Const"):
        ft.autotune([ft.Config(tile=16, bk=32)])(copy_some)
    with pytest.raises(AutotuneError, match="a tile for 'x', which is not an Out"):
        ft.autotune([ft.Config(tile={"x": (16,)})])(copy_some)
    with pytest.raises(AutotuneError, match="config 1 has no tile"):
        ft.autotune([ft.Config(tile=16), ft.Config()])(copy_some)
    with pytest.raises(AutotuneError, match="the key names 'n', which is not a runtime"):
        ft.autotune([ft.Config(tile=16)], key=("n",))(copy_some)
    with pytest.raises(AutotuneError, match="decorates a tile kernel"):
        ft.autotune([ft.Config(tile=16)])(lambda o: o)
    with pytest.raises(AutotuneError, match="reps is 0"):
        ft.autotune([ft.Config(tile=16)], reps=0)(copy_some)
    with pytest.raises(AutotuneError, match=r"config 0's tile \(16, 0\) for 'o' is not one "
                                            r"extent \(an int > 0, or None"):
        ft.autotune([ft.Config(tile=(16, 0))])(copy_some)
    with pytest.raises(AutotuneError, match="config 1's tile 24 for 'o' has the extent 24, "
                                            "not a power of two"):
        ft.autotune([ft.Config(tile=16), ft.Config(tile=24)])(copy_some)
    with pytest.raises(AutotuneError, match="config 0's tile 16.0 for 'o'"):
        ft.autotune([ft.Config(tile=16.0)])(copy_some)
    with pytest.raises(AutotuneError, match="configs is a Config; expected a list"):
        ft.autotune(ft.Config(tile=16))(copy_some)
    with pytest.raises(AutotuneError, match="the key names 'q', which is not a runtime"):
        ft.autotune([ft.Config(tile=16)], key="q")(copy_some)     # one name, as a string
    with pytest.raises(AutotuneError, match="the key names 'skip', which is not a runtime"):
        ft.autotune([ft.Config(tile=16, skip=0)], key=("x", "skip"))(copy_some)   # configs'
    for bad in (0, -1.0, float("nan"), float("inf"), True, "10"):
        with pytest.raises(AutotuneError, match=r"max_seconds is .*; expected a number of "
                                                r"seconds > 0"):
            ft.autotune([ft.Config(tile=16)], max_seconds=bad)(copy_some)
    tuned = ft.autotune([ft.Config(tile=(4, 4)), ft.Config(tile=(8, 8))])(copy_some)
    out = fl.empty(64, f32)
    with pytest.raises(AutotuneError, match=r"no config fits these arguments:\n  config 0 "
                                            r"Config\(tile=\(4, 4\)\): its tile \(4, 4\) does "
                                            r"not fit 'o' of shape \(64,\): one extent per axis"
                                            r"\n  config 1 "):
        tuned(out, _host(np.arange(64)))
    assert out.numpy().shape == (64,)   # not moved: nothing ran
    with pytest.raises(AutotuneError, match="'o' takes a fearless Tensor here"):
        tuned(fl.empty(64, f32).partition(16), _host(np.arange(64)))


@pytest.mark.gpu
def test_a_tuned_kernel_on_the_gpu(backend, monkeypatch, tmp_path):
    # a fresh disk cache: a ranking an earlier run left there would be used without tuning
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG, cache_dir=tmp_path))
    tuned = ft.autotune([ft.Config(tile=256), ft.Config(tile=1024),
                         ft.Config(tile=1024, hints={"sm_90": {"occupancy": 2}})])(copy_some)
    x = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    o, _ = tuned(fl.full(1 << 20, np.nan, f32), fl.asarray(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    assert all(c.seconds is not None for c in tuned.report), tuned.report


def test_tuning_with_the_real_timer(monkeypatch, tmp_path):
    """The cpu backend's timer (capture once, replay, wall clock): every survivor timed."""
    monkeypatch.setattr(tuning, "_tunes_on_cpu", lambda: True)
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(
        BASE.CONFIG, cache_dir=tmp_path / "cache", progress=False))
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)], reps=2)(accumulate)
    x = np.arange(64, dtype=np.float32)
    o, _ = tuned(fl.ones(64, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x + 1)
    assert all(c.seconds is not None and c.seconds > 0 for c in tuned.report)


def test_fl_stats_counts_the_real_call_only(tune, stats_on):
    fake, _ = tune
    fake.times = [1.0]
    tuned = ft.autotune([ft.Config(tile=16, skip=1), ft.Config(tile=16)])(copy_some)
    tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    k = fl.stats()["kernels"]["copy_some"]
    assert k["launches"] == 1 and k["refused"] == {}   # the trials were quiet
    assert fl.stats()["graphs"]["replays"] == 0


def test_reads_of_the_own_tile_through_load_like_count_as_reads(tune):
    fake, _ = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32)])(scale_like)
    data = np.arange(64, dtype=np.float32)
    o, _ = tuned(_host(data), 2.0).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), data * 2)


def test_a_read_only_some_configs_make_is_still_compared(tune):
    fake, _ = tune
    fake.times = [1.0, 2.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=16, add=1)])(maybe_add)
    with pytest.raises(AutotuneError, match="compute different values"):
        tuned(fl.ones(64, f32), _host(np.arange(64)))


def test_a_ranking_serves_calls_its_winner_refuses(tune):
    """requires= over a scalar the key leaves out: the best config that accepts the call."""
    fake, timed = tune
    fake.times = [2.0, 1.0]       # bk=64 is faster, but needs n <= 1
    tuned = ft.autotune([ft.Config(tile=16, bk=32), ft.Config(tile=16, bk=64)])(limited)
    x = _host(np.arange(64))
    tuned(fl.empty(64, f32), x, 1).sync()
    assert len(timed) == 2
    o, _, _ = tuned(fl.empty(64, f32), x, 2).sync()   # bk=64 refuses n=2: bk=32 runs
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))
    assert len(timed) == 2


def test_without_tuning_the_first_config_that_accepts_runs_once_chosen():
    tuned = ft.autotune([ft.Config(tile=16, bk=64), ft.Config(tile=16, bk=32)])(limited)
    x = _host(np.arange(64))
    with pytest.warns(PerformanceWarning):
        o, _, _ = tuned(fl.empty(64, f32), x, 2).sync()    # bk=64 refuses n=2 on the cpu too
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))
    assert list(tuned._winners.values()) == [[1]]


def test_a_config_may_launch_persistently(tune):
    """ft.Config(schedule=ft.persistent(...)): the tuner partitions with it; the winner's
    values are right either way, and a schedule that is not one is refused at decoration."""
    fake, _ = tune
    fake.times = [2.0, 1.0]
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=16,
                                                       schedule=ft.persistent(blocks=3))])(
        copy_some)
    x = np.arange(64, dtype=np.float32)
    o, _ = tuned(fl.full(64, -1.0, f32), _host(x)).sync()
    assert o.schedule == ft.persistent(blocks=3)     # the winner, config 1
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    assert "schedule=Persistent(blocks=3" in repr(tuned.report[1].config)
    with pytest.raises(AutotuneError, match="config 0's schedule is a str"):
        ft.autotune([ft.Config(tile=16, schedule="persistent")])(copy_some)


@pytest.mark.parametrize("dtype, unit", [("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8)])
def test_the_default_tolerance_follows_the_rounding_of_the_dtype(dtype, unit):
    """Two 16-bit results a few units of rounding apart agree (bf16: a flash attention's
    blocks of 64 or 128 keys round its probabilities apart on the H200, 5 units at 0.016);
    a result off by a few percent does not."""
    agreement = importlib.import_module("fearless.autotuning.agreement")
    want = np.random.default_rng(7).standard_normal(4096) * 0.05
    ref = fl.asarray(want, {"float16": fl.f16, "bfloat16": fl.bf16}[dtype]).numpy()
    near = (ref.astype(np.float64) * (1 + 5 * unit)).astype(ref.dtype)
    assert (near != ref).any()
    assert agreement.differs({"o": near}, {"o": ref}, None) is None
    for off in (1.5, 1 + 2 ** -4 if dtype == "bfloat16" else 1.03):   # a few % is caught
        far = (ref.astype(np.float64) * off).astype(ref.dtype)
        assert "compared within" in agreement.differs({"o": far}, {"o": ref}, None)


def _record_compiles(monkeypatch, note):
    """TileKernel._compile calls ``note(constants)`` first for the cpu backend's compile of
    each config (not CI's cross compiles for sm_80 and sm_90, FEARLESS_CROSS_COMPILE)."""
    tile_mod = importlib.import_module("fearless.kernel.tile")
    real = tile_mod.TileKernel._compile

    def compile_(self, types, constants, backend, arch, fresh=False):
        if backend == "cpu":
            note(constants)
        return real(self, types, constants, backend, arch, fresh)
    monkeypatch.setattr(tile_mod.TileKernel, "_compile", compile_)


def _warn_off(constants) -> None:
    tracebacks = importlib.import_module("fearless.tracebacks")
    tracebacks.warn_user(f"compiled off={constants.get('off')}", PerformanceWarning)


@ft.kernel
def add_offset(o: ft.Out[f32], x: ft.In[f32], off: ft.Const[int] = 0):
    o.store(ft.load_like(x, o) + off)   # compiled by the test below alone (its memory cache)


def test_a_tunings_configs_compile_at_once_before_the_trials(tune, monkeypatch):
    """Every config is compiled once, in worker threads, before the first trial runs; the
    winner's compile warning is given on the caller's thread, pointing at the caller's line,
    and the losers' stay in the report (a slow config that lost is not the caller's
    concern)."""
    import threading
    import warnings
    fake, _ = tune
    fake.times = [1.0, 2.0, 3.0]
    compiled = []

    def note(constants):
        compiled.append((dict(constants).get("off"), threading.current_thread()))
        _warn_off(constants)
    _record_compiles(monkeypatch, note)
    tuned = ft.autotune([ft.Config(tile=16, off=k) for k in (1, 2, 3)], compare=False)(add_offset)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        o, _ = tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert sorted(off for off, _ in compiled) == [1, 2, 3]          # once each
    assert all(t is not threading.main_thread() for _, t in compiled)
    ours = [w for w in said if str(w.message).startswith("compiled off=")]
    assert [str(w.message) for w in ours] == ["compiled off=1"]     # config 0 won
    assert {w.filename for w in ours} == {__file__}
    assert [c.warnings for c in tuned.report] == [(f"compiled off={k}",) for k in (1, 2, 3)]
    assert "warned: compiled off=3" in str(tuned.report)
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64) + 1)


@ft.kernel
def add_offset_b(o: ft.Out[f32], x: ft.In[f32], off: ft.Const[int] = 0):
    o.store(ft.load_like(x, o) + off)   # compiled by the test below alone


def test_a_winner_compiled_by_an_earlier_tuning_still_warns(tune, monkeypatch):
    """Config 2 compiles (and warns) while losing the first key; when it wins the second key
    from the memory cache, its warning reaches the caller then."""
    import warnings
    fake, _ = tune
    compiled = []

    def note(constants):
        compiled.append(constants.get("off"))
        _warn_off(constants)
    _record_compiles(monkeypatch, note)
    tuned = ft.autotune([ft.Config(tile=16, off=k) for k in (1, 2, 3)], compare=False,
                        key={"x": lambda x: x.shape})(add_offset_b)
    fake.times = [1.0, 2.0, 3.0, 3.0, 2.0, 1.0]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
        first = [str(w.message) for w in said if str(w.message).startswith("compiled")]
        o, _ = tuned(fl.empty(128, f32), _host(np.arange(128))).sync()
    later = [str(w.message) for w in said if str(w.message).startswith("compiled")][len(first):]
    assert first == ["compiled off=1"] and later == ["compiled off=3"]
    assert sorted(compiled) == [1, 2, 3]                  # the second key compiled nothing
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(128) + 3)


@ft.kernel
def add_offset_c(o: ft.Out[f32], x: ft.In[f32], off: ft.Const[int] = 0):
    o.store(ft.load_like(x, o) + off)   # compiled by the test below alone


def test_under_a_time_bound_configs_compile_one_by_one(tune, monkeypatch):
    """With max_seconds, nothing compiles ahead: the configs past the bound are skipped
    without being compiled."""
    import time
    fake, _ = tune
    compiled = []

    def note(constants):
        compiled.append(constants.get("off"))
        time.sleep(0.3)
    _record_compiles(monkeypatch, note)
    tuned = ft.autotune([ft.Config(tile=16, off=k) for k in range(6)], compare=False,
                        max_seconds=0.2)(add_offset_c)
    fake.times = [1.0] * 6
    o, _ = tuned(fl.empty(64, f32), _host(np.arange(64))).sync()
    assert compiled == [0]
    assert [c.skipped is not None for c in tuned.report] == [False] + [True] * 5
    np.testing.assert_array_equal(o.unpartition().numpy(), np.arange(64))


def test_the_tuner_keeps_compile_warnings_but_not_a_trials_occupancy_warning():
    """An OccupancyWarning is about the trial's shape: a later tuning (another shape) whose
    winner is that config must not hand it to the caller; compile warnings are kept."""
    from types import SimpleNamespace

    from fearless.autotuning import tuner
    from fearless.errors import OccupancyWarning
    tuned = SimpleNamespace(compile_warnings={})
    tuner._keep(tuned, {0: [("spills", PerformanceWarning), ("32 blocks", OccupancyWarning)]})
    assert tuned.compile_warnings == {0: [("spills", PerformanceWarning)]}


def _timed_runs_raise(monkeypatch, bad: int) -> list:
    """Make config ``bad``'s timed runs raise a LaunchError (its trial still passes); returns
    the list of each timing's configs."""
    tuner = importlib.import_module("fearless.autotuning.tuner")
    real_rounds = tuner._rounds
    timing_now = []

    def rounds(tuned, order, bound, read, n, before):
        timing_now.append(list(order))
        real_enqueue = tuned._enqueue

        def enqueue(c, bound, twins):
            if c == bad:
                raise fl.errors.LaunchError(f"config {bad} cannot be captured")
            return real_enqueue(c, bound, twins)

        monkeypatch.setattr(tuned, "_enqueue", enqueue)
        try:
            return real_rounds(tuned, order, bound, read, n, before)
        finally:
            monkeypatch.setattr(tuned, "_enqueue", real_enqueue)

    monkeypatch.setattr(tuner, "_rounds", rounds)
    return timing_now


def test_a_config_whose_timed_run_raises_is_dropped_and_the_others_are_timed(
        tune, monkeypatch):
    """Past the trials, the survivors are timed together; one whose timed run raises (here a
    LaunchError from config 1's enqueue) is dropped with the error, the rest timed again."""
    fake, timed = tune
    fake.times = [9.0, 9.0, 2.0, 1.0]   # config 0 in the failed rounds and alone, then 0, 2
    timing_now = _timed_runs_raise(monkeypatch, 1)
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=32), ft.Config(tile=8)])(copy_some)
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    o, _ = tuned(fl.full(64, np.nan, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    r = tuned.report
    # all three, then config 0 alone (fine), config 1 alone (raises), then 0 and 2 together
    assert timing_now == [[0, 1, 2], [0], [1], [0, 2]]
    assert r[1].dropped == "LaunchError: config 1 cannot be captured" and r[1].seconds is None
    assert (r[0].seconds, r[2].seconds, r.winner) == (2.0, 1.0, 2)


@ft.kernel
def add_offset_d(o: ft.Out[f32], x: ft.In[f32], off: ft.Const[int] = 0):
    o.store(ft.load_like(x, o) + off)


@pytest.mark.parametrize("bad, offs, refused", [
    (1, (0, 1, 0), None),       # the config that differs is dropped by the timing
    (0, (1, 0, 0), None),       # the first (the reference) is, and the others agree
    (0, (0, 0, 1), (1, 2)),     # the first is, and the two kept differ: both named
])
def test_only_the_configs_the_timing_keeps_must_agree(tune, monkeypatch, bad, offs, refused):
    """The configs are compared with the first as their trials end, but a difference counts
    only between configs the timing kept (as when they were compared after it)."""
    fake, _ = tune
    fake.times = [1.0] * 8
    _timed_runs_raise(monkeypatch, bad)
    tuned = ft.autotune([ft.Config(tile=16, off=k) for k in offs])(add_offset_d)
    x = np.random.default_rng(9).standard_normal(64).astype(np.float32)
    if refused is None:
        o, _ = tuned(fl.full(64, np.nan, f32), _host(x)).sync()
        assert tuned.report[bad].dropped == f"LaunchError: config {bad} cannot be captured"
        np.testing.assert_allclose(o.unpartition().numpy(), x + offs[tuned.report.winner])
        return
    with pytest.raises(AutotuneError, match=rf"configs {refused[0]} .* and {refused[1]} .* "
                                            rf"compute different values: .*config {bad}'s "
                                            rf"outputs, dropped since"):
        tuned(fl.full(64, np.nan, f32), _host(x)).sync()


def test_a_tuning_with_the_real_interleaved_timer_times_every_survivor(monkeypatch, tmp_path):
    """No stand-in timer: the cpu backend's interleaved rounds (fresh twins each run) time
    both configs that pass their trials; the one that leaves tiles unwritten is dropped, and
    the winner's result is right."""
    monkeypatch.setattr(tuning, "_tunes_on_cpu", lambda: True)
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(
        BASE.CONFIG, cache_dir=tmp_path / "cache", progress=False))
    tuned = ft.autotune([ft.Config(tile=16), ft.Config(tile=16, skip=1), ft.Config(tile=32)],
                        reps=3)(copy_some)
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    o, _ = tuned(fl.full(64, np.nan, f32), _host(x)).sync()
    np.testing.assert_array_equal(o.unpartition().numpy(), x)
    r = tuned.report
    assert r[1].dropped.startswith("leaves 32 of the 64") and r[1].seconds is None
    assert r[0].seconds > 0 and r[2].seconds > 0 and r.winner in (0, 2)
