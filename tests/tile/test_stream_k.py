"""Stream-K tile kernels (``t.partition(tile, schedule=ft.stream_k(...))``, passes/stream_k.py):
the blocks of a persistent launch also split the iterations of the kernel's reduction loop for
the tiles past the whole waves, in three launches (whole tiles, pieces, fixup). Every tile's
sum is right and stored once; the result does not depend on when each block ran; kernels whose
loop is not a sum the compiler can split are refused at compile time, at the line that breaks
the rule."""
from __future__ import annotations

import numpy as np
import pytest

import fearless as fl
from fearless import tile as ft
from fearless.backends.cpu import tile as cpu_tile
from fearless.dtypes import bf16, f16, f32
from fearless.errors import CompileError, PartitionError
from fearless.ir.opdef import Op
from fearless.runtime.partition import StreamK
from tests.support import BACKENDS, matmul_tile_loads
from tests.tile.tile_kernels import matmul

rng = np.random.default_rng(23)


def _gemm(m, n, k, tile, schedule, dtype=f16, out=f32, bk=32):
    a = rng.standard_normal((m, k)).astype(dtype.numpy)
    b = rng.standard_normal((k, n)).astype(dtype.numpy)
    c = fl.full((m, n), np.nan, out).partition(tile, schedule=schedule)
    c, _, _ = matmul(c, fl.asarray(a), fl.asarray(b), bk=bk).sync()
    return c.unpartition().numpy(), a.astype(np.float64), b.astype(np.float64)


def _bound(a64, b64, out):
    # 16-bit inputs are exact in f32; the f32 sums of k products (in any order and any split
    # into pieces) err by at most k units of 2^-24 |a||b|; then one rounding to the output
    k = a64.shape[1]
    unit = {"f32": 0.0, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}[out.name]
    want = a64 @ b64
    return want, (np.abs(a64) @ np.abs(b64)) * k * 2.0 ** -24 * (1 + unit) + np.abs(want) * unit


# m, n, k, tile, blocks, bk: fewer tiles than blocks (the loops split), more (whole tiles
# first, then split loops: S > R needs I // MIN_SHARE > R), edges, a K that is not a multiple
# of the step, a tail of more than a quarter of the blocks (run whole: tail_split) whose loops
# are also too short to split, fewer tiles than blocks but too many to split (one block per
# tile, the persistent form), one iteration, none
CASES = [(64, 64, 640, (32, 32), 16, 16), (100, 70, 800, (32, 32), 11, 16),
         (256, 128, 384, (32, 32), 10, 16), (130, 64, 512, (32, 32), 50, 16),
         (96, 96, 1000, (32, 32), 4, 32), (200, 40, 37, (64, 32), 6, 16),
         (64, 96, 640, (32, 32), 8, 16), (33, 65, 16, (32, 32), 3, 16),
         (32, 32, 0, (32, 32), 4, 16)]


@pytest.mark.parametrize("m, n, k, tile, blocks, bk", CASES)
def test_a_stream_k_gemm_matches_numpy_on_the_cpu(m, n, k, tile, blocks, bk):
    got, a64, b64 = _gemm(m, n, k, tile, ft.stream_k(blocks=blocks), bk=bk)
    want, bound = _bound(a64, b64, f32)
    assert not np.isnan(got).any()
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)


def _counting(monkeypatch) -> dict:
    """Counts of the cpu backend's partial stores and loads from here on."""
    seen = {"stores": 0, "loads": 0}
    for name, key in ((Op.TILE_PARTIAL_STORE, "stores"), (Op.TILE_PARTIAL_LOAD, "loads")):
        def rule(block, op, inner=cpu_tile.RULES[name], key=key):
            inner(block, op)
            seen[key] += 1
        monkeypatch.setitem(cpu_tile.RULES, name, rule)
    return seen


