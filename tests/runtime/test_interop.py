"""DLPack and __cuda_array_interface__ in both directions, with NumPy, PyTorch and CuPy.

Tests run on the cpu backend unless marked ``gpu``; those run on the cuda backend and skip
cleanly without a usable GPU. PyTorch / CuPy tests skip where the library is not installed.
"""
from __future__ import annotations

import ctypes
import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

from fearless import dtypes
from fearless.runtime import interop, memory
from fearless.runtime.tensor import Tensor, as_tensor, asarray, empty
from tests.support import random_array

# DLPack codes a consumer must read: (code, bits) per dtype.
DL_CODES = {"bool": (6, 8), "i8": (0, 8), "i16": (0, 16), "i32": (0, 32), "i64": (0, 64),
            "u8": (1, 8), "u16": (1, 16), "u32": (1, 32), "u64": (1, 64), "f16": (2, 16),
            "bf16": (4, 16), "f32": (2, 32), "f64": (2, 64)}
NUMPY_DLPACK = [d for d in dtypes.ALL if d is not dtypes.bf16]  # NumPy's DLPack knows no bf16

_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))


class Producer:
    """A DLPack producer that is not a NumPy array: forwards to the object it wraps."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class CAIProducer:
    """A bare __cuda_array_interface__ producer (what Numba-style libraries hand over)."""

    def __init__(self, source):
        self.source = source
        self.__cuda_array_interface__ = source.__cuda_array_interface__


def read_capsule(capsule) -> interop._DLTensor:
    """The DLTensor inside an unconsumed capsule; valid only while the capsule is alive."""
    assert _is_valid(capsule, b"dltensor") == 1
    return interop._DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor")).dl_tensor


# -- producer, cpu ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", dtypes.ALL, ids=str)
def test_capsule_fields(dt):
    t = asarray(random_array(dt, (4, 6)))[1:, ::-2]
    live = len(interop._LIVE)
    capsule = t.__dlpack__()
    dl = read_capsule(capsule)
    assert (dl.device.device_type, dl.device.device_id) == (1, 0) == t.__dlpack_device__()
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == DL_CODES[dt.name] + (1,)
    assert dl.ndim == 2 and dl.data == t.data_ptr() and dl.byte_offset == 0
    assert [dl.shape[i] for i in range(2)] == [3, 3]
    assert [dl.strides[i] for i in range(2)] == [6, -2]
    assert len(interop._LIVE) == live + 1
    del capsule  # never consumed: the capsule's destructor releases the tensor
    assert len(interop._LIVE) == live


@pytest.mark.parametrize("dt", NUMPY_DLPACK, ids=str)
def test_numpy_from_dlpack_zero_copy(dt):
    a = random_array(dt, (5, 4), seed=1)
    t = asarray(a)
    for view, expect in [(t, a), (t.T, a.T), (t[::-1, 1::2], a[::-1, 1::2]), (t[2], a[2])]:
        x = np.from_dlpack(view)
        np.testing.assert_array_equal(x, expect)
        assert x.ctypes.data == view.data_ptr()
        assert x.strides == tuple(s * dt.itemsize for s in view.strides)


def test_numpy_from_dlpack_broadcast_and_empty():
    t = asarray(np.broadcast_to(random_array(dtypes.f32, (1, 3)), (4, 3)))
    assert t.strides == (0, 1)
    np.testing.assert_array_equal(np.from_dlpack(t), t.numpy())
    assert np.from_dlpack(empty((0, 3))).shape == (0, 3)
    assert np.from_dlpack(asarray(np.float64(2.5))) == 2.5


def test_exported_tensor_lives_until_the_consumer_lets_go():
    t = asarray(random_array(dtypes.f32, (16,)))
    expect = t.numpy()
    view = t[::2]
    ref = weakref.ref(view)
    x = np.from_dlpack(view)
    del t, view
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(x, expect[::2])
    del x
    gc.collect()
    assert ref() is None


def test_dlpack_arguments():
    t = asarray(random_array(dtypes.i32, (3, 3)))
    assert _is_valid(t.__dlpack__(max_version=(1, 0)), b"dltensor") == 1
    capsule = t.__dlpack__(dl_device=(1, 0))  # held: the struct lives as long as the capsule
    assert read_capsule(capsule).data == t.data_ptr()
    with pytest.raises(BufferError):
        t.__dlpack__(stream=5)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    copy = t.T.__dlpack__(copy=True)
    assert read_capsule(copy).data != t.data_ptr()
    x = np.from_dlpack(Producer(t.T), copy=True)
    np.testing.assert_array_equal(x, t.numpy().T)
    assert not np.shares_memory(x, t.host_view())


def test_cai_only_on_cuda_and_never_bf16():
    t = asarray(random_array(dtypes.f32, (2,)))
    assert not hasattr(t, "__cuda_array_interface__")
    fake = Tensor(shape=(2,), strides=(1,), dtype=dtypes.bf16, backend="cuda", offset=0,
                  base_ptr=1 << 40, owner=None)
    with pytest.raises(TypeError, match="bf16"):
        fake.__cuda_array_interface__


# -- consumer, cpu ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", NUMPY_DLPACK, ids=str)
def test_asarray_of_a_dlpack_producer_is_a_zero_copy_view(dt):
    a = random_array(dt, (6, 5), seed=2)
    for source in (a, a[::-1, 1::2], a.T):
        t = asarray(Producer(source))
        assert t.data_ptr() == source.ctypes.data and t.dtype is dt
        np.testing.assert_array_equal(t.numpy(), source)
    t = as_tensor(Producer(a))
    t.host_view()[1, 2] = a[0, 0]
    assert a[1, 2] == a[0, 0]


def test_bf16_through_dlpack():
    a = random_array(dtypes.bf16, (4, 3), seed=3)
    source = asarray(a)[::-1]
    t = asarray(Producer(source))
    assert t.dtype is dtypes.bf16 and t.data_ptr() == source.data_ptr()
    np.testing.assert_array_equal(t.numpy(), a[::-1])
    assert t.numpy().dtype == np.dtype(ml_dtypes.bfloat16)


def test_imported_view_keeps_the_producer_alive():
    a = random_array(dtypes.f64, (32,), seed=4)
    expect = a.copy()
    ref = weakref.ref(a)
    t = asarray(Producer(a))[5:]
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(t.numpy(), expect[5:])
    del t
    gc.collect()
    assert ref() is None


def test_asarray_of_producer_with_dtype_converts():
    a = random_array(dtypes.i16, (3,), seed=5)
    t = asarray(Producer(a), dtype=dtypes.f32)
    assert t.dtype is dtypes.f32 and t.data_ptr() != a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))


def test_foreign_device_and_cuda_objects_on_cpu():
    class FakeCUDA:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (1 << 40, False),
                                    "version": 3, "strides": None}

    class FakeCUDADLPack(Producer):
        def __dlpack_device__(self):
            return (2, 0)

    assert interop.foreign_device(np.zeros(2)) == "cpu"
    assert interop.foreign_device(Producer(np.zeros(2))) == "cpu"
    assert interop.foreign_device(FakeCUDA()) == "cuda"
    assert interop.foreign_device(FakeCUDADLPack(np.zeros(2))) == "cuda"
    assert interop.foreign_device([1.0]) is None and interop.foreign_device(3) is None
    for obj in (FakeCUDA(), FakeCUDADLPack(np.zeros(2))):
        assert as_tensor(obj) is None
        with pytest.raises(TypeError, match="CUDA array"):
            asarray(obj)


def test_torch_cpu_tensor_is_viewed_without_copy():
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 1.5 + 1
    t = as_tensor(x.t())
    assert t.data_ptr() == x.data_ptr() and t.strides == (1, 4)
    np.testing.assert_array_equal(t.numpy(), x.t().numpy())
    y = torch.from_dlpack(asarray(random_array(dtypes.bf16, (2, 3))))
    assert y.dtype == torch.bfloat16


# -- cuda ------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cuda_capsule_and_cai_fields():
    a = random_array(dtypes.f32, (4, 6), seed=6)
    t = asarray(a)[:, ::2]
    capsule = t.__dlpack__(stream=1)
    dl = read_capsule(capsule)
    assert (dl.device.device_type, dl.device.device_id) == t.__dlpack_device__() == (2, 0)
    assert dl.data == t.data_ptr()
    cai = t.__cuda_array_interface__
    assert cai["shape"] == (4, 3) and cai["strides"] == (24, 8) and cai["typestr"] == "<f4"
    assert cai["data"] == (t.data_ptr(), False) and cai["version"] == 3
    assert cai["stream"] == memory.cuda_stream().handle != 0
    assert empty((0, 2)).__cuda_array_interface__["data"][0] == 0
    with pytest.raises(TypeError, match="bf16"):
        asarray(random_array(dtypes.bf16, (2,))).__cuda_array_interface__


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [d for d in dtypes.ALL if d is not dtypes.bf16], ids=str)
def test_cuda_cai_consumed_by_a_plain_consumer(dt):
    from cuda.core.utils import StridedMemoryView
    a = random_array(dt, (5, 4), seed=7)
    t = asarray(a)[::2, 1:]
    view = StridedMemoryView.from_cuda_array_interface(t, -1)
    assert view.ptr == t.data_ptr() and tuple(view.shape) == (3, 3)
    back = asarray(CAIProducer(t))
    assert back.data_ptr() == t.data_ptr() and back.dtype is dt and back.strides == t.strides
    np.testing.assert_array_equal(back.numpy(), a[::2, 1:])
    flipped = asarray(a)[::-1, ::-2]
    for producer in (CAIProducer(flipped), Producer(flipped)):
        back = as_tensor(producer)
        assert back.data_ptr() == flipped.data_ptr() and back.strides == (-4, -2)
        np.testing.assert_array_equal(back.numpy(), a[::-1, ::-2])


@pytest.mark.gpu
def test_cuda_export_to_torch():
    torch = pytest.importorskip("torch")
    for dt in dtypes.ALL:
        a = random_array(dt, (4, 6), seed=8)
        t = asarray(a)[1:, ::2]
        x = torch.from_dlpack(t)
        assert x.is_cuda and x.data_ptr() == t.data_ptr()
        assert tuple(x.stride()) == t.strides
        got = x.float().cpu().numpy() if dt is dtypes.bf16 else x.cpu().numpy()
        np.testing.assert_array_equal(got, a[1:, ::2].astype(got.dtype))
    f = asarray(random_array(dtypes.f32, (3, 3), seed=9))
    y = torch.as_tensor(f, device="cuda")  # through __cuda_array_interface__
    assert y.data_ptr() == f.data_ptr()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # a non-blocking consumer stream: ordered through an event
        z = torch.from_dlpack(f)
        np.testing.assert_array_equal((z * 2).cpu().numpy(), f.numpy() * 2)


@pytest.mark.gpu
def test_cuda_import_from_torch_is_zero_copy():
    torch = pytest.importorskip("torch")
    x = torch.randn(6, 5, device="cuda") + 3
    for source in (x, x[:, ::2], x.t(), x[2:]):
        t = asarray(source)
        assert t.backend == "cuda" and t.data_ptr() == source.data_ptr()
        assert t.strides == tuple(source.stride())
        np.testing.assert_array_equal(t.numpy(), source.cpu().numpy())
    b = torch.randn(3, 4, device="cuda").to(torch.bfloat16)
    tb = as_tensor(b)
    assert tb.dtype is dtypes.bf16 and tb.data_ptr() == b.data_ptr()
    np.testing.assert_array_equal(tb.numpy().astype(np.float32), b.float().cpu().numpy())
    expect = x.cpu().numpy()
    kept = as_tensor(x)
    del x, source, t
    gc.collect()
    torch.cuda.empty_cache()
    np.testing.assert_array_equal(kept.numpy(), expect)
    host = torch.arange(4, dtype=torch.int32)
    assert as_tensor(host) is None and as_tensor(np.arange(3)) is None
    copied = asarray(host)
    assert copied.backend == "cuda" and copied.data_ptr() != host.data_ptr()
    np.testing.assert_array_equal(copied.numpy(), host.numpy())


@pytest.mark.gpu
def test_cuda_cupy_both_ways():
    cp = pytest.importorskip("cupy")
    a = random_array(dtypes.f32, (4, 5), seed=10)
    t = asarray(a)[:, 1::2]
    via_cai = cp.asarray(t)
    assert via_cai.data.ptr == t.data_ptr()
    np.testing.assert_array_equal(cp.asnumpy(via_cai), a[:, 1::2])
    via_dlpack = cp.from_dlpack(t)
    assert via_dlpack.data.ptr == t.data_ptr()
    c = cp.arange(24, dtype=cp.int64).reshape(4, 6)[::-1, ::3]
    back = asarray(c)
    assert back.data_ptr() == c.data.ptr and back.strides == (-6, 3)
    np.testing.assert_array_equal(back.numpy(), cp.asnumpy(c))
