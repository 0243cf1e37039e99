"""Scalar arguments convert to their parameter's dtype in one place (``runtime.args.converter``),
for both tracks, both backends and both the first and the repeat launch: bools, ints and floats
into every dtype against NumPy, the refusals (a float for an integer, an integer that does not
fit, Python's or NumPy's), and the slot form the GPU's parameter buffer takes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fearless as fl
from fearless import dtypes
from fearless import tile as ft
from fearless.compiler.info import KernelInfo, ParamInfo
from fearless.errors import ArgumentTypeError
from fearless.kernel import tile_fast
from fearless.runtime import args as args_
from fearless.runtime.args import converter
from fearless.runtime.plan import LaunchPlan
from tests.support import BACKENDS

INTS = [d for d in dtypes.ALL if d.is_int]
FLOATS = [d for d in dtypes.ALL if d.is_float]
# values every dtype that takes them holds exactly (so NumPy's own conversion is the reference)
EXACT = [True, False, 0, 1, -1, 3, 100, np.int8(-5), np.uint16(7), np.bool_(True)]


def _fits(dt: dtypes.DType, v) -> bool:
    lo, hi = dtypes.int_range(dt)
    return lo <= int(v) <= hi


@pytest.mark.parametrize("dt", dtypes.ALL, ids=str)
@pytest.mark.parametrize("value", EXACT, ids=repr)
def test_bools_and_ints_convert_to_every_dtype_or_are_refused(dt, value):
    if dt.is_int and not _fits(dt, value):
        for slot in (True, False):
            with pytest.raises(ArgumentTypeError, match=f"parameter 'n': .* does not fit {dt}"):
                converter(dt, slot)("n", value)
        return
    got = converter(dt, False)("n", value)
    assert type(got) is dt.numpy.type
    want = bool(value) if dt.is_bool else int(value)
    assert got == want and converter(dt)("n", value) == (
        int(np.asarray(got).view(np.uint16)) if dt.is_float and dt.bits == 16 else want)


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("make", [int, np.int64, np.uint64], ids=["int", "int64", "uint64"])
def test_an_integer_that_does_not_fit_is_refused_whatever_its_type(dt, make):
    lo, hi = dtypes.int_range(dt)
    for value in (hi + 1, lo - 1):
        if not (np.iinfo(np.int64).min <= value <= np.iinfo(np.uint64).max) or \
                (make is np.int64 and value > np.iinfo(np.int64).max) or \
                (make is np.uint64 and value < 0):
            continue  # not a value of that type
        for slot in (True, False):
            with pytest.raises(ArgumentTypeError, match=f"parameter 'n': .* does not fit {dt}"):
                converter(dt, slot)("n", make(value))
    top = min(hi, np.iinfo(np.int64).max)  # values every one of the three types holds
    assert converter(dt)("n", make(top)) == top and converter(dt)("n", make(0)) == 0


@pytest.mark.parametrize("dt", [*INTS, dtypes.bool_], ids=str)
@pytest.mark.parametrize("value", [2.0, np.float32(1.5), np.float16(0), float("nan")], ids=repr)
def test_a_float_never_becomes_an_integer_or_a_bool(dt, value):
    for slot in (True, False):
        with pytest.raises(ArgumentTypeError, match=f"got the float .* for a {dt} parameter") \
                as info:
            converter(dt, slot)("n", value)
        assert "int(x)" in info.value.help


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_floats_round_once_and_16_bit_slots_are_their_bits(dt):
    rng = np.random.default_rng(5)
    values = [*rng.standard_normal(20) * 1000, 1e300, -1e300, float("inf"), 2**70 + 1, 3]
    for v in values:
        got = converter(dt, False)("x", v)
        want = np.asarray(dtypes.cast(v, dt))
        assert type(got) is dt.numpy.type
        assert np.asarray(got).tobytes() == want.tobytes()
        slot = converter(dt)("x", v)
        if dt.bits == 16:
            assert slot == int(want.view(np.uint16))
        else:
            assert slot == float(want) and type(slot) is float
    # one rounding into bf16 (ml_dtypes goes through f32: two): the halfway point of bf16's
    # 1 and 1 + 2**-7 nudged up by 2**-40 rounds up
    if dt is dtypes.bf16:
        assert float(converter(dt, False)("x", 1 + 2**-8 + 2**-40)) == 1 + 2**-7
        assert float(ml_dtypes.bfloat16(np.float32(1 + 2**-8 + 2**-40))) == 1.0


# -- on each path of each track -----------------------------------------------------------------

@fl.kernel
def add_small(x: fl.Slice[fl.i16], n: fl.i8, out: fl.DisjointSlice[fl.i16]):
    i = fl.thread.index_1d()
    if i < len(out):
        out[i] = x[i] + n


@ft.kernel
def add_small_tile(z: ft.Out[fl.i16], x: ft.In[fl.i16], n: fl.i8):
    z.store(ft.load_like(x, z) + n)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_numpy_integer_that_does_not_fit_is_refused_at_a_launch(backend):
    """np.int64(300) into an i8 parameter wrapped to 44 before; a Python 300 was refused."""
    x = fl.asarray(np.arange(16, dtype=np.int16) * 3 - 20)
    out = fl.full(16, -1, fl.i16)
    launch = add_small.prepare(16)
    for n in (np.int64(-100), np.int16(120)):  # the repeat launch too, through its plan
        add_small[launch](x, n, out)
        np.testing.assert_array_equal(out.numpy(), x.numpy().astype(np.int64) + int(n))
    for n in (300, np.int64(300), np.uint8(200)):
        with pytest.raises(ArgumentTypeError) as info:
            add_small[launch](x, n, out)
        assert str(info.value).startswith(f"kernel 'add_small', parameter 'n': {n!r} does not "
                                          f"fit i8")
        z = fl.full(16, -1, fl.i16).partition(8)
        with pytest.raises(ArgumentTypeError) as info:
            add_small_tile(z, x, n)
        assert str(info.value).startswith(f"kernel 'add_small_tile', parameter 'n': {n!r} does "
                                          f"not fit i8")
    z, _, _ = add_small_tile(fl.full(16, -1, fl.i16).partition(8), x, np.int32(-7)).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy().astype(np.int64) - 7)


def test_the_fast_paths_name_the_kernel_when_a_scalar_does_not_fit():
    """The repeat-launch plans convert scalars too; their refusals named no kernel before."""
    plan = LaunchPlan("k", KernelInfo((ParamInfo("n", fl.i8),)), 0, (1,), (32,), 0, None)

    class Idle:  # a stream a launch never reaches: the conversion refuses first
        _leases = False
    with pytest.raises(ArgumentTypeError) as info:
        plan.run((np.int32(1000),), [np.int32(1000)], Idle())
    assert str(info.value).startswith("kernel 'k', parameter 'n': np.int32(1000) does not fit i8")
    tile = tile_fast.TilePlan("t", add_small_tile.runtime_params, None, {2: fl.i8})
    x = fl.zeros(16, fl.i16)
    z = fl.zeros(16, fl.i16).partition(8)
    views = [args_.of_tensor(z._tensor), args_.of_tensor(x), 1000]
    with pytest.raises(ArgumentTypeError) as info:
        tile.operation((z, x, 1000), views, [z])
    assert str(info.value).startswith("kernel 't', parameter 'n': 1000 does not fit i8")
