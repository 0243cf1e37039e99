"""GEMM tile probe on the GPU (issue 13): which tile, entry hint, schedule and K split a few
rows of M = 128 want, against cuBLAS, with cuBLAS's own kernel names.

For each shape (M, N, K), f16: cuBLAS (``a @ b``) once under the torch profiler (its kernel
names: tile and split-K), then 10 calls captured in a torch CUDA graph; each fearless variant
checked once against float64 NumPy (f32 sums of exact products, one rounding to f16), then 10
calls captured with ``fl.capture()`` and replayed (best of 5 replays, microseconds per call).
Variants: ``examples.tile_gemm.matmul`` with tiles 128x128, 128x64, 64x128, 64x64, each with the
entry hints none / ``num_worker_warps_per_cta: 8`` / ``occupancy: 2`` / both, one tile per block
and ``ft.persistent()``; and a hand split-K (``part``: f32 partial sums (S, M, N) of K/S each,
``reduce``: their sum, rounded once) in 2 and 4 parts. 4096^3 times the large tiles instead.
The L2 is not flushed: weights up to 32 MB stay in the H200's L2 between the 10 calls.

``--set square``: 4096^3, 8192^3 and 8448 x 7936 x 8192 (4092 tiles of 128 x 128: 31 whole waves
on 132 SMs, where 8192^3 makes 31.03), the 128 x 256 and 256 x 128 tiles with
``num_worker_warps_per_cta: 8`` (two consumer warp groups, no spill) against 128 x 128. Each
variant's values are checked on 64 random rows. ``--set streamk``: ``ft.stream_k()`` (three
launches: whole waves, pieces, fixup) against one tile per block and ``ft.persistent()`` at the
tail-wave shapes (4096^3: 7.76 waves of 128 x 128; M 128 and 512). ``--set waves``: the shapes
where 128 x 128 tiles make 1.5-2 waves and cuBLAS leads nn.linear by 13-22% (T 256 x 14336 x
4096, 512 x 6144 x 2048, 256 x 128256 x 4096), against 128 x 256 and 256 x 128 tiles with
``num_cta_in_cga: 2`` (under a wave); ``--set bk``: the small GEMMs where cuBLAS
takes 10 us and fearless 13.5 (128 x 2048 x 2048, 128 x 1024 x 2048), 64 x 64 and 128 x 64 tiles
with K steps of 64 and 128.

    PYTHONPATH=src:. python3 benchmarks/gemm_tile_probe.py [--quick] [--set NAME]

``--set blocks``: ``ft.persistent()`` and ``ft.stream_k()`` with 1-4 tile blocks per SM, for
the 128 x 128, 128 x 64 and 64 x 64 tiles (whether the persistent 64-wide tiles lose to one tile
per block for want of co-resident blocks).

``--set groups``: the LLM rows at M 8192 with K or N 14336, persistent tiles in tile groups of
4-32 rows (the wave's share of A and B in L2: each wave of 128 x 256 tiles in groups of 8 reads
all of B at 8192 x 4096 x 14336); ``--set groups-square``: the squares 4096-16384, groups of 8
and 16, 128 x 256 and 128 x 128 tiles. ``--set epilogue``: 4096^3 and 8192^3 with and without
the store of C (``epilogue``'s "unstored": the store under a condition that never holds), for
what the epilogue costs each tile, and with the store's hints (no TMA; latency 10).

NAME: m128 (the default), waves, bk, square, streamk, blocks, epilogue, groups,
groups-square.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import f16, f32
from fearless import tile as ft
from examples.tile_gemm import matmul

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benchmark modules
from bench_pdl import _best  # noqa: E402

CALLS = 10
HINTS = {"-": {}, "ww8": {"num_worker_warps_per_cta": 8}, "occ2": {"occupancy": 2},
         "ww8occ2": {"num_worker_warps_per_cta": 8, "occupancy": 2}}
CGA2 = {"num_cta_in_cga": 2}


@ft.kernel
def part(p: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 64):
    """p (S, M, N) f32 tile (1, bm, bn): split s sums K chunks [s * per, s * per + per)."""
    bm, bn = p.tile_shape[1], p.tile_shape[2]
    s, i, j = p.tile_index
    per = ft.cdiv(ft.cdiv(a.shape[1], bk), p.shape[0])
    acc = ft.zeros((bm, bn), f32)
    for k in range(s * per, s * per + per):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    p.store(acc.reshape((1, bm, bn)))


@ft.kernel
def epilogue(c: ft.Out, a: ft.In, b: ft.In, bk: ft.Const[int] = 64, store: ft.Const[int] = 0):
    """``matmul`` with another store of C (``--set epilogue``): ``store`` 0 as matmul's, 1
    never (under a condition on K that never holds here: the GEMM without its epilogue, its
    output not checked), 2 without TMA (``allow_tma=False``), 3 with the latency hint 10."""
    bm, bn = c.tile_shape
    i, j = c.tile_index
    acc = ft.zeros((bm, bn), f32)
    for k in range(ft.cdiv(a.shape[1], bk)):
        acc = ft.mma(ft.load(a, (i, k), (bm, bk)), ft.load(b, (k, j), (bk, bn)), acc)
    if store == 1:
        if a.shape[1] == 77:
            c.store(acc.astype(c.dtype))
    elif store == 2:
        c.store(acc.astype(c.dtype), allow_tma=False)
    elif store == 3:
        c.store(acc.astype(c.dtype), latency=10)
    else:
        c.store(acc.astype(c.dtype))


@ft.kernel
def reduce(c: ft.Out, p: ft.In, splits: ft.Const[int] = 2):
    bm, bn = c.tile_shape
    i, j = c.tile_index
    c.store(ft.sum(ft.load(p, (0, i, j), (splits, bm, bn)), axis=0).astype(c.dtype))


SETS = {"m128": [(128, 4096, 4096), (128, 1024, 4096), (128, 4096, 14336),
                 (128, 14336, 4096), (4096, 4096, 4096)],
        "waves": [(256, 14336, 4096), (512, 6144, 2048), (256, 128256, 4096)],
        "bk": [(128, 2048, 2048), (128, 1024, 2048)],
        "square": [(4096, 4096, 4096), (8192, 8192, 8192), (8448, 7936, 8192)],
        "streamk": [(4096, 4096, 4096), (8192, 8192, 8192), (128, 4096, 4096),
                    (128, 1024, 4096), (512, 4096, 4096)],
        "groups": [(8192, 4096, 14336), (8192, 14336, 4096)],
        "groups-square": [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384)],
        "epilogue": [(4096, 4096, 4096), (8192, 8192, 8192)],
        "blocks": [(4096, 4096, 4096), (128, 4096, 4096), (128, 1024, 4096), (512, 4096, 4096)]}


def variants(big: bool, which: str = "m128") -> list[tuple]:
    """(name, kernel, tile, schedule, splits, bk) of each variant of the set ``which``; ``bk``
    the K step, or a dict of the kernel's constants (``epilogue``'s)."""
    if which == "waves":
        return [(f"{t[0]}x{t[1]}{' cga2' if 256 in t else ''} "
                 f"{'persistent' if s else 'one per block'}", _hinted(matmul, "-", 256 in t),
                 t, s, 1, 64)
                for t in ((128, 128), (128, 256), (256, 128)) for s in (None, ft.persistent())]
    if which == "square":
        per = ft.persistent()
        return [("128x128 persistent", matmul, (128, 128), per, 1, 64),
                ("128x128 persistent bk 128", matmul, (128, 128), per, 1, 128),
                ("128x128 persistent group 16", matmul, (128, 128), ft.persistent(group=16),
                 1, 64)] + [
            (f"{t[0]}x{t[1]} {h}{' cga2' if c else ''} {'persistent' if s else 'one per block'}"
             f"{'' if bk == 64 else f' bk {bk}'}", _hinted(matmul, h, c), t, s, 1, bk)
            for t, h, c, s, bk in (((128, 256), "ww8", False, per, 64),
                                   ((256, 128), "ww8", False, per, 64),
                                   ((128, 256), "ww8", False, None, 64),
                                   ((256, 128), "ww8", False, None, 64),
                                   ((128, 256), "ww8", False, per, 32),
                                   ((256, 128), "ww8", False, per, 32),
                                   ((128, 256), "-", True, per, 64),
                                   ((128, 256), "ww8", True, per, 64),
                                   ((256, 128), "ww8", True, per, 64))]
    if which == "streamk":
        return [(f"{t[0]}x{t[1]} {name}", matmul, t, sched, 1, 64)
                for t in ((128, 128), (128, 256), (128, 64), (64, 64))
                for name, sched in (("one per block", None), ("persistent", ft.persistent()),
                                    ("stream-K", ft.stream_k()))]
    if which == "blocks":
        sms = _sms()
        return [(f"{t[0]}x{t[1]} one per block", matmul, t, None, 1, 64)
                for t in ((128, 128), (128, 64), (64, 64))] + [
            (f"{t[0]}x{t[1]} {name} {per} per SM", matmul, t, sched(blocks=per * sms), 1, 64)
            for t in ((128, 128), (128, 64), (64, 64)) for per in (1, 2, 3, 4)
            for name, sched in (("persistent", ft.persistent), ("stream-K", ft.stream_k))]
    if which == "groups-square":
        return [(f"{t[0]}x{t[1]} persistent group {g}", _hinted(matmul, h), t,
                 ft.persistent(group=g), 1, 64)
                for g in (8, 16) for t, h in (((128, 256), "ww8"), ((128, 128), "-"))]
    if which == "groups":
        return [(f"{t[0]}x{t[1]} persistent group {g}", _hinted(matmul, h), t,
                 ft.persistent(group=g), 1, 64)
                for t, h in (((128, 256), "ww8"), ((256, 128), "ww8"), ((128, 128), "-"))
                for g in (4, 8, 16, 32)]
    if which == "epilogue":
        per = ft.persistent()
        return [(f"{t[0]}x{t[1]} {'persistent' if s else 'one per block'}{label}",
                 _hinted(epilogue, h), t, s, 1, {"bk": 64, "store": store})
                for t, h, s in (((128, 128), "-", per), ((128, 128), "-", None),
                                ((128, 256), "ww8", per), ((128, 256), "ww8", None))
                for store, label in enumerate(("", " unstored", " stored without TMA",
                                               " stored with latency 10"))]
    if which == "bk":
        return [(f"{t[0]}x{t[1]} bk {bk}", matmul, t, None, 1, bk)
                for t in ((64, 64), (128, 64)) for bk in (64, 128)]
    return [v + (64,) for v in _m128(big)]


def _m128(big: bool) -> list[tuple]:
    if big:
        return [(f"{t[0]}x{t[1]} {h} persistent", _hinted(matmul, h, 256 in t), t,
                 ft.persistent(), 1)
                for t, h in (((128, 128), "-"), ((128, 128), "ww8"), ((128, 256), "-"),
                             ((128, 256), "ww8"), ((256, 128), "ww8"))]
    out = [(f"{t[0]}x{t[1]} {h} {'persistent' if s else 'one per block'}", _hinted(matmul, h),
            t, s, 1) for t in ((128, 128), (128, 64), (64, 128), (64, 64)) for h in HINTS
           for s in (None, ft.persistent())]
    return out + [(f"split {t[0]}x{t[1]} {h} in {n}", _hinted(part, h), t, None, n)
                  for t in ((128, 128), (128, 64), (64, 128)) for h in ("-", "ww8")
                  for n in (2, 4)]


def _sms() -> int:
    import torch
    return torch.cuda.get_device_properties(0).multi_processor_count


_KERNELS: dict = {}


def _hinted(kernel, hint: str, cluster: bool = False):
    hints = dict(HINTS[hint], **(CGA2 if cluster else {}))
    key = (kernel.name, hint, cluster)
    if key not in _KERNELS:
        _KERNELS[key] = ft.kernel(kernel.fn, hints={"sm_90": hints} if hints else None)
    return _KERNELS[key]


def best(fn, sync, reps: int = 5) -> float:
    """Seconds per call: the best of ``reps`` replays of ``CALLS`` captured calls."""
    return _best(fn, sync, reps) / CALLS


def probe(torch, m: int, n: int, k: int, which: str) -> None:
    from torch.profiler import ProfilerActivity, profile
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn((m, k), generator=g, device="cuda", dtype=torch.float16)
    b = torch.randn((k, n), generator=g, device="cuda", dtype=torch.float16)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        a @ b
        torch.cuda.synchronize()
    names = sorted({e.name.split("(")[0] for e in prof.events() if "CUDA" in str(e.device_type)})
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(CALLS):
            a @ b
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            a @ b
    ref = best(graph.replay, torch.cuda.synchronize)
    print(f"{m}x{n}x{k}: cuBLAS {ref * 1e6:.1f} us, kernels {names}", flush=True)
    fa, fb = fl.asarray(a), fl.asarray(b)
    # 64 random rows are checked (all M rows of float64 products cost minutes at 8192^3)
    rows_checked = np.sort(np.random.default_rng(m).choice(m, min(m, 64), replace=False))
    a64, b64 = a.double().cpu().numpy()[rows_checked], b.double().cpu().numpy()
    want = a64 @ b64
    bound = (np.abs(a64) @ np.abs(b64)) * (k * 2.0 ** -23 + 2.0 ** -11) + np.abs(want) * 2.0 ** -11
    rows = []
    for name, kern, tile, schedule, splits, bk in variants(m >= 4096, which):
        consts = bk if isinstance(bk, dict) else {"bk": bk}
        parts = [fl.empty((splits, m, n), f32) for _ in range(CALLS + 1)] if splits > 1 else None
        rt = (64, 64) if splits <= 2 else (32, 64)

        def call(c, i, kern=kern, tile=tile, schedule=schedule, splits=splits, parts=parts,
                 rt=rt, consts=consts):
            if splits == 1:
                return kern(c.partition(tile, schedule=schedule), fa, fb, **consts)
            return kern(parts[i].partition((1, *tile)), fa, fb, **consts).then(
                lambda r: reduce(c.partition(rt), r[0].unpartition(), splits=splits))
        try:
            got = call(fl.full((m, n), np.nan, f16), CALLS).sync()[0].unpartition().numpy()
            ok = bool(np.all(np.abs(got[rows_checked].astype(np.float64) - want) <= bound))
            outs = [fl.empty((m, n), f16) for _ in range(CALLS)]
            with fl.capture() as captured:
                for i in range(CALLS):
                    call(outs[i], i).enqueue()
            t = best(captured.replay, fl.synchronize)
            captured.release()
        except Exception as exc:  # noqa: BLE001 - one variant must not stop the probe
            print(f"  {name}: failed {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        rows.append((t, name))
        print(f"  {name}: {t * 1e6:7.1f} us {ref / t * 100:5.1f}% of cuBLAS"
              f"{'' if ok else ' WRONG'}", flush=True)
    rows.sort()
    print(f"best at {m}x{n}x{k}: " + "; ".join(f"{nm} {t * 1e6:.1f} us ({ref / t:.0%})"
                                              for t, nm in rows[:4]), flush=True)


def main() -> None:
    import torch
    fl.set_backend("cuda")
    warnings.simplefilter("ignore")
    which = sys.argv[sys.argv.index("--set") + 1] if "--set" in sys.argv else "m128"
    shapes = SETS[which]
    for shape in shapes[:1] if "--quick" in sys.argv else shapes:
        probe(torch, *shape, which)


if __name__ == "__main__":
    main()