def _partials_of(monkeypatch, m, n, k, blocks, bk=32) -> dict:
    """The partial stores and loads of an f32 (m, n, k) GEMM in 32 x 32 tiles (K step ``bk``)
    under ``ft.stream_k(blocks=blocks)`` on the cpu backend, whose values are checked first."""
    seen = _counting(monkeypatch)
    got, a64, b64 = _gemm(m, n, k, (32, 32), ft.stream_k(blocks=blocks), bk=bk)
    want, bound = _bound(a64, b64, f32)
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)
    return seen


def test_the_loops_really_are_split_and_every_partial_is_added(monkeypatch):
    # 4 tiles of 50 iterations (K 1600, step 32) over 16 blocks: no whole wave; 200 iterations
    # in S = min(16, 200 // 16) = 12 balanced shares (eight of 17, four of 16) from 0, 17, 34,
    # 51, 68, 85, 102, 119, 136, 152, 168, 184 to 200: 15 pieces (the shares from 34, 85 and 136
    # span two tiles), each stored once and added once
    assert _partials_of(monkeypatch, 64, 64, 1600, 16) == {"stores": 15, "loads": 15}


def test_whole_waves_run_without_partial_sums(monkeypatch):
    # 8 tiles over 4 blocks: two whole waves, nothing left to share
    c = fl.zeros((64, 128), f32).partition((32, 32), schedule=ft.stream_k(blocks=4))
    assert c.stream_k_phases() == (1,)
    assert _partials_of(monkeypatch, 64, 128, 96, 4) == {"stores": 0, "loads": 0}


def test_the_tiles_past_the_whole_waves_are_shared(monkeypatch):
    # 9 tiles of 3 iterations over 4 blocks: 8 in two whole waves, 1 (3 iterations) shared in
    # S = max(1, min(4, 3 // 16)) = 1 share: one piece, one partial
    c = fl.zeros((96, 96), f32).partition((32, 32), schedule=ft.stream_k(blocks=4))
    assert c.stream_k_phases() == (1, 2, 3)
    assert fl.zeros((0, 4), f32).partition((32, 32), schedule=ft.stream_k()).stream_k_phases() \
        == ()
    assert _partials_of(monkeypatch, 96, 96, 96, 4) == {"stores": 1, "loads": 1}


def test_a_tail_of_more_than_a_quarter_of_the_blocks_runs_whole(monkeypatch):
    # 10 tiles over 4 blocks leave 2 (half the blocks): splitting them would save less than the
    # pieces and fixup launches cost, so the whole-tiles launch runs all 10 (tail_split)
    c = fl.zeros((64, 160), f32).partition((32, 32), schedule=ft.stream_k(blocks=4))
    assert c.stream_k_phases() == (1,)
    assert _partials_of(monkeypatch, 64, 160, 640, 4) == {"stores": 0, "loads": 0}
    assert not c.one_tile_each() and c.launch_grid() == (4, 1, 1)
    # fewer tiles than blocks, more than a quarter of them: one launch, one block per tile,
    # compiled without the loop over tiles (as persistent runs them)
    c = fl.zeros((64, 96), f32).partition((32, 32), schedule=ft.stream_k(blocks=8))
    assert c.stream_k_phases() == (1,) and c.one_tile_each() and c.launch_grid() == c.grid
    assert _partials_of(monkeypatch, 64, 96, 640, 8) == {"stores": 0, "loads": 0}


def test_a_compile_ahead_builds_every_form_a_stream_k_call_may_launch():
    """Which launches run depends on the GPU's SM count: a compile ahead of it builds the
    whole-tiles launch, the one-block-per-tile form (persistent's), the pieces and the fixup."""
    from fearless.ir import types as T
    from fearless.kernel.tile import _either_schedule, _launched
    c = fl.zeros((64, 96), f32).partition((32, 32), schedule=ft.stream_k(blocks=8))
    args = [c, fl.zeros((64, 64), f16), fl.zeros((64, 96), f16)]
    types = matmul._signature(args, "cpu")[0]
    single = T.Persistent(stream_k=True, single=True, phase=1)
    assert types[0].schedule == single and "(one tile per block)" in str(types[0])
    assert [ty[0].schedule for ty in _launched(types, [c], 1)] == [single]
    whole = T.Persistent("grouped", 8, stream_k=True, phase=1)
    assert [ty[0].schedule for ty in _either_schedule(types, [c])] == [
        whole, single, T.Persistent("grouped", 8, True, phase=2),
        T.Persistent("grouped", 8, True, phase=3)]


