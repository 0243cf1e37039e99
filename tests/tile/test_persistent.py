"""Persistent tile kernels (``t.partition(tile, schedule=ft.persistent(...))``,
passes/persistent.py): a fixed number of tile blocks, each running the kernel body for its
tiles in turn, in an order the runtime builds. Every tile written once, by one block, with the
values a launch of one block per tile computes; what cannot be launched so is refused."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.dtypes import f32
from fearless.errors import ArgumentTypeError, CompileError, ContractError, PartitionError
from fearless.ir import types as T
from fearless.ir.ops.tile import tile_of
from fearless.runtime.partition import grid_of
from tests.support import BACKENDS, matmul_tile_loads
from tests.tile.tile_kernels import matmul

rng = np.random.default_rng(11)


@pytest.mark.parametrize("order, group", [("row", 1), ("grouped", 1), ("grouped", 3),
                                          ("grouped", 8)])
@pytest.mark.parametrize("grid", [(1, 1, 1), (7, 1, 1), (5, 3, 1), (9, 4, 2), (2, 11, 3),
                                  (16, 16, 1), (3, 5, 7)])
def test_every_order_deals_each_tile_exactly_once(grid, order, group):
    tiles = [tile_of(v, grid, order, group) for v in range(grid[0] * grid[1] * grid[2])]
    assert sorted(tiles) == sorted(itertools.product(*(range(n) for n in grid)))


def test_the_grouped_order_walks_bands_of_rows():
    # 5 x 3 tiles in bands of 2 rows: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2), then the next band
    got = [tile_of(v, (5, 3, 1), "grouped", 2)[:2] for v in range(8)]
    assert got == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 0), (3, 0)]


@ft.kernel
def mark(o: ft.Out[f32], x: ft.In[f32]):
    """x * 2 plus the tile's own coordinates, so a tile stored at the wrong place shows."""
    coords = o.tile_index
    tag = coords[0] * 1000
    if len(coords) > 1:
        tag = tag + coords[1] * 10
    if len(coords) > 2:
        tag = tag + coords[2] * 100000
    o.store(ft.load_like(x, o) * 2.0 + ft.full(o.tile_shape, tag, f32))


