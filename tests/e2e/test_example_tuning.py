"""The search spaces the tile examples tune over (``matmul_tuned``, ``softmax_tuned``,
``layernorm_tuned``, ``attention_tuned``): every config runs on the cpu backend and matches an
independent float64 NumPy reference at the examples' cpu sizes, which no tile divides (edge
tiles are clipped); a tuning over each whole list drops none of them; and an example's notes
name the config it ran.

The cpu sizes and dtypes are the examples' own, so under ``FEARLESS_CROSS_COMPILE`` these
specialisations are the ones ``test_examples`` compiles for the GPUs (``.ci/run``)."""
from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.dtypes import bf16, f16, f32
from fearless.errors import PerformanceWarning
from examples import tile_attention, tile_gemm, tile_layernorm, tile_softmax

BASE = importlib.import_module("fearless.kernel.base")
GEMM = tile_gemm.matmul_tuned.configs
ROWWISE = tile_softmax.softmax_tuned.configs
ATTENTION = tile_attention.attention_tuned.configs


def _gemm_case(dtype, seed=3):
    """Small integers: f32 sums are exact, so the one rounding to ``dtype`` is NumPy's too."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (200, 100)).astype(np.float32)
    b = rng.integers(-2, 3, (100, 136)).astype(np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(dtype.numpy)
    return (fl.full((200, 136), np.nan, dtype), fl.asarray(a.astype(dtype.numpy)),
            fl.asarray(b.astype(dtype.numpy))), want


def _softmax_case(seed=4):
    x = np.random.default_rng(seed).standard_normal((96, 1000), np.float32) * 4
    return (fl.full((96, 1000), np.nan, f32), fl.asarray(x)), tile_softmax.reference(x)


def _layernorm_case(seed=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 700), np.float32) * 3 + 1
    w, b = rng.standard_normal(700, np.float32), rng.standard_normal(700, np.float32)
    args = (fl.full((64, 700), np.nan, f32), fl.asarray(x), fl.asarray(w), fl.asarray(b), 1e-5)
    return args, tile_layernorm.reference(x, w, b, 1e-5)


def _attention_case(causal: bool, seed=6):
    """The example's cpu shape (heads 3, S 200, D 128), f16: no tile of 64 or 128 rows divides
    S (the last query tile and the last key block are clipped and masked)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((3, 200, 128), np.float32).astype(np.float16)
               for _ in range(3))
    scale = 128 ** -0.5
    args = (fl.full((3, 200, 128), np.nan, f16), fl.asarray(q), fl.asarray(k), fl.asarray(v),
            scale, causal)
    bound = tile_attention.error_bound(q, k, v, scale, 2.0 ** -11)
    return args, (tile_attention.reference(q, k, v, scale, causal), bound)


def _only(config, kernel):
    """``kernel`` tuned over ``config`` alone: the cpu backend runs it (and says it does not
    tune)."""
    return ft.autotune([config])(kernel)


def test_the_spaces_are_the_documented_ones():
    assert [(c.tile, c.schedule, c.hints) for c in GEMM] == [
        (tile, schedule, {}) for tile in ((128, 128), (128, 256), (256, 128))
        for schedule in (ft.persistent(), None)] + [
        (tile, None, {}) for tile in ((128, 64), (64, 64))]
    assert all(c.consts == {} for c in GEMM)      # matmul's own bk=64
    assert ROWWISE == ft.configs.rowwise(occupancy=(3, 2, 4))
    assert tile_layernorm.layernorm_tuned.configs == ROWWISE
    assert [(c.tile, c.consts, c.hints) for c in ATTENTION] == [
        ((1, 128, None), {"bn": 64}, tile_attention.OCC2), ((1, 128, None), {"bn": 64}, {}),
        ((1, 128, None), {"bn": 128}, {}), ((1, 64, None), {"bn": 64}, tile_attention.OCC2),
        ((1, 64, None), {"bn": 128}, {})]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("n", range(len(ATTENTION)))
def test_each_attention_config_computes_attention(n, causal):
    """``causal``, which no config sets, is the caller's: an argument of the tuned call."""
    args, (want, bound) = _attention_case(causal)
    with pytest.warns(PerformanceWarning, match="the cpu backend does not tune"):
        out = _only(ATTENTION[n], tile_attention.attention)(*args).sync()[0]
    assert out.tile_shape == (1, ATTENTION[n].tile[1], 128)
    got = out.unpartition().numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= bound + 2.0 ** -11 * np.abs(want))


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["f16", "bf16"])
@pytest.mark.parametrize("n", range(len(GEMM)))
def test_each_gemm_config_computes_the_product(n, dtype):
    args, want = _gemm_case(dtype)
    with pytest.warns(PerformanceWarning, match="the cpu backend does not tune"):
        c, _, _ = _only(GEMM[n], tile_gemm.matmul)(*args).sync()
    assert c.tile_shape == GEMM[n].tile and c.schedule == GEMM[n].schedule
    np.testing.assert_array_equal(c.unpartition().numpy(), want)


