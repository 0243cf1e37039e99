"""ft.Atomic tensors: add, max, min, exchange and compare_exchange against NumPy on the CPU
backend (and on the GPU with ``pytest -m gpu``), with repeated coordinates (a histogram, a
scatter-add), coordinates outside the tensor (skipped, giving 0), random inputs and poisoned
outputs.

Where coordinates repeat, the order of the updates is not defined (docs/semantics.md), so the
checks hold for any order: the final values against NumPy (exactly, with values whose sums are
exact in every order, or within the rounding bound of the additions), and the old values each
update returns as one chain per element: the initial value and every ``old + v`` are, as a
multiset, the old values and the final value.
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, f16, f32, f64, i32, i64, u32, u64
from fearless.backends.cpu.tile_memory import total_key
from fearless.errors import AliasError, ArgumentTypeError, CompileError
from fearless.ir import types as T
from tests.support import BACKENDS, on_cpu
from tests.tile import memory_kernels as K
from tests.tile.test_gather_scatter import launch, poisoned, rng


def _coordinates(n: int, size: int, seed: int, outside: int = 3) -> np.ndarray:
    """``n`` coordinates into ``size`` elements, repeating, a few outside on each side."""
    idx = rng(seed).integers(-outside, size + outside, n).astype(np.int32)
    idx[:2] = [0, size - 1]
    return idx


def _values(dt, n: int, seed: int) -> np.ndarray:
    """Small integers as ``dt`` (sums exact in any order), never all zero."""
    lo = 0 if dt.kind.name == "UINT" else -20
    v = rng(seed).integers(lo, 21, n)
    v[0] = 7
    return v.astype(dt.numpy)


def _run(kernel, dt, idx, init, *inputs, tile=128):
    old, acc, *_ = launch(kernel, poisoned(idx.size, dt).partition(tile), fl.asarray(init.copy()),
                          fl.asarray(idx), *(fl.asarray(x) for x in inputs))
    return old.unpartition().numpy(), acc.numpy()


def _inside(idx, size):
    return (idx >= 0) & (idx < size)


def _assert_chains(idx, init, v, old, final, combine):
    """Per element j: {init[j]} + {combine(old_k, v_k)} == {old_k} + {final[j]} (multisets over
    the k with idx[k] == j): the returned old values are a valid order of the updates."""
    for j in np.unique(idx[_inside(idx, init.size)]):
        k = idx == j
        before = np.sort(np.r_[init[j:j + 1], combine(old[k], v[k])].view(_bits(init)))
        after = np.sort(np.r_[old[k], final[j:j + 1]].view(_bits(init)))
        np.testing.assert_array_equal(before, after, err_msg=f"element {j}")


def _bits(a):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_histogram_counts_every_element_once(backend):
    bins, n = 16, 1000  # tiles of 256: the last one is partial, its padding gets bin -1
    x = rng(1).integers(-2, bins + 2, n).astype(np.int32)
    init = rng(2).integers(0, 5, bins).astype(np.int32)
    ranks, hist, _ = launch(K.histogram, poisoned(n, i32).partition(256), fl.asarray(init.copy()),
                            fl.asarray(x))
    ranks, hist = ranks.unpartition().numpy(), hist.numpy()
    inside = _inside(x, bins)
    np.testing.assert_array_equal(hist, init + np.bincount(x[inside], minlength=bins))
    np.testing.assert_array_equal(ranks[~inside], 0)  # skipped: old value 0
    for b in range(bins):  # each element saw a different count before its own update
        np.testing.assert_array_equal(np.sort(ranks[x == b]), init[b] + np.arange((x == b).sum()))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [i32, u32, i64, u64, f16, f32, f64])
def test_scatter_add_with_repeated_coordinates(backend, dt):
    size, n = 37, 900
    idx = _coordinates(n, size, 3)
    v = _values(dt, n, 4)
    init = _values(dt, size, 5)
    old, final = _run(K.scatter_add, dt, idx, init, v)
    inside = _inside(idx, size)
    want = init.copy()
    np.add.at(want, idx[inside], v[inside])
    np.testing.assert_array_equal(final, want)
    np.testing.assert_array_equal(old[~inside], 0)
    _assert_chains(idx, init, v, old, final, lambda a, b: (a + b).astype(dt.numpy))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_integer_adds_wrap(backend):
    idx = np.zeros(64, np.int32)
    v = np.full(64, 1 << 27, np.uint32)  # 64 * 2**27 = 2**33: wraps twice
    init = np.array([5], np.uint32)
    old, final = _run(K.scatter_add, u32, idx, init, v, tile=64)
    assert final[0] == 5
    chain = (5 + np.arange(64, dtype=np.uint64) * (1 << 27)) % (1 << 32)  # each update's start
    np.testing.assert_array_equal(np.sort(old), np.sort(chain).astype(np.uint32))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_float_scatter_add_is_within_the_rounding_bound(backend):
    size, n = 8, 2048
    idx = _coordinates(n, size, 6, outside=0)
    v = rng(7).standard_normal(n).astype(np.float32)
    init = rng(8).standard_normal(size).astype(np.float32)
    _, final = _run(K.scatter_add, f32, idx, init, v, tile=256)
    exact = init.astype(np.float64)
    np.add.at(exact, idx, v.astype(np.float64))
    # c additions into element j, each rounded (error <= u * |partial sum|) or, on the GPU,
    # flushed where subnormal (error < 2**-126): docs/semantics.md
    count = np.bincount(idx, minlength=size)
    magnitude = np.abs(init).astype(np.float64)
    np.add.at(magnitude, idx, np.abs(v).astype(np.float64))
    bound = count * (2.0 ** -24 * magnitude + 2.0 ** -126)
    assert np.all(np.abs(final - exact) <= bound)


def test_bf16_add_runs_on_the_cpu_and_compiles_from_sm_90_on(monkeypatch):
    base = sys.modules["fearless.kernel.base"]  # not for sm_80 (FEARLESS_CROSS_COMPILE in CI)
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, cross_compile=()))
    size, n = 5, 256
    idx = _coordinates(n, size, 9, outside=0)
    v = _values(bf16, n, 10)
    init = _values(bf16, size, 11)
    old, final = K.scatter_add(poisoned(n, bf16).partition(128), fl.asarray(init.copy()),
                               fl.asarray(idx), fl.asarray(v)).sync()[:2]
    want = init.astype(np.float64)
    np.add.at(want, idx, v.astype(np.float64))
    np.testing.assert_array_equal(final.numpy().astype(np.float64), want)  # |sums| < 256: exact
    types = (T.TensorView(bf16, 1, T.Role.OUT, (128,)), T.TensorView(bf16, 1, T.Role.ATOMIC),
             T.TensorView(i32, 1, T.Role.IN), T.TensorView(bf16, 1, T.Role.IN))
    assert K.scatter_add.inspect("cubin", types, arch="sm_90")
    with pytest.raises(CompileError) as info:
        K.scatter_add.inspect("cubin", types, arch="sm_80")
    text = str(info.value)
    assert text.startswith("kernel 'scatter_add', parameter 'acc': Tile IR has no bf16 atomic "
                           "add on sm_80 (from sm_90 on)")
    assert "old.store(acc.add(coordinates(idx, old), ft.load_like(v, old)))" in text


_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e-45, -3e-45])


def _extreme_values(dt, n, seed):
    if dt.is_float:
        v = rng(seed).standard_normal(n).astype(dt.numpy)
        v[:_SPECIAL.size] = _SPECIAL
        return v
    info = np.iinfo(dt.numpy)
    v = rng(seed).integers(info.min, info.max, n, endpoint=True, dtype=dt.numpy)
    v[:2] = [info.min, info.max]
    return v


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dt", [i32, u32, i64, f32, f64])
def test_max_and_min_order_floats_by_total_order(backend, kind, dt):
    size, n = 11, 640
    idx = _coordinates(n, size, 12)
    v = _extreme_values(dt, n, 13)
    init = _extreme_values(dt, size, 14)[::-1].copy()
    kernel = K.scatter_max if kind == "max" else K.scatter_min
    old, final = _run(kernel, dt, idx, init, v)
    key = total_key if dt.is_float else (lambda a: a)
    pick = np.argmax if kind == "max" else np.argmin
    inside = _inside(idx, size)
    for j in range(size):
        candidates = np.r_[init[j:j + 1], v[inside & (idx == j)]]
        want = candidates[pick(key(candidates))]
        assert final[j:j + 1].view(_bits(init)) == want[None].view(_bits(init)), j
        seen = old[idx == j]  # each old value is one of the candidates, between init and final
        assert np.isin(seen.view(_bits(init)), candidates.view(_bits(init))).all()
        lo, hi = sorted([key(init[j:j + 1])[0], key(final[j:j + 1])[0]])
        assert ((key(seen) >= lo) & (key(seen) <= hi)).all()
    np.testing.assert_array_equal(old[~inside], 0)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [i32, u64, f32, f64])
def test_exchange(backend, dt):
    size = 300
    perm = rng(15).permutation(size).astype(np.int32)  # distinct coordinates: a defined result
    v, init = _extreme_values(dt, size, 16), _extreme_values(dt, size, 17)
    old, final = _run(K.scatter_exchange, dt, perm, init, v)
    np.testing.assert_array_equal(old.view(_bits(init)), init[perm].view(_bits(init)))
    want = np.empty_like(init)
    want[perm] = v
    np.testing.assert_array_equal(final.view(_bits(init)), want.view(_bits(init)))
    idx = _coordinates(400, 20, 18)  # repeated: each element ends with one of its values
    v = _extreme_values(dt, 400, 19)
    init = _extreme_values(dt, 20, 20)
    old, final = _run(K.scatter_exchange, dt, idx, init, v)
    _assert_chains(idx, init, v, old, final, lambda a, b: b)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dt", [i32, i64, f32, f64])
def test_compare_exchange_compares_bits(backend, dt):
    size = 256
    perm = rng(21).permutation(size).astype(np.int32)
    init = _extreme_values(dt, size, 22)
    expected = init[perm].copy()
    differ = rng(23).random(size) < 0.5
    expected[differ] = _extreme_values(dt, size, 24)[differ]
    if dt.is_float:  # +0.0 against -0.0 and one NaN against another are not equal bits
        z = np.flatnonzero(init == 0)[0]
        expected[np.flatnonzero(perm == z)[0]] = -init[z]
    desired = _extreme_values(dt, size, 25)
    old, final = launch(K.scatter_cas, poisoned(size, dt).partition(128),
                        fl.asarray(init.copy()), fl.asarray(perm), fl.asarray(expected),
                        fl.asarray(desired))[:2]
    b = _bits(init)
    swap = expected.view(b) == init[perm].view(b)
    assert swap.any() and not swap.all()
    np.testing.assert_array_equal(old.unpartition().numpy().view(b), init[perm].view(b))
    want = init.copy()
    want[perm[swap]] = desired[swap]
    np.testing.assert_array_equal(final.numpy().view(b), want.view(b))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_2d_coordinates(backend):
    rows = rng(26).integers(-2, 12, 500).astype(np.int32)
    cols = rng(27).integers(-2, 9, 500).astype(np.int32)
    init = rng(28).integers(0, 3, (10, 7)).astype(np.int32)
    old, acc, *_ = launch(K.add_2d, poisoned(500, i32).partition(128), fl.asarray(init.copy()),
                          fl.asarray(rows), fl.asarray(cols))
    inside = (rows >= 0) & (rows < 10) & (cols >= 0) & (cols < 7)
    want = init.copy()
    np.add.at(want, (rows[inside], cols[inside]), 1)
    np.testing.assert_array_equal(acc.numpy(), want)
    old = old.unpartition().numpy()
    np.testing.assert_array_equal(old[~inside], 0)
    for r, c in {(int(a), int(b)) for a, b in zip(rows[inside], cols[inside])}:
        k = inside & (rows == r) & (cols == c)
        np.testing.assert_array_equal(np.sort(old[k]), init[r, c] + np.arange(k.sum()))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_every_tile_block_takes_its_own_ticket(backend):
    out, counter = launch(K.tickets, poisoned(64 * 10, i32).partition(64),
                          fl.asarray(np.array([5], np.int32)))
    got = out.unpartition().numpy().reshape(10, 64)
    assert (got == got[:, :1]).all()
    np.testing.assert_array_equal(np.sort(got[:, 0]), 5 + np.arange(10))
    assert counter.numpy()[0] == 15


# ownership ----------------------------------------------------------------------------------

def test_an_atomic_tensor_is_held_like_an_output():
    x = fl.asarray(np.zeros(256, np.int32))
    hist = fl.zeros(8, i32)
    op = K.histogram(poisoned(256, i32).partition(256), hist, x)
    with pytest.raises(AliasError, match="pending DeviceOperation"):
        hist.numpy()
    op.sync()
    assert hist.numpy()[0] == 256
    with pytest.raises(AliasError, match="'hist' is written and overlaps the memory of 'x'"):
        K.histogram(poisoned(256, i32).partition(256), x, x)
    with pytest.raises(ArgumentTypeError, match=r"expects a tensor \(ft.Atomic\), got a "
                                                r"partition"):
        K.histogram(poisoned(256, i32).partition(256), fl.zeros(8, i32).partition(8), x)


def test_the_gpu_matches_the_cpu_on_a_random_histogram():
    """The CPU reference itself, for the GPU twin below: the same data on both backends."""
    x = rng(29).integers(0, 64, 4096).astype(np.int32)
    _, hist, _ = K.histogram(poisoned(4096, i32).partition(1024), fl.zeros(64, i32),
                             fl.asarray(x)).sync()
    np.testing.assert_array_equal(hist.numpy(), np.bincount(x, minlength=64))


@pytest.mark.gpu
def test_gpu_histogram_agrees_with_the_cpu_backend():
    x = rng(30).integers(0, 256, 1 << 20).astype(np.int32)

    def run():
        _, hist, _ = K.histogram(poisoned(x.size, i32).partition(1024), fl.zeros(256, i32),
                                 fl.asarray(x)).sync()
        return hist.numpy()
    np.testing.assert_array_equal(run(), on_cpu(run))
