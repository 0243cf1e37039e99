"""Tensor layout, views, factories and host/device copies, checked against NumPy.

Tests run on the cpu backend unless marked ``gpu``; those run on the cuda backend and skip
cleanly without a usable GPU.
"""
from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest
from numpy.lib.array_utils import byte_bounds
from numpy.lib.stride_tricks import as_strided

from fearless import dtypes
from fearless.errors import BackendError, KernelBoundsError
from fearless.runtime import device, memory, stream
from fearless.runtime.tensor import Tensor, as_tensor, asarray, empty, full, ones, zeros
from tests.support import random_array


ALL = pytest.mark.parametrize("dt", dtypes.ALL, ids=str)

# (shape, element strides) laid over a big buffer; (3, 2) / (2, 3) interleaves without overlap.
LAYOUTS = [
    ((3, 4), (4, 1)), ((3, 4), (1, 3)), ((3, 4), (-4, 1)), ((3, 4), (4, -1)),
    ((3, 4), (-4, -1)), ((3, 4), (0, 1)), ((1, 4), (0, 1)), ((3, 4), (2, 1)),
    ((3, 4), (8, 2)), ((2, 3, 4), (1, 8, 2)), ((4, 4), (1, 1)), ((3, 3), (3, -1)),
    ((5,), (0,)), ((0, 5), (0, 0)), ((), ()), ((2, 2), (3, 2)), ((3, 2), (2, 3)),
    ((2, 1, 3), (3, 7, 1)), ((4, 3), (-1, -4)),
]


def crafted(shape, strides, dt=dtypes.f32) -> np.ndarray:
    """A NumPy view with the given element strides, starting mid-buffer so negatives fit."""
    base = random_array(dt, (512,))
    isz = dt.itemsize
    return as_strided(base[256:], shape, tuple(s * isz for s in strides))


def brute_force_overlap(shape, strides) -> bool:
    offsets = [sum(i * s for i, s in zip(idx, strides)) for idx in np.ndindex(*shape)]
    return len(set(offsets)) < len(offsets)


# -- factories -------------------------------------------------------------------------------
@ALL
def test_factories_every_dtype(dt):
    for shape in [(3, 5), 7, (), (0, 4)]:
        expect_shape = (shape,) if isinstance(shape, int) else shape
        e = empty(shape, dt)
        assert (e.shape, e.dtype, e.backend) == (expect_shape, dt, "cpu")
        assert e.is_contiguous() and e.offset == 0
        np.testing.assert_array_equal(zeros(shape, dt).numpy(), np.zeros(expect_shape, dt.numpy))
        np.testing.assert_array_equal(ones(shape, dt).numpy(), np.ones(expect_shape, dt.numpy))
        value = True if dt.is_bool else 7
        got = full(shape, value, dt).numpy()
        assert got.dtype == dt.numpy and got.shape == expect_shape
        np.testing.assert_array_equal(got, np.full(expect_shape, value, dt.numpy))


def test_factory_defaults_and_dtype_spellings():
    assert empty((2,)).dtype is dtypes.f32 and zeros(3).dtype is dtypes.f32
    assert ones(2).dtype is dtypes.f32
    assert zeros(2, "i16").dtype is dtypes.i16
    assert zeros(2, np.uint8).dtype is dtypes.u8
    assert zeros(2, ml_dtypes.bfloat16).dtype is dtypes.bf16
    with pytest.raises(ValueError):
        empty((2, -1))
    with pytest.raises(TypeError):
        zeros(2, np.complex64)


@ALL
def test_asarray_round_trip_every_dtype(dt):
    a = random_array(dt, (4, 6), seed=1)
    t = asarray(a)
    assert t.dtype is dt and t.shape == (4, 6) and t.strides == (6, 1)
    assert (t.ndim, t.size, t.itemsize, t.nbytes) == (2, 24, dt.itemsize, 24 * dt.itemsize)
    out = t.numpy()
    assert out.dtype == dt.numpy and out.flags.c_contiguous
    np.testing.assert_array_equal(out, a)
    assert not np.shares_memory(out, a)


def test_asarray_wraps_numpy_without_copy_and_writes_through():
    a = random_array(dtypes.f32, (5, 4))
    t = asarray(a)
    assert t.data_ptr() == a.ctypes.data
    t.host_view()[2, 3] = 123.0
    assert a[2, 3] == 123.0
    # the interpreter's gather/scatter: fancy indexing in place on the view
    view = t[:, ::-1].host_view()
    view[[0, 4], [1, 2]] = -5.0
    assert a[0, 2] == -5.0 and a[4, 1] == -5.0