def _mark_reference(x: np.ndarray, tile: tuple) -> np.ndarray:
    idx = np.meshgrid(*(np.arange(n) // t for n, t in zip(x.shape, tile)), indexing="ij")
    tag = idx[0] * 1000.0
    if len(idx) > 1:
        tag = tag + idx[1] * 10.0
    if len(idx) > 2:
        tag = tag + idx[2] * 100000.0
    return x.astype(np.float64) * 2 + tag


CASES = [((1000,), (64,)), ((50, 70), (16, 16)), ((33, 40), (8, 32)), ((6, 20, 9), (4, 8, 2))]
SCHEDULES = [ft.persistent(blocks=1), ft.persistent(blocks=3), ft.persistent(blocks=7, order="row"),
             ft.persistent(blocks=1000, group=2), ft.persistent()]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("shape, tile", CASES)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_a_persistent_launch_writes_every_tile_once_at_its_place(backend, shape, tile,
                                                                 schedule):
    x = rng.standard_normal(shape).astype(np.float32)
    o = fl.full(shape, np.nan, f32).partition(tile, schedule=schedule)
    assert o.schedule is schedule
    o, _ = mark(o, fl.asarray(x)).sync()
    # f32 rounds x * 2 + tag once: within half an ulp of the tag's magnitude
    want = _mark_reference(x, tile)
    np.testing.assert_allclose(o.unpartition().numpy(), want, rtol=2.0 ** -23, atol=1e-4)


@ft.kernel
def accumulate(o: ft.Out[f32], x: ft.In[f32]):
    o.store(o.load() + ft.load_like(x, o))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_persistent_kernel_reads_back_its_own_tiles(backend):
    """out.load() inside the loop is the current tile's (read after the block's own store of
    the previous tile, which is another tile)."""
    start = rng.standard_normal((64, 96)).astype(np.float32)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    o = fl.asarray(start.copy()).partition((16, 32), schedule=ft.persistent(blocks=5))
    for _ in range(3):
        o, _ = accumulate(o, fl.asarray(x)).sync()
    np.testing.assert_allclose(o.unpartition().numpy(), start + 3 * x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("schedule", [ft.persistent(blocks=4), ft.persistent(order="row")],
                         ids=repr)
def test_a_persistent_gemm_matches_numpy(backend, schedule):
    m, n, k = (300, 260, 200) if backend == "cpu" else (1000, 1100, 640)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = fl.full((m, n), np.nan, f32).partition((64, 64), schedule=schedule)
    c, _, _ = matmul(c, fl.asarray(a), fl.asarray(b)).sync()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # f16 inputs are exact in f32; the f32 sum of k products errs by at most k ulps of |a||b|
    bound = (np.abs(a64) @ np.abs(b64)) * k * 2.0 ** -23
    np.testing.assert_array_less(np.abs(c.unpartition().numpy() - a64 @ b64), bound + 1e-30)


def test_the_launch_runs_the_schedules_blocks_or_one_per_tile_when_no_more_tiles(backend):
    t = fl.zeros((100, 100), f32)
    part = t.partition((10, 10), schedule=ft.persistent(blocks=7))
    assert part.launch_grid() == (7, 1, 1) and not part.one_tile_each()
    t = fl.zeros((100, 100), f32)
    # 4 tiles, 7 blocks: no block would get a second tile, so one block per tile, as unscheduled
    part = t.partition((50, 50), schedule=ft.persistent(blocks=7))
    assert part.launch_grid() == grid_of((100, 100), (50, 50)) and part.one_tile_each()
    t = fl.zeros((100, 100), f32)
    assert t.partition((50, 50), schedule=ft.persistent(blocks=4)).one_tile_each()
    t = fl.zeros((100, 100), f32)
    # the default blocks (one per SM, the cpu backend counting one, times the occupancy)
    assert t.partition((50, 50), schedule=ft.persistent()).one_tile_each(per_sm=4)
    t = fl.zeros((100, 100), f32)
    assert not t.partition((50, 50), schedule=ft.persistent()).one_tile_each(per_sm=3)
    t = fl.zeros((100, 100), f32)
    # stream-K: 4 tiles for 16 blocks are split between them (tail_split); for 7 they are not,
    # so they run as persistent does, one block per tile
    assert not t.partition((50, 50), schedule=ft.stream_k(blocks=16)).one_tile_each()
    t = fl.zeros((100, 100), f32)
    part = t.partition((50, 50), schedule=ft.stream_k(blocks=7))
    assert part.one_tile_each() and part.launch_grid() == grid_of((100, 100), (50, 50))
    t = fl.zeros((100, 100), f32)
    # the default: one block per SM (the cpu backend counts one), times the occupancy
    assert t.partition((10, 10), schedule=ft.persistent()).launch_grid(2) == (2, 1, 1)
    t = fl.zeros((100, 100), f32)
    assert t.partition((10, 10)).launch_grid() == grid_of((100, 100), (10, 10))


def test_bad_schedules_are_refused_before_anything_runs():
    with pytest.raises(PartitionError, match="blocks=0"):
        ft.persistent(blocks=0)
    with pytest.raises(ArgumentTypeError, match="takes an int"):
        ft.persistent(blocks=2.5)
    with pytest.raises(PartitionError, match="group=0"):
        ft.persistent(group=0)
    with pytest.raises(PartitionError, match="order='diagonal'"):
        ft.persistent(order="diagonal")
    t = fl.zeros(64, f32)
    with pytest.raises(ArgumentTypeError, match="schedule= takes"):
        t.partition(16, schedule="persistent")
    assert t.partition(16).schedule is None   # not moved by the refusal


@ft.kernel
def two_outs(o: ft.Out[f32], p: ft.Out[f32], x: ft.In[f32]):
    v = ft.load_like(x, o)
    o.store(v)
    p.store(v * 2.0)


def test_outputs_with_different_schedules_are_refused(backend):
    x = fl.asarray(rng.standard_normal(64).astype(np.float32))
    o = fl.zeros(64, f32).partition(16, schedule=ft.persistent(blocks=2))
    p = fl.zeros(64, f32).partition(16)
    with pytest.raises(ContractError, match="'p'.*schedule") as info:
        two_outs(o, p, x)
    assert "same schedule=" in str(info.value)
    q = fl.zeros(64, f32).partition(16, schedule=ft.persistent(blocks=2))
    o, q, _ = two_outs(o, q, x).sync()
    np.testing.assert_array_equal(q.unpartition().numpy(), 2 * x.numpy())


@ft.kernel
def early_exit(o: ft.Out[f32], x: ft.In[f32]):
    if o.tile_index[0] == 0:
        return
    o.store(ft.load_like(x, o))


def test_a_kernel_that_returns_early_cannot_run_persistently(backend):
    x = fl.asarray(rng.standard_normal(64).astype(np.float32))
    o = fl.zeros(64, f32).partition(16)
    o, _ = early_exit(o, x).sync()       # one block per tile: fine
    # refused also where no block would get a second tile (4 tiles, 4 blocks): whether a
    # kernel compiles does not depend on the size of its output
    for blocks in (2, 4):
        o = o.unpartition().partition(16, schedule=ft.persistent(blocks=blocks))
        with pytest.raises(CompileError, match="once per tile") as info:
            early_exit(o, x)
        assert "return" in str(info.value) and "early_exit" in str(info.value)


def test_the_schedule_is_part_of_the_compiled_specialisation():
    types = []
    for schedule in (None, ft.persistent(blocks=2), ft.persistent(blocks=3),
                     ft.persistent(order="row"), ft.persistent(blocks=4)):
        o = fl.zeros((32, 32), f32).partition((16, 16), schedule=schedule)
        types.append(mark._signature([o, fl.zeros((32, 32), f32)], "cpu")[0][0])
    assert types[0].schedule is None and types[1] == types[2] != types[3]
    assert "persistent grouped 8" in str(types[1]) and "one tile" not in str(types[1])
    # 4 tiles on 4 blocks: compiled as one tile per block, the loop left out
    assert types[4].schedule.single and "(one tile per block)" in str(types[4])


def test_a_tileiras_that_compiles_persistent_loops_slowly_is_named(monkeypatch, tmp_path):
    """tileiras 13.4 drops warp specialisation in a persistent kernel's loop (half speed on
    the H200): a cuda compile with it says so, with the fix; 13.5 compiles it well."""
    import dataclasses
    import importlib
    import warnings

    from fearless.backends.tileir import tileiras
    from fearless.errors import PerformanceWarning
    from fearless.kernel import params as P
    if tileiras.find() is None:
        pytest.skip("no tileiras installed")
    base = importlib.import_module("fearless.kernel.base")
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, cache_dir=tmp_path))
    layout = T.Layout(16, (16, 16), (16, 1), True)
    infos = [P.ArgInfo(f32, 2, tile_shape=(64, 64), layout=layout, schedule=T.Persistent()),
             P.ArgInfo(f32, 2, layout=layout)]
    types = P.specialise("mark", mark.runtime_params, infos)
    for release, warned in (((13, 4), True), ((13, 5), False)):
        monkeypatch.setattr(tileiras.Toolchain, "release", lambda self, r=release: r)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mark.compile_for(types, {}, "cuda", "sm_90", fresh=True)
        named = [w for w in caught if issubclass(w.category, PerformanceWarning)]
        assert bool(named) is warned
        if warned:
            assert "nvidia-cuda-tileiras>=13.5" in str(named[0].message)


def test_a_tensor_without_the_facts_tma_needs_is_named_at_a_gpu_compile():
    """kernel/tile.lost_facts: which fact a tensor lost, per parameter (the slow path is still
    right: the GPU tests of strided and offset views check the values)."""
    from fearless.kernel.tile import lost_facts

    def view(align, strides, unit, role=T.Role.IN, dt=f32):
        return T.TensorView(dt, len(strides), role, (16, 16) if role is T.Role.OUT else None,
                            T.Layout(align, (16,) * len(strides), strides, unit))
    good = view(16, (16, 1), True)
    assert lost_facts([("a", good), ("n", T.Scalar(f32))]) == []
    got = lost_facts([("a", view(4, (16, 1), True)), ("b", view(16, (2, 1), True)),
                      ("c", view(16, (16, 16), False, T.Role.OUT)),
                      ("h", view(16, (4, 1), True, dt=fl.f16)),
                      ("s", view(1, (16, 1), True, T.Role.ATOMIC))])
    assert len(got) == 4
    assert got[0].startswith("parameter 'a': its address is 4-byte aligned, not 16")
    assert "the stride of axis 0 is not a multiple of 16 bytes" in got[1]
    assert "its last axis is not contiguous" in got[2] and "'c'" in got[2]
    assert got[3].startswith("parameter 'h'")   # 4 f16 = 8 bytes: not a multiple of 16


def _same_either_way(kernel, make_outs, args, schedule):
    """The kernel's outputs launched one tile per block and with ``schedule``, as NumPy."""
    got = []
    for sched in (None, schedule):
        outs = [t.partition(tile, schedule=sched) for t, tile in make_outs()]
        results = kernel(*outs, *args).sync()
        got.append([r.unpartition().numpy() for r in results[:len(outs)]])
    return got


def _kernel_cases():
    from tests.tile import tile_kernels as K
    x = rng.standard_normal((70, 45)).astype(np.float32)
    sq = rng.standard_normal((48, 48)).astype(np.float32)

    def nan(shape):
        return fl.full(shape, np.nan, f32)
    return [
        ("elementwise", K.elementwise, lambda: [(nan(x.shape), (16, 16))],
         (x, x[::-1].copy(), 0.5)),
        ("transpose", K.transpose, lambda: [(nan(sq.shape), (16, 8))], (sq,)),
        ("loops", K.loops, lambda: [(nan(x.shape), (8, 16))], (x, 5)),
        ("two_outputs", K.two_outputs, lambda: [(nan(x.shape), (16, 16)),
                                                (nan(x.shape), (16, 16))], (x,)),
        ("store_load_in_loop", K.store_load_in_loop, lambda: [(nan(x.shape), (32, 16))], (x, 3)),
        ("store_load_in_branch", K.store_load_in_branch, lambda: [(nan(x.shape), (16, 32))],
         (x, 2)),
        ("read_own_tile", K.read_own_tile, lambda: [(nan(sq.shape), (16, 16)),
                                                    (nan(sq.shape), (16, 16))], (sq,)),
    ]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("case", range(7))
def test_the_suites_kernels_compute_the_same_launched_persistently(backend, case):
    """Bit for bit: a persistent launch changes which block runs a tile, never its values.
    A cross-section of the suite's kernels (control flow, read-back, two outputs, a transposed
    load); the whole tile, nn and models suites also passed with every partition made
    persistent (session 8, a pytest plugin: all but the two kernels that return early)."""
    name, kernel, make_outs, host_args = _kernel_cases()[case]
    args = [fl.asarray(a) if isinstance(a, np.ndarray) else a for a in host_args]
    plain, persistent = _same_either_way(kernel, make_outs, args, ft.persistent(blocks=3))
    for a, b in zip(plain, persistent):
        assert not np.isnan(a).any(), name      # every tile written (the outputs start NaN)
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_a_grid_past_cudas_limits_is_refused_before_it_runs():
    """70000 tiles along a 3-d partition's axis 1 (grid y, at most 65535 in CUDA): a
    ContractError naming the kernel before anything runs, the partition still usable; the same
    tiles dealt by a persistent schedule launch 1-d and are accepted."""
    from tests.tile.tile_kernels import iota3
    part = fl.empty((2, 70000, 1), fl.i32).partition((1, 1, 1))
    with pytest.raises(ContractError, match=r"kernel 'iota3'.*needs 70000 tile blocks along "
                                            r"grid y \(partition grid \(2, 70000, 1\)\), above "
                                            r"CUDA's limit 65535"):
        iota3(part)
    out = part.unpartition()     # the partition is still the caller's
    iota3(out.partition((1, 1, 1), schedule=ft.persistent(blocks=4))).cancel()


@pytest.mark.parametrize("shape, tile, tiles, named", [
    ((128, 4096), (128, 128), 32, "32 tile blocks on 132 SMs"),   # most SMs idle
    ((128, 4096), (256, 128), 16, "spans 256 along axis 0"),      # half of each tile past the edge
    ((100, 4096), (256, 64), 64, "at most 128 there"),
    ((128, 8), (64, 64), 2, "at most 16 there"),                  # not under the mma's 16
    ((128, 4096), (64, 64), 128, None),                           # a block per SM
    ((128, 4096), (128, 64), 64, None),         # half the SMs: 108% of cuBLAS on the H200
    ((0, 4096), (128, 128), 0, None),           # an empty output: nothing runs
    ((128, 1024), (64, 64), 32, None),          # few blocks, but no smaller tile to offer
    ((16, 4096), (16, 64), 64, None),           # nn.linear's decode tiles
    ((4096, 4096), (128, 128), 1024, None),     # 7.8 waves (persistent or not)
    ((8, 64, 128), (1, 64, 128), 8, None),      # not a 2-d GEMM output: blocks not weighed
    # small tiles where 128 x 128 would still fill the SMs: 52% and 63% of its speed at
    # 4096^3 on the H200, 57% and 81% at 512 x 4096
    ((4096, 4096), (64, 64), 4096, "smaller than 128 x 128"),
    ((4096, 4096), (128, 64), 2048, "of which the output holds 1024"),
    ((512, 4096), (64, 128), 256, "smaller than 128 x 128"),
    ((256, 4096), (64, 64), 256, None),         # 64 tiles of 128 x 128: under 2/3 of the SMs
    ((64, 14336), (64, 128), 112, None),        # 64 rows: 64 x 128 is the largest that fits
    ((40, 14336), (64, 128), 112, None),
    ((64, 14336), (64, 64), 224, "smaller than 64 x 128"),
    # large tiles leaving a third of the SMs idle where 128 x 128 would busy more: 70% of its
    # speed at 128 x 14336 x 4096 on the H200 (session 17)
    ((128, 14336), (128, 256), 56, "128 x 128 tiles would number 112"),
    ((256, 14336), (256, 128), 112, None),      # 112 blocks: under a third of the SMs idle
    ((4096, 4096), (128, 256), 512, None),
    ((512, 5120), (128, 256), 80, None),        # 160 tiles of 128 x 128: two waves, no gain
    ((128, 4096), (128, 128), 32, "most SMs idle"),
])
def test_a_launch_whose_tiles_do_not_suit_its_output_is_named(shape, tile, tiles, named):
    from fearless.runtime.tile_launch import idle_sm_advice
    why = idle_sm_advice(shape, tile, tiles, 132)
    assert (why is None) is (named is None), why
    if named is not None:
        assert named in why


def test_a_compile_ahead_builds_both_forms_of_a_persistent_launch():
    """The GPU's SM count decides whether each block has one tile; a compile ahead of it (the
    cpu backend counts one SM) builds both forms, and the one-tile form has one type whatever
    the order."""
    from fearless.backends.tileir.lower import is_grouped
    from fearless.kernel.tile import _either_schedule
    o = fl.zeros((32, 32), f32).partition((16, 16), schedule=ft.persistent(order="row"))
    types = mark._signature([o, fl.zeros((32, 32), f32)], "cpu")[0]
    forms = _either_schedule(types, [o])
    assert [t[0].schedule for t in forms] == [T.Persistent("row", 1), T.Persistent(single=True)]
    assert [t[1] for t in forms] == [types[1], types[1]]
    # the one-tile form of a 2-d output launches 1-d in grouped order, as with no schedule
    assert [is_grouped(t) for t in forms] == [False, True]
    plain = fl.zeros((32, 32), f32).partition((16, 16))
    assert _either_schedule(mark._signature([plain, fl.zeros((32, 32), f32)], "cpu")[0],
                            [plain])[0][0].schedule is None


@pytest.mark.parametrize("schedule, tile, follows", [
    (T.Persistent("grouped", 8), (64, 64), True), (T.Persistent("grouped", 8), (128, 64), True),
    (T.Persistent("grouped", 8, single=True), (64, 64), False),
    (T.Persistent("grouped", 8, stream_k=True, phase=1), (64, 64), True),
    (T.Persistent("grouped", 8, stream_k=True, phase=2), (64, 64), True),
    # the fixup only reads the workspace: ordered, tileiras staged its loads (test_stream_k.py)
    (T.Persistent("grouped", 8, stream_k=True, phase=3), (64, 64), False),
    (T.Persistent("grouped", 8), (128, 128), False),
    (T.Persistent("grouped", 8, stream_k=True, phase=2), (128, 128), False)], ids=str)
def test_a_small_tiles_loads_follow_the_previous_tiles_stores(schedule, tile, follows):
    # where a block loops over tiles (or stream-K pieces) of up to 128 x 64, each tile's loads
    # of A and B take the token its previous tile's stores left (a value the loop carries), not
    # the entry's: unordered, tileiras 13.5 moved a tile's epilogue past the next tile's K loop
    # and ptxas serialised every wgmma of a 64-wide tile, 1.5-1.6x slower on the H200; the
    # order cost 128 x 128 and 128 x 256 tiles 3-4%, so theirs stay unordered (session 17)
    owners = {None if op.fields["token"].owner is None else op.fields["token"].owner.name
              for op in matmul_tile_loads(schedule, tile)}
    # a loop-carried token is a block argument (no owner); the entry token is gdc_wait's
    # (a launch that may be a dependent one, PDL) or make_token's
    assert owners == ({None} if follows else {"gdc_wait"})
