"""Tensor.reshape: a no-copy view by NumPy's rules, or a ShapeError.

NumPy is the reference: assigning ``.shape`` on a NumPy view succeeds exactly when the reshape
needs no copy, so random layouts (slices, steps, transposes, reversed and broadcast axes) are
reshaped on both sides and must agree on whether a view exists and on its elements.
"""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import fearless as fl
from fearless.errors import MovedError, ShapeError
from tests.support import BACKENDS, random_array


def _numpy_view(arr: np.ndarray, shape):
    """NumPy's no-copy reshape of ``arr``, or None when it needs a copy."""
    view = arr.view()
    try:
        view.shape = shape
    except AttributeError:
        return None
    return view


def _factorisations(n: int, rank: int):
    """Every shape of ``rank`` axes with ``n`` elements (n > 0)."""
    if rank == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0
            for rest in _factorisations(n // d, rank - 1)]


def _layouts(seed: int):
    """(NumPy view, the same view as a fearless Tensor over one base array)."""
    rng = np.random.default_rng(seed)
    base = random_array(fl.f32, (4, 6, 8), seed)
    t = fl.asarray(base)
    keys = [(slice(None),) * 3, (slice(1, 3), slice(None), slice(None, None, 2)),
            (0, slice(None), slice(2, 6)), (slice(None, None, -1), slice(2, 5), slice(None)),
            (slice(None), 3, slice(None)), (slice(None), slice(0, 1), slice(None))]
    for key in keys:
        yield base[key], t[key]
        if base[key].ndim > 1:
            yield base[key].T, t[key].T
    axes = tuple(rng.permutation(3))
    yield base.transpose(axes), fl.Tensor(shape=base.transpose(axes).shape,
                                          strides=tuple(t.strides[a] for a in axes),
                                          dtype=fl.f32, backend="cpu", offset=0,
                                          base_ptr=t._base_ptr, owner=t._owner,
                                          storage=t._storage)


@pytest.mark.parametrize("seed", range(3))
def test_reshape_agrees_with_numpy_on_random_layouts(seed):
    for arr, t in _layouts(seed):
        assert t.shape == arr.shape
        for rank in (1, 2, 3, 4):
            for shape in _factorisations(arr.size, rank)[:40]:
                expected = _numpy_view(arr, shape)
                if expected is None:
                    with pytest.raises(ShapeError, match="without a copy"):
                        t.reshape(shape)
                    continue
                got = t.reshape(shape)
                assert got.shape == shape and got._storage is t._storage
                np.testing.assert_array_equal(got.numpy(), expected)
                assert np.shares_memory(got.host_view(), arr)  # a view, not a copy


def test_reshape_minus_one_spellings_and_errors():
    a = random_array(fl.f32, (6, 4), 1)
    t = fl.asarray(a)
    for shape in [(-1,), (3, -1), (-1, 2, 2), (2, 1, -1, 1)]:
        np.testing.assert_array_equal(t.reshape(shape).numpy(), a.reshape(shape))
    np.testing.assert_array_equal(t.reshape(4, 6).numpy(), a.reshape(4, 6))  # varargs
    for bad, match in [((5, 5), "24 elements"), ((-1, -1), "only one"), ((7, -1), "-1"),
                       ((-2, 12), "negative")]:
        with pytest.raises(ShapeError, match=match):
            t.reshape(bad)
    with pytest.raises(ValueError):  # ShapeError is a ValueError too
        t.reshape(5)
    with pytest.raises(TypeError):
        t.reshape("ab")


def test_broadcast_and_empty_layouts():
    row = random_array(fl.f32, 4, 2)
    b = as_strided(row, (3, 4), (0, 4))  # every row the same memory
    t = fl.asarray(b)
    with pytest.raises(ShapeError, match="without a copy"):
        t.reshape(12)
    np.testing.assert_array_equal(t.reshape(3, 2, 2).numpy(), b.reshape(3, 2, 2))
    e = fl.zeros((0, 5))
    assert e.reshape(5, 0, 3).shape == (5, 0, 3) and e.reshape(-1, 5).shape == (0, 5)
    with pytest.raises(ShapeError, match="-1"):
        e.reshape(-1, 0)
    s = fl.asarray(np.float32(3.5))
    assert s.reshape(1, 1).numpy()[0, 0] == 3.5 and s.reshape(()).shape == ()


def test_a_reshaped_view_shares_ownership_with_its_base():
    t = fl.zeros((4, 8))
    v = t.reshape(32)
    with pytest.raises(fl.errors.AliasError, match="another view"):
        t.partition((2, 8))
    del v
    p = t.partition((2, 8))
    with pytest.raises(MovedError):
        t.reshape(32)
    p.unpartition()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_reshaped_view_is_a_kernel_argument(backend):
    from tests.runtime.lazy_kernels import add
    a, b = random_array(fl.f32, (8, 16), 3), random_array(fl.f32, (8, 16), 4)
    x, y, out = fl.asarray(a), fl.asarray(b), fl.full((2, 64), np.nan, fl.f32)
    add[add.prepare(128)](x.reshape(-1), y.reshape(128), out.reshape(128))
    np.testing.assert_array_equal(out.numpy(), (a + b).reshape(2, 64))
    half = fl.full(64, np.nan, fl.f32)
    add[add.prepare(64)](x[:, ::2].reshape(64), y[:, ::2].reshape(-1), half)  # stride 2
    np.testing.assert_array_equal(half.numpy(), (a + b)[:, ::2].reshape(64))