def test_asarray_conversions_and_sources():
    a = random_array(dtypes.i32, (3, 3))
    t = asarray(a, dtype="f64")
    assert t.dtype is dtypes.f64 and t.data_ptr() != a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float64))
    assert asarray(t) is t and asarray(t, dtypes.f64) is t
    np.testing.assert_array_equal(asarray(t, "i8").numpy(), a.astype(np.int8))
    assert asarray([[1.5, 2.5]]).dtype is dtypes.f64
    assert asarray([1, 2, 3]).dtype is dtypes.i64
    s = asarray(2.5, dtypes.bf16)
    assert s.shape == () and s.numpy() == ml_dtypes.bfloat16(2.5)
    with pytest.raises(TypeError):
        asarray(np.zeros(3, np.complex64))


def test_wrapped_array_stays_alive():
    a = random_array(dtypes.f64, (64,))
    expect = a.copy()
    t = asarray(a)
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(t[::3].numpy(), expect[::3])


def test_readonly_source_gives_readonly_host_view():
    a = random_array(dtypes.f32, (4,))
    a.flags.writeable = False
    view = asarray(a).host_view()
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1.0


# -- views -----------------------------------------------------------------------------------
KEYS = [
    1, -1, slice(1, 3), slice(None, None, -1), (Ellipsis, 2), (1, Ellipsis, slice(None, None, -2)),
    (slice(None, None, 2), slice(1, None), -3), (slice(5, 1, -2),), (slice(3, 1),),
    (slice(None), slice(None, None, -3), 0), (Ellipsis,), (0, 0, 0), (np.int64(2), slice(-2, None)),
    (slice(None, None, -1), slice(None, None, -1), slice(None, None, -1)), (slice(0, 0), 1),
]


def numpy_view(a: np.ndarray, key) -> np.ndarray:
    """``a[key]`` as a view even when every axis gets an int (NumPy would return a scalar)."""
    key = key if isinstance(key, tuple) else (key,)
    return a[key if any(k is Ellipsis for k in key) else key + (Ellipsis,)]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_matches_numpy(key):
    a = random_array(dtypes.f32, (6, 5, 4), seed=2)
    t = asarray(a)
    v, expect = t[key], numpy_view(a, key)
    assert v.shape == expect.shape
    assert v.strides == tuple(s // 4 for s in expect.strides)
    np.testing.assert_array_equal(v.numpy(), expect)
    if expect.size:
        assert v.data_ptr() == expect.ctypes.data
        assert v.byte_extent() == byte_bounds(expect)
    assert np.shares_memory(v.host_view(), a) == bool(expect.size)


def test_views_of_views_and_transpose():
    a = random_array(dtypes.i64, (7, 9), seed=3)
    t = asarray(a)
    v = t[1:, ::-2][::2, 1:].T[1:]
    expect = a[1:, ::-2][::2, 1:].T[1:]
    np.testing.assert_array_equal(v.numpy(), expect)
    assert v.data_ptr() == expect.ctypes.data
    assert t.T.shape == (9, 7) and t.T.strides == (1, 9)
    assert not t.T.is_contiguous() and t.is_contiguous()
    v.host_view()[0, 0] = 999
    assert a[1:, ::-2][::2, 1:].T[1:][0, 0] == 999


@pytest.mark.parametrize("key, error", [
    ((0, 0, 0, 0), IndexError), (6, IndexError), (-7, IndexError),
    ((Ellipsis, Ellipsis), IndexError), (slice(None, None, 0), IndexError),
    (True, TypeError), (None, TypeError), ([0, 1], TypeError), (np.array([0]), TypeError),
    (1.0, TypeError), ((0, "a"), TypeError),
], ids=repr)
def test_getitem_rejects(key, error):
    t = asarray(random_array(dtypes.f32, (6, 5, 4)))
    with pytest.raises(error):
        t[key]


# -- layout queries --------------------------------------------------------------------------
@pytest.mark.parametrize("shape, strides", LAYOUTS, ids=str)
def test_layout_queries_on_crafted_strides(shape, strides):
    a = crafted(shape, strides)
    t = asarray(a)
    assert t.strides == strides and t.data_ptr() == a.ctypes.data
    assert t.byte_extent() == byte_bounds(a)
    assert t.is_contiguous() == a.flags.c_contiguous
    np.testing.assert_array_equal(t.numpy(), a)
    overlap = brute_force_overlap(shape, strides)
    if (shape, strides) == ((3, 2), (2, 3)):  # interleaved but disjoint: reported, on purpose
        assert not overlap and t.has_internal_overlap()
    else:
        assert t.has_internal_overlap() == overlap


def test_overlap_of_broadcast_and_expanded_arrays():
    assert asarray(np.broadcast_to(np.float32(1), (3, 4))).has_internal_overlap()
    row = asarray(np.broadcast_to(random_array(dtypes.f32, (1, 4)), (1, 4)))
    assert not row.has_internal_overlap()
    t = asarray(random_array(dtypes.f32, (4, 4)))
    assert not t[::-1, 1:].has_internal_overlap()


def test_random_layouts_against_brute_force():
    rng = np.random.default_rng(7)
    exact = 0
    for _ in range(300):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(n) for n in rng.integers(1, 4, ndim))
        strides = tuple(int(s) for s in rng.integers(-6, 7, ndim))
        a = crafted(shape, strides)
        t = asarray(a)
        truth = brute_force_overlap(shape, strides)
        assert t.has_internal_overlap() or not truth  # never misses a real overlap
        exact += t.has_internal_overlap() == truth
        assert t.byte_extent() == byte_bounds(a)
        np.testing.assert_array_equal(t.numpy(), a)
    assert exact > 250


