"""ft.gather, ft.scatter and load padding on the CPU backend against NumPy (and on the GPU with
``pytest -m gpu``). Inputs are random, outputs poisoned, tensors end in partial tiles, and
gathers reach outside the tensor (negative and too-large coordinates give the padding). On the
CPU each kernel is first compiled for sm_80 and sm_90 (``launch``), so the Tile IR of every
kernel here is known to be accepted by tileiras.
"""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import fearless as fl
from fearless import bf16, bool_, f16, f32, f64, i32, i64, u8
from fearless.backends.tileir import tileiras
from fearless.errors import RaceError
from fearless.runtime import ahead, device
from tests.support import BACKENDS, CROSS_ARCHS, random_array
from tests.tile import memory_kernels as K


def launch(kernel, *args, **constants):
    """``kernel(*args).sync()`` on the test's backend; on the CPU the same call is compiled for
    sm_80 and sm_90 first (nothing runs), as FEARLESS_CROSS_COMPILE does in CI."""
    if device.current_backend() == "cpu" and tileiras.find() is not None:
        with ahead.compile_only(CROSS_ARCHS) as made:
            args = kernel(*args, **constants).sync()
        assert sorted(m[3] for m in made) == list(CROSS_ARCHS)
    return kernel(*args, **constants).sync()


def poisoned(shape, dtype=f32):
    """A tensor of values no kernel here writes: NaN, -7, or the largest unsigned value (bool:
    False, whose tests write every element)."""
    if dtype.is_float or dtype.is_bool:
        return fl.full(shape, np.nan if dtype.is_float else False, dtype)
    return fl.full(shape, -7 if dtype.is_signed else np.iinfo(dtype.numpy).max, dtype)


def rng(seed):
    return np.random.default_rng(seed)