def test_whole_waves_then_loops_split_between_blocks(monkeypatch):
    # 12 tiles of 50 iterations (K 800, step 16) over 10 blocks: one whole wave, then 2 tiles
    # (100 iterations) in S = min(10, 100 // 16) = 6 shares (four of 17, two of 16) from 0,
    # 17, 34, 51, 68, 84 to 100: the share from 34 spans two tiles, so 7 pieces
    assert _partials_of(monkeypatch, 100, 70, 800, 10, bk=16) == {"stores": 7, "loads": 7}


def test_short_loops_are_not_split_below_the_smallest_share(monkeypatch):
    # 1 tile of 4 iterations over 50 blocks: one share (MIN_SHARE), so one partial sum
    assert _partials_of(monkeypatch, 32, 32, 128, 50) == {"stores": 1, "loads": 1}


def test_past_the_32_bit_shares_each_shared_tile_is_one_piece(monkeypatch, tmp_path):
    # the shares' i32 arithmetic is exact while P q < 2^31; past it (forced here) the pieces
    # launch gives each shared tile to one block, and the result is still right
    import dataclasses
    import importlib
    from fearless.passes import stream_k
    base = importlib.import_module("fearless.kernel.base")
    monkeypatch.setattr(base, "CONFIG", dataclasses.replace(base.CONFIG, cache_dir=tmp_path))
    monkeypatch.setattr(stream_k, "I32_LIMIT", 8)
    seen = _counting(monkeypatch)
    fresh = ft.kernel(matmul.fn)
    a = rng.standard_normal((96, 2048)).astype(np.float16)
    b = rng.standard_normal((2048, 96)).astype(np.float16)
    # 9 tiles over 4 blocks: 8 whole, 1 shared of 64 iterations (one piece, not 4 shares)
    c = fl.full((96, 96), np.nan, f32).partition((32, 32), schedule=ft.stream_k(blocks=4))
    got = fresh(c, fl.asarray(a), fl.asarray(b), bk=32).sync()[0].unpartition().numpy()
    want, bound = _bound(a.astype(np.float64), b.astype(np.float64), f32)
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)
    assert seen == {"stores": 1, "loads": 1}


def test_a_stream_k_output_of_2_31_tiles_or_more_is_refused(monkeypatch):
    from fearless.errors import ContractError
    from fearless.kernel import tile as kernel_tile
    monkeypatch.setattr(kernel_tile, "I32_LIMIT", 16)   # 16 tiles stand in for 2^31
    a, b = fl.asarray(np.ones((128, 64), np.float16)), fl.asarray(np.ones((64, 128), np.float16))
    c = fl.zeros((128, 128), f32).partition((32, 32), schedule=ft.stream_k(blocks=3))
    with pytest.raises(ContractError, match="16 tiles") as info:
        matmul(c, a, b)
    assert info.value.kernel == "matmul"


def test_which_block_sums_a_tile_does_not_change_the_result():
    # the sum runs over the pieces in block order from zero, so two launches agree bit for bit
    rng_state = rng.bit_generator.state
    first, _, _ = _gemm(64, 96, 640, (32, 32), ft.stream_k(blocks=24))
    rng.bit_generator.state = rng_state
    again, _, _ = _gemm(64, 96, 640, (32, 32), ft.stream_k(blocks=24))
    np.testing.assert_array_equal(first, again)