def test_zero_size_and_zero_d():
    t = asarray(random_array(dtypes.f32, (4, 5)))
    e = t[2:2, ::-1]
    assert e.shape == (0, 5) and e.size == 0 and e.nbytes == 0
    p = e.data_ptr()
    assert e.byte_extent() == (p, p)
    assert e.is_contiguous() and not e.has_internal_overlap()
    assert e.numpy().shape == (0, 5)
    z = t[1, 2]
    assert z.shape == () and z.size == 1 and z.byte_extent() == (z.data_ptr(), z.data_ptr() + 4)
    assert z.numpy() == t.numpy()[1, 2]
    with pytest.raises(TypeError):
        len(z)


# -- host access and protocols --------------------------------------------------------------
def test_numpy_synchronizes_and_raises_deferred_errors():
    t = asarray(random_array(dtypes.f32, (3,)))

    def failing_check():
        raise KernelBoundsError("read out of bounds", index=9, length=3, axis=0)

    stream.current_stream().defer(failing_check)
    with pytest.raises(KernelBoundsError):
        t.numpy()
    np.testing.assert_array_equal(t.numpy(), t.host_view())  # raised once, then cleared


def test_bf16_numpy_dtype():
    a = random_array(dtypes.bf16, (3, 4))
    out = asarray(a).T.numpy()
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out, a.T)


def test_python_protocols():
    a = random_array(dtypes.u16, (4, 2))
    t = asarray(a)
    assert len(t) == 4
    assert repr(t) == "Tensor(shape=(4, 2), dtype=u16, backend=cpu)"
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    with pytest.raises(ValueError):
        np.asarray(t, copy=False)
    assert not hasattr(t, "__cuda_array_interface__")


def test_host_view_refuses_cuda_tensors():
    fake = Tensor(shape=(2,), strides=(1,), dtype=dtypes.f32, backend="cuda", offset=0,
                  base_ptr=1 << 40, owner=None)
    with pytest.raises(TypeError, match="numpy"):
        fake.host_view()
    assert fake.data_ptr() == 1 << 40 and fake[1].data_ptr() == (1 << 40) + 4


def test_as_tensor():
    a = random_array(dtypes.i32, (3,))
    t = asarray(a)
    assert as_tensor(t) is t
    v = as_tensor(a)
    assert isinstance(v, Tensor) and v.data_ptr() == a.ctypes.data
    for other in ([1, 2], 3, 2.0, "x", None, np.float32(1)):
        assert as_tensor(other) is None
    with pytest.raises(TypeError):
        as_tensor(np.zeros(2, np.complex128))


