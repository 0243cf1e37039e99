"""``ft.configs``: default search spaces for ``ft.autotune``, so that a user need not write one.

    @ft.autotune(configs=ft.configs.gemm(k_tile="bk"), key=("a", "b"))    # 24 configs
    @ft.autotune(configs=ft.configs.rowwise())                            # 3 configs
    @ft.autotune(key=("x",))        # no configs=: gemm() if the kernel calls ft.mma, else rowwise()

Each helper returns a plain list of ``ft.Config``, to use as it is, cut down or extended. A config
whose tile does not fit a call's Out (another rank) is left out of that call's tuning with the
reason in ``tuned.report``, so a list may mix ranks.

Where the numbers come from (NVIDIA H200, sm_90, driver 580.159, tileiras 13.4-13.5, fp16 GEMM):
- 128x256 and 256x128 tiles carry no hint of their own: the compile gives them fearless's default
  ``num_worker_warps_per_cta=8`` on sm_90 (``backends/tileir/hints.py``: without it they spill and
  ran at 46-77 TFLOP/s; with it at 92-97% of cuBLAS at 4096^3 and 8192^3, session 15, where the
  cluster hint ``num_cta_in_cga=2`` gave 88-92%).
- ``occupancy`` (tile blocks per SM): at 128x128, ``occupancy=1`` took 4096^3 from 90.1% to
  91.7% of cuBLAS and 8192^3 from 97.2% to 97.7% (benchmarks/RESULTS.md, 2026-11-29). 2 is in
  the space because the smaller tiles leave room for two blocks per SM; not measured per tile.
- The K step (a ``Const`` such as ``bk``): 32 and 64 at 128x128, 4096^3: 91.4% and 90.1% of
  cuBLAS (the same run): too close to pick one for every shape, so both are tried.
- Row-wise kernels (softmax, layer norm, 8192x8192 f32; RESULTS.md, 2026-11-29): the occupancy
  hint took them from 50% of copy bandwidth to 93-95%; the best value was 2, 3 or 4 by kernel,
  so the space holds 1, 2 and 4.
The occupancy hint is given for sm_80 and sm_90 (as ``fearless.nn.attention`` does). On other
archs the variants compile alike.
"""
from __future__ import annotations

import ast

from fearless.errors import AutotuneError
from fearless.tile import lang
from fearless.tile.tuning import Config

GEMM_TILES = ((64, 64), (128, 64), (64, 128), (128, 128), (128, 256), (256, 128))
OCCUPANCY_ARCHS = ("sm_80", "sm_90")


def gemm(k_tile: str | None = None, k_values=(32, 64), occupancy=(1, 2),
         schedules=(None,)) -> list[Config]:
    """Configs for a GEMM-like tile kernel with one 2-d Out (or several, tiled alike): the tiles
    ``GEMM_TILES`` times the ``occupancy`` hints, times ``k_values`` for the ``ft.Const`` named
    ``k_tile`` when given (the K step; without it the Const keeps its default), times
    ``schedules`` (None: one tile block per tile; ``ft.persistent()``: a persistent launch,
    94.7-97.2% of cuBLAS at 2048-16384^3 f16 and bf16 on the H200 with tileiras 13.5, L2 flushed;
    half that with 13.4; ``ft.stream_k()``: a persistent launch that also splits the last wave's
    K loops, 1.2-1.8x faster than one tile per block with 128-row tiles at M 128, for a kernel
    whose loop is a sum it can split). Order: tile, then occupancy, then K step, then schedule.
    Raises AutotuneError for an empty ``k_values``, ``occupancy`` or ``schedules``."""
    _nonempty("k_values", k_values, k_tile is not None)
    _nonempty("occupancy", occupancy, True)
    _nonempty("schedules", schedules, True)
    out = []
    for tile in GEMM_TILES:
        for occ in occupancy:
            hints = {arch: {"occupancy": occ} for arch in OCCUPANCY_ARCHS}
            for k in k_values if k_tile is not None else (None,):
                consts = {k_tile: k} if k_tile is not None else {}
                out += [Config(tile=tile, hints=hints, schedule=schedule, **consts)
                        for schedule in schedules]
    return out


def rowwise(occupancy=(1, 2, 4)) -> list[Config]:
    """Configs for a row-wise tile kernel (softmax, norms) whose 2-d Out is tiled a row at a
    time: the tile ``(1, None)``, one row by the row's width rounded up to a power of two (the
    kernel masks the columns past the width), times the ``occupancy`` hints. Raises
    AutotuneError for an empty ``occupancy``."""
    _nonempty("occupancy", occupancy, True)
    return [Config(tile=(1, None), hints={arch: {"occupancy": occ} for arch in OCCUPANCY_ARCHS})
            for occ in occupancy]


def default(kernel) -> list[Config]:
    """The space ``ft.autotune`` uses without ``configs=``: ``gemm()`` when the kernel's own
    body calls ``ft.mma`` (a tensor-core kernel), else ``rowwise()``."""
    return gemm() if _calls(kernel, lang.mma) else rowwise()


def _calls(kernel, fn) -> bool:
    """Whether the kernel's body calls ``fn`` by name or as ``module.name``."""
    captured = kernel.captured
    for node in ast.walk(captured.tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name):
            value = captured.resolve(f.id)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            value = getattr(captured.resolve(f.value.id), f.attr, None)
        else:
            continue
        if value is fn:
            return True
    return False


def _nonempty(name: str, values, needed: bool) -> None:
    if needed and not tuple(values):
        raise AutotuneError(f"{name} is empty; give at least one value")