def padded(x: np.ndarray, tiles: tuple) -> np.ndarray:
    """``x`` with zeros appended up to whole tiles (what a tile past the edge reads)."""
    shape = tuple(-(-n // t) * t for n, t in zip(x.shape, tiles))
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


# gathers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("dtype", [f32, i32, bool_, u8, f16, bf16, i64, f64])
def test_gather_1d_reads_the_indices_and_pads_outside(backend, dtype):
    n, m = 1000, 700  # x has n elements; the output (and idx) m, in tiles of 128 (one partial)
    x = random_array(dtype, n, 1)
    idx = rng(2).integers(-40, n + 40, m).astype(np.int32)
    idx[:4] = [0, n - 1, -1, n]  # both ends and the first coordinate outside each side
    pad = dtype.numpy.type(True if dtype.is_bool else 3 if dtype.is_int else -3.5)
    out, *_ = launch(K.gather_1d, poisoned(m, dtype).partition(128), fl.asarray(x),
                     fl.asarray(idx), pad)
    inside = (idx >= 0) & (idx < n)
    want = np.where(inside, x[np.clip(idx, 0, n - 1)], pad)
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_gather_2d_broadcasts_rows_and_columns(backend):
    x = rng(3).standard_normal((40, 30)).astype(np.float32)
    rows = rng(4).integers(-5, 45, 50).astype(np.int32)
    cols = rng(5).integers(-5, 35, 70).astype(np.int32)
    out, *_ = launch(K.gather_rows_cols, poisoned((50, 70)).partition((16, 32)), fl.asarray(x),
                     fl.asarray(rows), fl.asarray(cols))
    inside = ((rows >= 0) & (rows < 40))[:, None] & ((cols >= 0) & (cols < 30))[None, :]
    want = np.where(inside, x[np.clip(rows, 0, 39)[:, None], np.clip(cols, 0, 29)[None, :]], 0)
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_gather_with_scalar_coordinates_gives_a_scalar(backend):
    x = rng(6).standard_normal(10).astype(np.float32)
    out, *_ = launch(K.gather_scalar, poisoned(64 * 4).partition(64), fl.asarray(x), -2)
    want = np.repeat([-1.0, -1.0, x[0], x[1]], 64)  # blocks 0..3 read x[-2], x[-1], x[0], x[1]
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


# load padding -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("pad", [-math.inf, math.inf, math.nan, -0.0, 0.0])
def test_load_pads_with_the_value_asked_for(backend, pad):
    x = -np.abs(rng(7).standard_normal((6, 50))).astype(np.float32) - 1  # every value < -1
    x[2, :] = -0.0
    out, _ = launch(K.row_max_padded, poisoned((6, 16)).partition((2, 16)), fl.asarray(x),
                    pad=pad)
    wide = np.concatenate([x, np.full((6, 14), pad, np.float32)], axis=1)
    want = np.fmax.reduce(wide, axis=1)  # ft.max ignores NaN, as fmax does
    got = out.unpartition().numpy()
    np.testing.assert_array_equal(got, np.broadcast_to(want[:, None], (6, 16)))
    if pad != 0 or math.copysign(1, pad) < 0:  # (the maximum of -0.0 and +0.0 may be either)
        # the sign of a zero maximum: -0.0 where the row and its padding are all -0.0
        np.testing.assert_array_equal(np.signbit(got[:, 0]), np.signbit(want))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("pad", [-math.inf, math.nan])
def test_load_like_pads_too(backend, pad):
    x = rng(8).standard_normal(100).astype(np.float32)
    out, _ = launch(K.load_like_padded, poisoned(100).partition(64), fl.asarray(x), pad=pad)
    np.testing.assert_array_equal(out.unpartition().numpy(), x)  # the store clips the padding


# scatters -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_scatter_reverses_each_tile_and_the_read_back_sees_it(backend):
    n, t = 300, 64  # a partial last tile: its reversed elements past the edge are dropped
    x = rng(9).standard_normal(n).astype(np.float32)
    out, _ = launch(K.reverse_tiles, poisoned(n).partition(t), fl.asarray(x))
    want = padded(x, (t,)).reshape(-1, t)[:, ::-1].reshape(-1)[:n] * 2
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_scatter_2d_transposes_each_square_tile(backend):
    x = rng(10).standard_normal((50, 70)).astype(np.float32)
    out, _ = launch(K.transpose_in_tile, poisoned((50, 70)).partition((16, 16)), fl.asarray(x))
    p = padded(x, (16, 16))
    tiles = p.reshape(4, 16, 5, 16).transpose(0, 3, 2, 1).reshape(64, 80)
    np.testing.assert_array_equal(out.unpartition().numpy(), tiles[:50, :70])


def _permuted_offsets(n_tiles: int, t: int, seed: int, wrap: bool = False) -> np.ndarray:
    r = rng(seed)
    perm = np.concatenate([r.permutation(t) for _ in range(n_tiles)])
    if wrap:  # the same offsets modulo t, from any integer (negative ones too)
        perm = perm + t * r.integers(-50, 50, perm.size)
    return perm.astype(np.int32)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_scatter_at_clamped_coordinates(backend):
    t, n = 128, 512
    offsets = _permuted_offsets(n // t, t, 11)
    out, _ = launch(K.scatter_clamped, poisoned(n, i32).partition(t), fl.asarray(offsets))
    want = np.empty(n, np.int32)
    base = np.repeat(np.arange(0, n, t), t)
    want[base + offsets] = np.arange(n)
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_scatter_at_coordinates_modulo_the_tile(backend):
    t, n = 64, 256
    offsets = _permuted_offsets(n // t, t, 12, wrap=True)
    out, _ = launch(K.scatter_wrapped, poisoned(n, i32).partition(t), fl.asarray(offsets))
    want = np.empty(n, np.int32)
    base = np.repeat(np.arange(0, n, t), t)
    want[base + offsets % t] = np.arange(n) * 2  # the second scatter (& (t - 1)) wins
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_gather_of_the_own_tile_sees_the_scatter_before_it(backend):
    n, t = 200, 64
    x = rng(13).standard_normal(n).astype(np.float32)
    out, _ = launch(K.gather_own_after_scatter, poisoned(n).partition(t), fl.asarray(x))
    p = padded(x, (t,)).reshape(-1, t)
    want = np.roll(p, -1, axis=1).reshape(-1)
    # coordinates past the tensor's edge read the padding, not what a scatter could not write
    k = np.arange(want.size)
    want = np.where((k // t) * t + (k % t + 1) % t < n, want, -5.0)[:n]
    np.testing.assert_array_equal(out.unpartition().numpy(), want)


def test_two_elements_scattering_to_one_element_are_a_race():
    t, n = 128, 256
    offsets = _permuted_offsets(n // t, t, 14)
    last = np.flatnonzero(offsets[t:] == t - 1)[0]  # block 1's element that writes 255
    offsets[t + 5] = offsets[t + 90] = 200  # clamped to 255 too
    with pytest.raises(RaceError) as info:
        K.scatter_clamped(poisoned(n, i32).partition(t), fl.asarray(offsets)).sync()
    text = str(info.value)
    a, b = sorted([5, 90, last])[:2]  # the first two in the tile's order
    assert text.startswith(f"kernel 'scatter_clamped', parameter 'out': data race on 'out' "
                           f"element [255]: tile block (1, 0, 0) scatters to it from the "
                           f"elements [{a}] and [{b}] of one ft.scatter, and which of them "
                           f"lands is not defined")
    assert "ft.scatter(out, at, base + ft.arange(n))" in text and "^" in text


def test_without_the_race_detector_the_last_duplicate_lands(monkeypatch):
    from fearless import config
    monkeypatch.setattr(sys.modules["fearless.kernel.base"], "CONFIG",
                        config.Config.from_env({"FEARLESS_RACECHECK": "0"}))
    t = 128
    offsets = _permuted_offsets(1, t, 15)
    writers = [np.flatnonzero(offsets == k)[0] for k in (0, 7, 9)]
    offsets[writers[1:]] = -3  # clamped to element 0, which offset 0 writes too
    out, _ = K.scatter_clamped(poisoned(t, i32).partition(t), fl.asarray(offsets)).sync()
    got = out.unpartition().numpy()
    assert got[0] == max(writers) and got[7] == -7 and got[9] == -7


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("pad", [-math.inf, math.inf])
def test_the_padding_of_a_partial_tile_joins_its_reduction(backend, pad):
    x = rng(16).standard_normal(100).astype(np.float32)
    out, _ = launch(K.tile_max_padded, poisoned(100).partition(64), fl.asarray(x), pad=pad)
    want = np.repeat([x[:64].max(), max(x[64:].max(), pad)], 64)[:100]
    np.testing.assert_array_equal(out.unpartition().numpy(), want)