# -- memory helpers that need no GPU ---------------------------------------------------------
def test_memory_errors_name_the_cuda_result():
    from cuda.bindings import driver
    with pytest.raises(BackendError, match="cuMemsetD8Async failed with CUDA_ERROR_INVALID_VALUE"):
        memory.check_result((driver.CUresult.CUDA_ERROR_INVALID_VALUE,), "cuMemsetD8Async")
    memory.check_result((driver.CUresult.CUDA_SUCCESS,), "cuMemsetD8Async")


def test_memory_validates_before_touching_the_driver():
    with pytest.raises(ValueError):
        memory.memset(0, 256, 8)
    with pytest.raises(ValueError):
        memory.copy_host_to_device(0, np.zeros((4, 4), np.float32)[:, ::2], 32)
    with pytest.raises(ValueError):
        memory.copy_device_to_host(np.zeros(2, np.uint8), 0, 8)
    with pytest.raises(ValueError):
        memory.allocate(-1)


# -- cuda ------------------------------------------------------------------------------------
@pytest.mark.gpu
@ALL
def test_cuda_round_trip_every_dtype(dt):
    a = random_array(dt, (5, 7), seed=4)
    t = asarray(a)
    assert t.backend == "cuda" and t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(asarray(a[:, ::-2]).numpy(), a[:, ::-2])
    np.testing.assert_array_equal(t[1:, ::3].T.numpy(), a[1:, ::3].T)


@pytest.mark.gpu
@ALL
def test_cuda_factories_every_dtype(dt):
    for shape in [(3, 5), (), (0, 2)]:
        np.testing.assert_array_equal(zeros(shape, dt).numpy(), np.zeros(shape, dt.numpy))
        np.testing.assert_array_equal(ones(shape, dt).numpy(), np.ones(shape, dt.numpy))
        for value in ([True] if dt.is_bool else [-1 if dt.is_signed or dt.is_float else 255, 3]):
            got = full(shape, value, dt)
            assert got.backend == "cuda"
            np.testing.assert_array_equal(got.numpy(), np.full(shape, value, dt.numpy))
        assert empty(shape, dt).shape == shape


@pytest.mark.gpu
@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_cuda_views_match_numpy(key):
    a = random_array(dtypes.f32, (6, 5, 4), seed=5)
    t = asarray(a)
    v, expect = t[key], numpy_view(a, key)
    np.testing.assert_array_equal(v.numpy(), expect)
    if expect.size:
        shift = expect.ctypes.data - a.ctypes.data
        assert v.data_ptr() == t.data_ptr() + shift
        lo, hi = byte_bounds(expect)
        assert v.byte_extent() == (lo - a.ctypes.data + t.data_ptr(),
                                   hi - a.ctypes.data + t.data_ptr())


@pytest.mark.gpu
def test_cuda_memory_helpers():
    a, b = memory.allocate(64), memory.allocate(64)
    pa, pb = int(a.handle), int(b.handle)
    memory.memset(pa, 0x7F, 64)
    memory.memset(pb, 0x01, 64)
    memory.copy_device_to_device(pb + 8, pa, 16)
    host = np.zeros(64, np.uint8)
    memory.copy_device_to_host(host, pb, 64)
    expect = np.full(64, 1, np.uint8)
    expect[8:24] = 0x7F
    np.testing.assert_array_equal(host, expect)
    src = random_array(dtypes.u8, (64,))
    memory.copy_host_to_device(pa, src, 64)
    memory.copy_device_to_host(host, pa, 64)
    np.testing.assert_array_equal(host, src)
    assert memory.allocate(0).size >= 1


@pytest.mark.gpu
def test_cuda_tensor_outlives_a_backend_switch():
    a = random_array(dtypes.f64, (4, 4), seed=6)
    t = asarray(a)[::-1]
    device.set_backend("cpu")
    np.testing.assert_array_equal(t.numpy(), a[::-1])
    assert asarray(a).backend == "cpu"


@pytest.mark.gpu
def test_cuda_conversions_and_host_objects():
    a = random_array(dtypes.f32, (3, 4), seed=8)
    t = asarray(a)
    np.testing.assert_array_equal(asarray(t, dtypes.f64).numpy(), a.astype(np.float64))
    assert asarray(t, dtypes.f64).backend == "cuda"
    assert as_tensor(a) is None and as_tensor(t) is t
    with pytest.raises(TypeError):
        t.host_view()
    e = asarray(np.zeros((0, 3), np.float32))
    assert e.numpy().shape == (0, 3) and e.byte_extent()[0] == e.byte_extent()[1]