@pytest.mark.parametrize("n", range(len(ROWWISE)))
def test_each_rowwise_config_computes_softmax_and_layer_norm(n):
    for kernel, (args, want), rtol, atol in (
            (tile_softmax.softmax, _softmax_case(), 2e-6, 1e-9),
            (tile_layernorm.layernorm, _layernorm_case(), 1e-5, 1e-5)):
        with pytest.warns(PerformanceWarning, match="the cpu backend does not tune"):
            out = _only(ROWWISE[n], kernel)(*args).sync()[0]
        assert out.tile_shape == (1, 1024)
        np.testing.assert_allclose(out.unpartition().numpy(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("example, case", [
    (tile_gemm.matmul_tuned, lambda: _gemm_case(f16, seed=7)),
    (tile_softmax.softmax_tuned, lambda: _softmax_case(seed=8)),
    (tile_layernorm.layernorm_tuned, lambda: _layernorm_case(seed=9)),
    (tile_attention.attention_tuned, lambda: _attention_case(True, seed=10))],
    ids=["gemm", "softmax", "layernorm", "attention"])
def test_a_tuning_over_each_space_keeps_every_config(tune, example, case):
    """Every config writes its whole output and agrees with the others (the tuner drops a
    config that leaves an element unwritten and refuses configs that disagree); the stand-in
    timer makes the last config the fastest."""
    fake, timed = tune
    count = len(example.configs)
    fake.times = [float(count - k) for k in range(count)]
    tuned = ft.autotune(example.configs)(example.kernel)   # the example's list, no ranking yet
    args, want = case()
    assert tuned.config_for(*args) is None                  # nothing chosen before a call
    out = tuned(*args).sync()[0]
    assert [c.dropped for c in tuned.report] == [None] * count and len(timed) == count
    assert tuned.report.winner == count - 1
    out = out.unpartition()
    assert tuned.config_for(out, *args[1:]) == example.configs[-1]
    got = out.numpy()
    if example is tile_gemm.matmul_tuned:
        np.testing.assert_array_equal(got, want)
    elif example is tile_attention.attention_tuned:
        want, bound = want
        got = got.astype(np.float64)
        assert np.all(np.abs(got - want) <= bound + 2.0 ** -11 * np.abs(want))
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6 if example is
                                   tile_softmax.softmax_tuned else 1e-5, atol=1e-5)


def test_the_notes_say_the_cpu_backend_ran_the_first_config():
    gemm = tile_gemm.run(repeat=1)
    assert gemm.notes[-1] == ("not tuned (the cpu backend): the first config, tile 128x128, "
                              "persistent")
    assert tile_softmax.run(repeat=1).notes == [
        "not tuned (the cpu backend): the first config, tile 1x1024"]
    assert tile_layernorm.run(repeat=1).notes == [
        "not tuned (the cpu backend): the first config, tile 1x1024"]
    assert tile_attention.run(repeat=1).notes[-1] == (
        "not tuned (the cpu backend): the first config, tile 1x128x128, bn=64")
    pinned = tile_gemm.run(tile=(64, 128), bk=32, repeat=1)
    assert pinned.notes[-1] == "tile 64x128, bk 32 (pinned)" and pinned.error_ratio <= 1
    assert tile_softmax.run(rows=2, repeat=1).notes == ["tile 2x1024 (pinned)"]


@pytest.mark.gpu
def test_the_gemm_example_tunes_on_the_gpu(backend, tmp_path, monkeypatch):
    """On the GPU: the first call of a new shape times every config (none dropped: the large
    tiles compile with two consumer warp groups) and the notes name the winner."""
    monkeypatch.setattr(BASE, "CONFIG", dataclasses.replace(BASE.CONFIG,
                                                            cache_dir=tmp_path / "cache"))
    tuned = ft.autotune(GEMM)(tile_gemm.matmul)
    monkeypatch.setattr(tile_gemm, "matmul_tuned", tuned)
    result = tile_gemm.run(shape=(1024, 1024, 1024), repeat=2)
    assert all(c.seconds is not None for c in tuned.report), str(tuned.report)
    best = GEMM[tuned.report.winner]
    words = f"tile {best.tile[0]}x{best.tile[1]}" + (", persistent" if best.schedule else "")
    assert result.notes[-1] == f"tuned: {words}"
    assert 0 <= result.error_ratio <= 1