def test_the_launch_runs_the_schedules_blocks_where_it_splits_fewer_tiles():
    # 4 tiles for 16 blocks: split between all 16; for 7, too many to split: one block each
    t = fl.zeros((100, 100), f32)
    assert t.partition((50, 50), schedule=ft.stream_k(blocks=16)).launch_grid() == (16, 1, 1)
    t = fl.zeros((100, 100), f32)
    assert t.partition((50, 50), schedule=ft.stream_k(blocks=7)).launch_grid() == (2, 2, 1)
    t = fl.zeros((0, 100), f32)
    assert 0 in t.partition((50, 50), schedule=ft.stream_k(blocks=7)).launch_grid()


def test_bad_stream_k_schedules_are_refused():
    with pytest.raises(PartitionError, match="blocks=0"):
        ft.stream_k(blocks=0)
    with pytest.raises(PartitionError, match="order"):
        ft.stream_k(order="diagonal")
    assert isinstance(ft.stream_k(), StreamK) and ft.stream_k() != ft.persistent()


@ft.kernel
def store_first(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    c.store(ft.zeros((bm, bn), c.dtype))
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@ft.kernel
def accumulate_into_c(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = c.load().astype(f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@ft.kernel
def scaled_each_step(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc * 0.5)
    c.store(acc.astype(c.dtype))


@ft.kernel
def triangle(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(i + 1):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@ft.kernel
def stops_early(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        if k == 3:
            break
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@ft.kernel
def last_step(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 32):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    last = 0
    for k in range(ft.cdiv(a.shape[1], bk)):
        last = k
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    c.store((acc + last).astype(c.dtype))


@ft.kernel
def no_loop(c: ft.Out, a: ft.In, b: ft.In):
    c.store(ft.load_like(a, c))


@pytest.mark.parametrize("kernel, why", [
    (store_first, "may not write memory"),
    (accumulate_into_c, "starts at zero"),
    (scaled_each_step, "acc = acc \\+ x"),
    (triangle, "trip count"),
    (stops_early, "where they stop"),
    (last_step, "a value the loop leaves behind"),
    (no_loop, "no top-level for loop"),
], ids=lambda v: getattr(v, "name", None))
@pytest.mark.parametrize("blocks", [3, 4, 8, 16])
def test_a_loop_that_is_not_a_splittable_sum_is_refused_at_compile_time(kernel, why, blocks):
    # 4 tiles on 3 blocks (whole tiles in a loop), 4 (one wave), 8 (too many to split: one
    # block per tile, no loop), 16 (split): refused alike, whatever the output's size
    a, b = fl.asarray(np.ones((64, 64), np.float16)), fl.asarray(np.ones((64, 64), np.float16))
    c = fl.zeros((64, 64), f16).partition((32, 32), schedule=ft.stream_k(blocks=blocks))
    with pytest.raises(CompileError, match=why) as info:
        kernel(c, a, b)
    assert info.value.kernel == kernel.name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
@pytest.mark.parametrize("m, n, k, tile, blocks", [
    (128, 1024, 4096, (128, 64), None), (100, 300, 1000, (64, 64), None),
    # 48 tiles on the H200's 132 SMs: a tail too full to split (tail_split), run whole; 20
    # tiles: split
    (1000, 700, 2000, (128, 128), None), (600, 500, 3000, (128, 128), None),
    # 40 tiles on 18 blocks: 2 whole waves, then 4 tiles of 63 iterations in 15 shares (all
    # three launches)
    (300, 500, 4000, (64, 64), 18),
    # 1088 tiles: 8 whole waves of 132 SMs (the H200's SM count) and a tail of 32 tiles of 64
    # iterations, in 128 shares
    (2048, 2176, 4096, (64, 64), None)])
def test_a_stream_k_gemm_is_right_and_repeatable_on_the_gpu(m, n, k, tile, blocks, dtype):
    a = rng.standard_normal((m, k)).astype(dtype.numpy)
    b = rng.standard_normal((k, n)).astype(dtype.numpy)
    fa, fb = fl.asarray(a), fl.asarray(b)

    def run():
        c = fl.full((m, n), np.nan, dtype).partition(tile, schedule=ft.stream_k(blocks=blocks))
        return matmul(c, fa, fb, bk=64).sync()[0].unpartition().numpy().astype(np.float64)
    got = run()
    want, bound = _bound(a.astype(np.float64), b.astype(np.float64), dtype)
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)
    for _ in range(3):   # a race between blocks would show as a change between launches
        np.testing.assert_array_equal(run(), got)


class _FakeBuffer:
    def __init__(self, nbytes):
        self.handle, self.nbytes = 4096 * (1 + len(_FakeBuffer.made)), nbytes
        _FakeBuffer.made.append(self)


_FakeBuffer.made = []


def test_a_streams_workspace_grows_keeps_old_buffers_and_is_freed_with_the_stream(monkeypatch):
    from types import SimpleNamespace
    from fearless.runtime import dispatch, memory, workspace
    _FakeBuffer.made.clear()
    monkeypatch.setattr(memory, "allocate", lambda nbytes, stream: _FakeBuffer(nbytes))
    monkeypatch.setattr(workspace, "_quiet", [SimpleNamespace(core=SimpleNamespace(
        sync=lambda: None))])

    class FakeStream:
        core = SimpleNamespace(sync=lambda: None)
    stream = FakeStream()
    (partials,) = workspace.views(stream, 132, f32, (128, 128))
    # two slots of 64 KiB per block, nothing to clear (the pieces launch writes what it uses)
    assert partials[1] == _FakeBuffer.made[0].handle and partials[2] == (264,)
    assert _FakeBuffer.made[0].nbytes == 264 * 65536
    assert workspace.views(stream, 100, f32, (128, 128))[0][1] == partials[1]   # reused
    workspace.views(stream, 200, f32, (128, 128))                               # grows
    assert len(_FakeBuffer.made) == 2 and len(workspace._spaces[id(stream)].buffers) == 2
    other = FakeStream()
    workspace.views(other, 4, f32, (64, 64))
    dispatch.forget_stream(other)                # a released graph's stream
    assert id(other) not in workspace._spaces
    key = id(stream)
    del stream                                   # a stream that became garbage
    assert key not in workspace._spaces


def test_a_schedule_type_pairs_stream_k_with_a_phase():
    from fearless.ir import types as T
    assert str(T.TensorView(f32, 2, T.Role.OUT, (32, 32), schedule=T.Persistent(
        stream_k=True, phase=2))).endswith("stream-k pieces grouped 8>")
    for bad in (dict(stream_k=True), dict(stream_k=True, phase=4), dict(phase=1)):
        with pytest.raises(ValueError, match="phase"):
            T.Persistent(**bad)


class _Core:   # a CUDA stream stand-in: the order checks read only fearless's bookkeeping
    handle = 0x10

    def sync(self):
        pass


def test_a_repeat_stream_k_call_takes_the_fast_path_with_each_launch_in_order(monkeypatch):
    # the plan holds one loaded kernel per launch; the pieces and fixup launches get the
    # stream's workspace (the whole waves' does not), all three the same (P, 1, 1) grid
    from types import SimpleNamespace
    from fearless.kernel import tile_fast
    from fearless.runtime import pack, workspace
    from fearless.runtime.stream import Stream
    launched = []
    monkeypatch.setattr(pack, "launch", lambda fn, hw, block, smem, stream, params, name, pdl:
                        launched.append((fn, hw, params)))
    monkeypatch.setattr(workspace, "views", lambda stream, blocks, dtype, shape:
                        [("workspace", blocks, dtype, shape)])
    fill = SimpleNamespace(fill=lambda a: (len(a), a[-1]))
    launches = [SimpleNamespace(function=phase, grouped=True, name="matmul", pdl=False,
                                params=fill, stream_k=() if phase == 1 else (f32, (32, 32)))
                for phase in (1, 2, 3)]
    a = fl.asarray(rng.standard_normal((64, 384)).astype(np.float16))
    b = fl.asarray(rng.standard_normal((384, 160)).astype(np.float16))

    def found(n):   # 10 tiles over 8 blocks: one whole wave and 2 shared tiles; 2 tiles: no
        c = fl.zeros((64, n), f32).partition((32, 32), schedule=ft.stream_k(blocks=8))
        return tile_fast.signature(matmul.params, (c, a, b, 32), lambda backend: 1)
    assert found(160)[0] != found(32)[0]   # the phases launched are part of the key
    key, views, outs, values = found(160)
    plan = tile_fast.TilePlan("matmul", matmul.runtime_params, launches, {})
    with fl.stream(Stream(_Core(), _wrap=True)):
        plan.operation(values, views, outs).enqueue()
    ws = ("workspace", 8, f32, (32, 32))
    assert launched == [(1, (8, 1, 1), (3, views[-1])), (2, (8, 1, 1), (4, ws)),
                        (3, (8, 1, 1), (4, ws))]
    # the key does not hold the shape: an output of too many tiles goes to the slow path,
    # which refuses it (here "too many" is 10, past the i32 shares' limit)
    monkeypatch.setattr(tile_fast, "I32_LIMIT", 10)
    key, views, outs, values = found(160)
    assert plan.operation(values, views, outs) is None


def test_the_fixups_loads_of_partial_sums_wait_for_no_memory_operation():
    # chained through one token, tileiras 13.5 staged each 128 x 128 partial sum through shared
    # memory behind a barrier per 2 KB (10-24 us per partial on the H200, session 16); the
    # launch only reads the workspace, so its loads take the entry token and may overlap
    from fearless.ir import types as T
    fixup = T.Persistent("grouped", 8, stream_k=True, phase=3)
    loads = matmul_tile_loads(fixup, (128, 128))
    # the entry token: gdc_wait where the launch may be a dependent one (PDL), else make_token
    assert loads and all(op.fields["token"].owner.name in ("gdc_wait", "make_token")
                         for op in loads)


def test_idle_sms_are_weighed_by_how_stream_k_splits_the_loops():
    """The OccupancyWarning's rule counts a launch's tiles: as they are where a stream-K call
    runs them one per block, as pieces where it splits every tile's loop, and not at all where
    it splits a tail after whole waves (every SM busy)."""
    from fearless.kernel.tile import _splits_every_tile

    def part(schedule, n=100):
        return fl.zeros((n, 100), f32).partition((50, 50), schedule=schedule)
    assert _splits_every_tile([part(None)], 1) is False and _splits_every_tile([], 1) is None
    assert _splits_every_tile([part(ft.persistent(blocks=16))], 1) is False
    # 4 tiles: all split over 16 blocks; for 7, too many to split, so one block each; 18 tiles
    # on 16 blocks: a whole wave, then 2 split
    assert _splits_every_tile([part(ft.stream_k(blocks=16))], 1) is True
    assert _splits_every_tile([part(ft.stream_k(blocks=7))], 1) is False
    assert _splits_every_tile([part(ft.stream_k(blocks=16), 450)], 1) is None


@pytest.mark.parametrize("tile, tiles, named", [
    ((128, 128), 32, "each of the 32 tiles into pieces"),
    ((128, 256), 16, "each of the 16 tiles into pieces"),
    ((64, 64), 128, None),          # a wave of tiles: not split into several pieces each
    ((128, 128), 44, None),         # a third of the SMs
])
def test_stream_k_that_splits_few_large_tiles_is_named(tile, tiles, named):
    """Stream-K over few tiles of 128 rows or columns cuts each into several pieces, and ran
    at 49-77% of smaller tiles one per block on the H200 (session 19): the OccupancyWarning
    names it."""
    from fearless.runtime.tile_launch import idle_sm_advice
    why = idle_sm_advice((128, 4096), tile, tiles, 132, split=True)
    assert (why is None) is (named is None), why
    if named is not None:
        assert named in why and "64 x 64" in why
