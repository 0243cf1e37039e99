"""SIMT depth benchmark on the GPU: the block-level examples against PyTorch, CuPy and numba-cuda.

Cases (each section fails alone: its traceback is printed and the run goes on):

- copy: ``dst.copy_(src)`` of 2^28 f32 (torch), the bandwidth reference. Copy GB/s counts the
  bytes read plus the bytes written (8 B per element).
- reduce: sum of 2^28 f32. ``examples.block_reduce`` (a grid-stride loop with 4, 8 or 16 loads
  in flight per thread, ``fl.warp.reduce_sum``, one shared slot per warp, one atomic per block;
  1, 2 or 4 waves of blocks; the best kept, and the shipped setting shown) against
  ``torch.sum``. A reduction
  only reads, so its GB/s counts the 4 B read per element and "% of copy" compares that to the
  copy's read+write GB/s (both are bytes through the memory system per second). Target: >= 90%
  and no slower than torch.sum.
- transpose: 8192x8192 f32 (``examples.transpose``) against ``x.t().contiguous()``; 8 B per
  element (read + write) against the copy. Target: >= 80% of copy.
- histogram: 256 bins of the photograph tiled to 7800x8192 (63.9 MPixel, u8;
  ``examples.histogram``, launched over ``threads(n)``: a few blocks per SM) against
  ``torch.histc`` (on an f32 copy made beforehand: histc takes no integers), ``torch.bincount``
  and CuPy's ``bincount`` and ``histogram``.
- sgemm: 4096^3 f32 (``examples.sgemm``) against ``torch.matmul`` with TF32 off and a numba-cuda
  shared-memory SGEMM (16x16 tiles) where numba works. TFLOP/s.
- hgemm: 8192^3 f16 with ``mma.sync`` from ``examples.hgemm`` (``hgemm(a, b, c)``, launched over
  ``(m, n)``) when that module exists, against cuBLAS (``torch.matmul``, f16).
- softmax: ``examples.row_softmax`` has rows of exactly 256 (a warp per row, 8 elements per
  lane), so it runs on 262144x256 f32 (the 2^26 elements of 8192x8192) against
  ``torch.softmax`` of the same shape; ``torch.softmax`` of 8192x8192 is shown for reference.
- scan: inclusive prefix sum of 2^26 i32 (``examples.prefix_sum.scan``: chunk sums, their scan
  by recursion, the chunk scans; its allocations included) against
  ``torch.cumsum(x, 0, dtype=torch.int32)``; GB/s counts 8 B per element (one read, one write;
  the example reads each element twice).
- bounds: every memory-bound kernel checked and ``fl.unchecked``: vector_add, saxpy (2^27),
  matrix_add (8192^2, b transposed), Sobel (4800x4096 photo tiling), transpose, row_softmax,
  block_reduce, histogram; overhead = checked / unchecked - 1.

Timing: device time per launch from CUDA events on the legacy default stream (fearless's and
torch's), after a warm-up call: ``torch.cuda._sleep`` first holds the GPU long enough for the host
to enqueue all n calls of a repetition, so host launch cost is excluded (a case where the GPU
still caught up with the host is marked host-bound); n fills about 50 ms; the median of 5
repetitions. No L2 flush (every working set here is several times the 50 MB L2). Ratios are peer
time / fearless time (above 1: fearless is faster).

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_simt_depth.py [--sections copy,reduce,...]
Output: a line per measurement as it goes, a table last; ``$OUT`` (default ./bench_out) gets
bench_simt_depth.json and bench_simt_depth.log. ``--dry-run`` (no GPU) runs every fearless
kernel here once at tiny sizes on the CPU backend, checked and unchecked, against NumPy.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import f32, u32
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_log, beside this script
from run_log import EventClock, RunLog  # noqa: E402
from examples.block_reduce import block_reduce, launch_threads, make_block_reduce
from examples.histogram import BINS, histogram, threads as hist_threads
from examples.image_filter import photograph, sobel
from examples.image_filter import reference as sobel_reference
from examples.matrix_add import matrix_add
from examples.prefix_sum import scan
from examples.row_softmax import COLS as SM_COLS, row_softmax
from examples.row_softmax import launch_threads as softmax_threads
from examples.saxpy import saxpy
from examples.sgemm import launch_shape as sgemm_shape, sgemm
from examples.transpose import launch_shape, transpose
from examples.vector_add import vector_add

SECTIONS = ("copy", "reduce", "transpose", "histogram", "sgemm", "hgemm", "softmax", "scan",
            "bounds")
COPY_N = REDUCE_N = 1 << 28
VEC_N = 1 << 27
SQ = 8192
HIST_TILES = (13, 16)         # 600x512 photograph -> 7800x8192
SGEMM_N, HGEMM_N = 4096, 8192
SCAN_N = 1 << 26
TARGET_MS = 50.0              # device time per repetition
REPS = 5

def tiled_photo(tiles=HIST_TILES) -> np.ndarray:
    return np.tile(np.round(photograph() * 255.0).astype(np.uint8), tiles)


# -- timing ---------------------------------------------------------------------------------------

class Clock(EventClock):
    """Device milliseconds per call from CUDA events, host enqueue cost hidden behind a sleep."""

    def __call__(self, fn) -> dict:
        """{"ms": median device ms per call, "n": calls per repetition, "host_bound": bool}."""
        import time
        torch = self.torch
        fn()  # warm-up: compiles, loads, first-touch
        torch.cuda.synchronize()
        s, e = self._event(), self._event()
        t0 = time.perf_counter()
        s.record()
        for _ in range(3):
            fn()
        e.record()
        e.synchronize()
        host_ms = (time.perf_counter() - t0) * 1e3 / 3
        est = max(s.elapsed_time(e) / 3, 1e-3)
        n = int(min(1000, max(3, TARGET_MS / est)))
        out, late = [], False
        for _ in range(REPS):
            s, e, seen = self._event(), self._event(), False
            cover = min(1.5 * host_ms * n + 2.0, 5000.0)
            torch.cuda._sleep(int(cover * self.cycles_per_ms))
            s.record()
            for _ in range(n):
                fn()
            seen = s.query()  # the GPU reached the start before the host finished enqueuing
            e.record()
            e.synchronize()
            late |= bool(seen)
            out.append(s.elapsed_time(e) / n)
        return {"ms": statistics.median(out), "n": n, "host_bound": late,
                "reps_ms": out}


# -- recording ------------------------------------------------------------------------------------

class Report(RunLog):
    """The log as it goes, rows for the final table, everything for the JSON."""

    def __init__(self, out_dir: Path | None):
        super().__init__(out_dir, "bench_simt_depth")
        self.bounds: list[dict] = []

    def extra(self) -> dict:
        return {"rows": self.rows, "bounds": self.bounds}

    def row(self, case: str, fearless: dict | None, peers: dict, unit: str = "", work: float = 0,
            copy: dict | None = None, target: str = "", note: str = "") -> dict:
        """``work``: bytes (unit GB/s) or flops (TFLOP/s) per call; ``copy`` the copy's timing,
        compared by GB/s (so ``work`` must count bytes the same way as the copy: read + write,
        or read only for a reduction, see the module docstring)."""
        per_ms = {"TFLOP/s": 1e9, "GB/s": 1e6}.get(unit)
        fk = fearless.get("ms") if fearless else None
        times = {k: v["ms"] for k, v in peers.items() if v and v.get("ms")}
        r = {"case": case, "fearless": fearless, "peers": peers, "unit": unit, "work": work,
             "note": note, "target": target,
             "rate": work / (fk * per_ms) if fk and per_ms else None,
             "vs": {k: t / fk for k, t in times.items()} if fk else {}}
        if fk and copy and copy.get("ms") and unit == "GB/s":
            copy_gbps = 8 * COPY_N / (copy["ms"] * 1e6)
            r["pct_copy"] = 100 * r["rate"] / copy_gbps
        self.rows.append(r)
        flags = " [host-bound]" if fearless and fearless.get("host_bound") else ""
        if fearless and not fearless.get("ok", True):
            flags += f" WRONG ({fearless.get('err')})"
        rate = f" = {r['rate']:.4g} {unit}" if r["rate"] else ""
        pct = f", {r['pct_copy']:.1f}% of copy" if "pct_copy" in r else ""
        self.log(f"  {case}: fearless {fk:.4g} ms{rate}{pct}{flags} | " if fk else
                 f"  {case}: fearless n/a | ")
        self.log("      " + "  ".join(f"{k} {t:.4g} ms (x{t / fk:.2f})" if fk else f"{k} {t:.4g} ms"
                                      for k, t in times.items()))
        return r

    def table(self) -> None:
        self.log("\n" + "=" * 118)
        self.log(f"{'case':<40}{'fearless ms':>12}{'rate':>14}{'% copy':>8}   "
                 f"{'best peer (ms)':<28}{'ratio':>7}  target")
        for r in self.rows:
            fk = r["fearless"].get("ms") if r["fearless"] else None
            real = {k: v for k, v in r["peers"].items() if v and v.get("ms")}
            best = min(real.items(), key=lambda kv: kv[1]["ms"], default=None)
            peer = f"{best[0]} {best[1]['ms']:.4g}" if best else "-"
            ratio = f"{best[1]['ms'] / fk:.2f}x" if best and fk else "-"
            rate = f"{r['rate']:.4g} {r['unit'].split('/')[0]}" if r["rate"] else "-"
            pct = f"{r['pct_copy']:.1f}" if "pct_copy" in r else "-"
            cell = f"{fk:.4g}" if fk else "n/a"
            self.log(f"{r['case']:<40}{cell:>12}{rate:>14}{pct:>8}   {peer:<28}{ratio:>7}  "
                     f"{r['target']}")
        if self.bounds:
            self.log(f"\n{'bounds checks':<40}{'checked ms':>12}{'unchecked ms':>14}"
                     f"{'overhead':>10}")
            for b in self.bounds:
                self.log(f"{b['case']:<40}{b['checked_ms']:12.4g}{b['unchecked_ms']:14.4g}"
                         f"{b['overhead_pct']:+9.1f}%")
        self.log("ratio: the fastest peer's time / fearless's (above 1: fearless is faster). "
                 "% copy: fearless GB/s over the\ncopy's read+write GB/s (a reduction counts the "
                 "bytes it reads). Device time per launch, median of 5.")


def checked(ok: bool, err: float) -> dict:
    return {"ok": bool(ok), "err": float(err)}


def rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def peer(rep: Report, clock: Clock, peers: dict, name: str, fn) -> None:
    try:
        peers[name] = clock(fn)
    except Exception:  # noqa: BLE001 - a peer's failure leaves its column out
        rep.fail(name)


def fearless_time(rep: Report, clock: Clock, where: str, fn, check) -> dict | None:
    """Time ``fn``; ``check()`` gives (ok, error) afterwards, on a fresh run."""
    try:
        res = clock(fn)
        fl.synchronize()  # a KernelBoundsError would surface here
        res.update(checked(*check()))
        return res
    except Exception:  # noqa: BLE001
        rep.fail(where)
        return None


# -- sections -------------------------------------------------------------------------------------

def bench_copy(rep, clock, torch) -> dict:
    src = torch.randn(COPY_N, device="cuda")
    dst = torch.empty_like(src)
    res = clock(lambda: dst.copy_(src))
    rep.data["copy"] = {**res, "GB/s (read+write)": 8 * COPY_N / (res["ms"] * 1e6)}
    rep.log(f"  copy 2^28 f32: {res['ms']:.4g} ms = {8 * COPY_N / (res['ms'] * 1e6):.0f} GB/s "
            "(read + write)")
    return res


def bench_reduce(rep, clock, torch, copy) -> None:
    tx = torch.rand(REDUCE_N, device="cuda")
    x = fl.asarray(tx)
    want = float(tx.double().sum())
    peers = {}
    peer(rep, clock, peers, "torch.sum", lambda: torch.sum(tx))
    total = fl.zeros(1, f32)
    variants = {}
    for unroll in (4, 8, 16):
        kern = block_reduce if unroll == 8 else make_block_reduce(unroll)
        for waves in (1, 2, 4):
            launch = kern.prepare(launch_threads(REDUCE_N, waves))

            def check(kern=kern, launch=launch):
                t = fl.zeros(1, f32)
                kern[launch](x, t)
                e = rel(t.numpy(), [want])
                return e < 1e-5, e
            res = fearless_time(rep, clock, f"block_reduce unroll={unroll} waves={waves}",
                                lambda kern=kern, launch=launch: kern[launch](x, total), check)
            if res:
                res["unroll"], res["waves"] = unroll, waves
                variants[f"unroll={unroll} waves={waves}"] = res
                rep.log(f"  block_reduce unroll={unroll}, {waves} x 4 blocks per SM: "
                        f"{res['ms']:.4g} ms")
    rep.data["block_reduce variants"] = variants
    if variants:
        best = min(variants.values(), key=lambda r: r["ms"])
        rep.row(f"reduce 2^28 f32 (examples.block_reduce, unroll={best['unroll']}, "
                f"waves={best['waves']})", best, peers, "GB/s", 4 * REDUCE_N, copy,
                ">= 90% copy, >= torch.sum")
        default = variants.get("unroll=8 waves=4")
        if default:
            rep.row("reduce 2^28 f32 (examples.block_reduce as shipped)", default, peers,
                    "GB/s", 4 * REDUCE_N, copy)


def bench_transpose(rep, clock, torch, copy) -> None:
    ta = torch.rand(SQ, SQ, device="cuda")
    tout = torch.empty(SQ, SQ, device="cuda")
    a, out = fl.asarray(ta), fl.asarray(tout)
    launch = transpose.prepare(launch_shape((SQ, SQ)))
    peers = {}
    peer(rep, clock, peers, "x.t().contiguous()", lambda: ta.t().contiguous())
    peer(rep, clock, peers, "out.copy_(x.t())", lambda: tout.copy_(ta.t()))

    def check():
        tout.fill_(float("nan"))
        transpose[launch](a, out)
        return bool(torch.equal(tout, ta.t())), 0.0
    res = fearless_time(rep, clock, "transpose", lambda: transpose[launch](a, out), check)
    rep.row(f"transpose {SQ}x{SQ} f32", res, peers, "GB/s", 8 * SQ * SQ, copy, ">= 80% copy")


def bench_histogram(rep, clock, torch) -> None:
    img = tiled_photo()
    timg = torch.from_numpy(img.ravel()).cuda()
    fimg = timg.float()
    pixels = fl.asarray(timg)
    counts = fl.zeros(BINS, u32)
    launch = histogram.prepare(hist_threads(img.size))
    want = np.bincount(img.ravel(), minlength=BINS)
    peers = {}
    peer(rep, clock, peers, "torch.histc(f32)", lambda: torch.histc(fimg, BINS, 0, BINS))
    peer(rep, clock, peers, "torch.bincount", lambda: torch.bincount(timg, minlength=BINS))
    try:
        import cupy as cp
        cimg = cp.asarray(timg)
        peer(rep, clock, peers, "cupy.bincount", lambda: cp.bincount(cimg, minlength=BINS))
        peer(rep, clock, peers, "cupy.histogram",
             lambda: cp.histogram(cimg, bins=BINS, range=(0, BINS)))
    except Exception:  # noqa: BLE001
        rep.fail("cupy")

    def check():
        c = fl.zeros(BINS, u32)
        histogram[launch](pixels, c)
        got = c.numpy()
        return bool((got == want).all()), float(np.abs(got.astype(np.int64) - want).max())
    res = fearless_time(rep, clock, "histogram", lambda: histogram[launch](pixels, counts), check)
    rep.row(f"histogram {img.shape[0]}x{img.shape[1]} u8 photo", res, peers, "GB/s", img.size,
            note="GB/s counts the pixels read (1 B each)")


NUMBA_TPB = 16


def numba_sgemm():
    """(launch(a, b, c) taking torch tensors, None) or (None, why numba-cuda is unavailable)."""
    try:
        from numba import cuda, float32

        @cuda.jit
        def nb_sgemm(a, b, c):
            sa = cuda.shared.array((NUMBA_TPB, NUMBA_TPB), float32)
            sb = cuda.shared.array((NUMBA_TPB, NUMBA_TPB), float32)
            x, y = cuda.grid(2)
            tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
            acc = float32(0.0)
            for k0 in range(0, a.shape[1], NUMBA_TPB):
                sa[ty, tx] = a[y, k0 + tx] if y < a.shape[0] and k0 + tx < a.shape[1] else 0.0
                sb[ty, tx] = b[k0 + ty, x] if k0 + ty < b.shape[0] and x < b.shape[1] else 0.0
                cuda.syncthreads()
                for kk in range(NUMBA_TPB):
                    acc += sa[ty, kk] * sb[kk, tx]
                cuda.syncthreads()
            if y < c.shape[0] and x < c.shape[1]:
                c[y, x] = acc

        def launch(a, b, c):
            na, nb, nc = (cuda.as_cuda_array(t) for t in (a, b, c))
            grid = (-(-c.shape[1] // NUMBA_TPB), -(-c.shape[0] // NUMBA_TPB))
            return lambda: nb_sgemm[grid, (NUMBA_TPB, NUMBA_TPB)](na, nb, nc)
        return launch, None
    except Exception as exc:  # noqa: BLE001 - numba-cuda fails to import under NumPy 2.5
        return None, f"{type(exc).__name__}: {exc}"[:200]


def bench_sgemm(rep, clock, torch) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    n = SGEMM_N
    ta, tb = torch.rand(n, n, device="cuda") - 0.5, torch.rand(n, n, device="cuda") - 0.5
    tc = torch.empty(n, n, device="cuda")
    a, b, c = fl.asarray(ta), fl.asarray(tb), fl.asarray(tc)
    want = (ta.double() @ tb.double()).float()
    launch = sgemm.prepare(sgemm_shape(n, n))
    peers = {}
    peer(rep, clock, peers, "torch.matmul (no TF32)", lambda: torch.matmul(ta, tb))
    nb_launch, why = numba_sgemm()
    if nb_launch is not None:
        try:
            nc = torch.empty_like(tc)
            call = nb_launch(ta, tb, nc)
            call()
            torch.cuda.synchronize()
            peers["numba-cuda"] = clock(call)
            peers["numba-cuda"]["err"] = rel(nc.cpu(), want.cpu())
        except Exception as exc:  # noqa: BLE001 - imports, then fails at its first compile
            why = f"{type(exc).__name__}: {exc}"[:200]
            rep.log(traceback.format_exc())
    if why:
        rep.data["numba"] = why
        rep.log(f"  numba unavailable: {why}")

    def check():
        tc.fill_(float("nan"))
        sgemm[launch](a, b, c)
        e = rel(tc.cpu(), want.cpu())
        return e < 1e-4, e
    res = fearless_time(rep, clock, "sgemm", lambda: sgemm[launch](a, b, c), check)
    rep.row(f"sgemm {n}^3 f32", res, peers, "TFLOP/s", 2 * n ** 3)


def load_hgemm():
    """examples.hgemm's kernel, or None and why not."""
    try:
        from examples import hgemm as mod
    except Exception as exc:  # noqa: BLE001 - written on another branch
        return None, f"not available ({type(exc).__name__}: {exc})"
    kern = getattr(mod, "hgemm", None)
    if not hasattr(kern, "prepare"):
        return None, "not available (examples.hgemm has no kernel named hgemm)"
    return kern, None


def bench_hgemm(rep, clock, torch) -> None:
    kern, why = load_hgemm()
    if kern is None:
        rep.log(f"  hgemm: {why}")
        rep.data["hgemm"] = why
        return
    n = HGEMM_N
    ta = (torch.rand(n, n, device="cuda") - 0.5).half()
    tb = (torch.rand(n, n, device="cuda") - 0.5).half()
    tc = torch.empty(n, n, device="cuda", dtype=torch.float16)
    a, b, c = fl.asarray(ta), fl.asarray(tb), fl.asarray(tc.view(-1))
    from examples.hgemm import launch_threads as hgemm_threads  # one block per tile of C
    launch = kern.prepare(hgemm_threads(kern.tiles, n, n))
    peers = {}
    peer(rep, clock, peers, "cuBLAS (torch.matmul f16)", lambda: torch.matmul(ta, tb))

    def check():
        want = torch.matmul(ta.float(), tb.float())
        tc.fill_(float("nan"))
        kern[launch](a, b, c, n)
        e = rel(tc.float().cpu(), want.cpu())
        return e < 1e-2, e
    res = fearless_time(rep, clock, "hgemm", lambda: kern[launch](a, b, c, n), check)
    rep.row(f"hgemm {n}^3 f16 (mma.sync)", res, peers, "TFLOP/s", 2 * n ** 3)


def softmax_rows() -> int:
    """Rows for row_softmax: the 2^26 elements of 8192x8192 in rows of SM_COLS."""
    return SQ * SQ // SM_COLS


def bench_softmax(rep, clock, torch, copy) -> None:
    rows = softmax_rows()
    tx = torch.randn(rows, SM_COLS, device="cuda") * 4
    tout = torch.empty_like(tx)
    x, out = fl.asarray(tx), fl.asarray(tout)
    launch = row_softmax.prepare(softmax_threads(rows))
    peers = {}
    peer(rep, clock, peers, "torch.softmax", lambda: torch.softmax(tx, 1))
    try:
        square = torch.randn(SQ, SQ, device="cuda") * 4
        ref = clock(lambda: torch.softmax(square, 1))
        rep.data["torch.softmax 8192x8192"] = ref
        rep.log(f"  (reference) torch.softmax {SQ}x{SQ}: {ref['ms']:.4g} ms")
    except Exception:  # noqa: BLE001
        rep.fail("torch.softmax 8192x8192")

    def check():
        tout.fill_(float("nan"))
        row_softmax[launch](x, out)
        e = rel(tout.cpu(), torch.softmax(tx.double(), 1).cpu())
        return e < 1e-5, e
    res = fearless_time(rep, clock, "row_softmax", lambda: row_softmax[launch](x, out), check)
    rep.row(f"row softmax {rows}x{SM_COLS} f32", res, peers, "GB/s", 8 * rows * SM_COLS, copy,
            note="rows of 256: the example's")


def bench_scan(rep, clock, torch, copy) -> None:
    tx = torch.randint(-1000, 1000, (SCAN_N,), device="cuda", dtype=torch.int32)
    x = fl.asarray(tx)
    peers = {}
    peer(rep, clock, peers, "torch.cumsum",
         lambda: torch.cumsum(tx, 0, dtype=torch.int32))

    def check():  # into an output poisoned on the device, so an unwritten element shows
        out = fl.asarray(torch.full((SCAN_N,), -(2**31), device="cuda", dtype=torch.int32))
        got = torch.as_tensor(scan(x, out).numpy())
        want = torch.cumsum(tx, 0, dtype=torch.int32).cpu()
        return bool(torch.equal(got, want)), 0.0
    res = fearless_time(rep, clock, "prefix_sum", lambda: scan(x), check)
    rep.row("prefix sum 2^26 i32", res, peers, "GB/s", 8 * SCAN_N, copy,
            note="scan() with its allocations and recursion")


def bench_bounds(rep, clock, torch) -> None:
    """Each memory-bound kernel checked and fl.unchecked, on the same arguments."""
    tx, ty = torch.randn(VEC_N, device="cuda"), torch.randn(VEC_N, device="cuda")
    tout = torch.empty_like(tx)
    ta, tbt = torch.randn(SQ, SQ, device="cuda"), torch.randn(SQ, SQ, device="cuda")
    tm = torch.empty(SQ, SQ, device="cuda")
    photo = torch.tensor(np.tile(photograph(), (8, 8)), device="cuda")
    edges = torch.empty_like(photo)
    smx = torch.randn(softmax_rows(), SM_COLS, device="cuda")
    big = torch.rand(REDUCE_N, device="cuda")
    himg = torch.from_numpy(tiled_photo().ravel()).cuda()
    x, y, out = fl.asarray(tx), fl.asarray(ty), fl.asarray(tout)
    a, bt, m = fl.asarray(ta), fl.asarray(tbt).T, fl.asarray(tm)
    total, counts = fl.zeros(1, f32), fl.zeros(BINS, u32)
    cases = [
        ("vector_add 2^27", vector_add, (VEC_N,), (x, y, out)),
        ("saxpy 2^27", saxpy, (VEC_N,), (2.5, x, y, out)),
        ("matrix_add 8192^2 (b transposed)", matrix_add, ((SQ, SQ),), (a, bt, m)),
        (f"sobel {photo.shape[0]}x{photo.shape[1]}", sobel, (tuple(photo.shape),),
         (fl.asarray(photo), fl.asarray(edges))),
        ("transpose 8192^2", transpose, (launch_shape((SQ, SQ)),), (a, m)),
        (f"row_softmax {softmax_rows()}x256", row_softmax, (softmax_threads(smx.shape[0]),),
         (fl.asarray(smx), fl.asarray(torch.empty_like(smx)))),
        ("block_reduce 2^28", block_reduce, (launch_threads(REDUCE_N),),
         (fl.asarray(big), total)),
        ("histogram 64 MPixel", histogram, (hist_threads(himg.numel()),),
         (fl.asarray(himg), counts)),
    ]
    for name, kern, size, args in cases:
        try:
            fast = fl.unchecked(kern)
            lc, lu = kern.prepare(*size), fast.prepare(*size)
            res_c = clock(lambda kern=kern, lc=lc, args=args: kern[lc](*args))
            res_u = clock(lambda fast=fast, lu=lu, args=args: fast[lu](*args))
            fl.synchronize()
            b = {"case": name, "checked_ms": res_c["ms"], "unchecked_ms": res_u["ms"],
                 "overhead_pct": 100 * (res_c["ms"] / res_u["ms"] - 1),
                 "host_bound": res_c["host_bound"] or res_u["host_bound"]}
            rep.bounds.append(b)
            rep.log(f"  bounds {name}: checked {b['checked_ms']:.4g} ms, unchecked "
                    f"{b['unchecked_ms']:.4g} ms ({b['overhead_pct']:+.1f}%)")
        except Exception:  # noqa: BLE001
            rep.fail(f"bounds {name}")


# -- dry run: every fearless kernel here, on the CPU backend --------------------------------------

def dry_run(rep: Report) -> int:
    fl.set_backend("cpu")
    rng = np.random.default_rng(0)
    checks = []

    def check(name, got, want, rtol, atol=0.0):
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        err = np.abs(got64 - want64)
        ok = got64.shape == want64.shape and bool((err <= atol + rtol * np.abs(want64)).all())
        checks.append((name, ok))
        rep.log(f"  {'ok ' if ok else 'BAD'} {name}: max err {err.max() if err.size else 0:.3g}")

    def both(name, kern, size, make_args, read, want, rtol, atol=0.0):
        for k in (kern, fl.unchecked(kern)):
            try:
                args = make_args()
                k[k.prepare(*size)](*args)
                check(f"{name}{'' if k.bounds_checks else ' (unchecked)'}", read(args), want,
                      rtol, atol)
            except Exception:  # noqa: BLE001
                rep.log(traceback.format_exc())
                checks.append((name, False))

    n = 3000
    xh, yh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    last = lambda args: args[-1].numpy()  # noqa: E731
    both("vector_add", vector_add, (n,),
         lambda: (fl.asarray(xh), fl.asarray(yh), fl.full(n, np.nan, f32)), last,
         xh.astype(np.float64) + yh, 1e-6)
    both("saxpy", saxpy, (n,),
         lambda: (2.5, fl.asarray(xh), fl.asarray(yh), fl.full(n, np.nan, f32)), last,
         2.5 * xh.astype(np.float64) + yh, 1e-6, 1e-6)
    ah = rng.standard_normal((70, 45), np.float32)
    bt = rng.standard_normal((45, 70), np.float32)
    both("matrix_add", matrix_add, ((70, 45),),
         lambda: (fl.asarray(ah), fl.asarray(bt).T, fl.full((70, 45), np.nan, f32)), last,
         ah.astype(np.float64) + bt.T, 1e-6)
    ph = photograph()[::8, ::8].copy()
    both("sobel", sobel, (ph.shape,), lambda: (fl.asarray(ph), fl.full(ph.shape, np.nan, f32)),
         last, sobel_reference(ph), 1e-4, 1e-5)
    tr = rng.random((70, 45), np.float32)
    both("transpose", transpose, (launch_shape((45, 70)),),
         lambda: (fl.asarray(tr), fl.full((45, 70), np.nan, f32)), last, tr.T, 0.0)
    sm = (rng.standard_normal((5, SM_COLS)) * 4).astype(np.float32)
    e = np.exp(sm - sm.max(1, keepdims=True).astype(np.float64))
    both("row_softmax", row_softmax, (softmax_threads(5),),
         lambda: (fl.asarray(sm), fl.full(sm.shape, np.nan, f32)), last,
         e / e.sum(1, keepdims=True), 2e-5, 1e-7)
    rh = rng.random(20000, np.float32)
    total = lambda args: args[-1].numpy()  # noqa: E731
    for size in (1, 1000, 20000):
        part = rh[:size]
        both(f"block_reduce n={size}", block_reduce, (launch_threads(size),),
             lambda part=part: (fl.asarray(part), fl.zeros(1, f32)), total,
             [part.astype(np.float64).sum()], 1e-5)
    img = tiled_photo((1, 1))[:50].ravel()
    for size in (1, 5000, img.size):  # one SM: two blocks, so the unrolled loop runs too
        part = img[:size]
        both(f"histogram n={size}", histogram, (hist_threads(size, 1),),
             lambda part=part: (fl.asarray(part), fl.zeros(BINS, u32)), last,
             np.bincount(part, minlength=BINS), 0.0)
    sa = rng.random((40, 24), np.float32) - 0.5
    sb = rng.random((24, 36), np.float32) - 0.5
    both("sgemm", sgemm, (sgemm_shape(40, 36),),
         lambda: (fl.asarray(sa), fl.asarray(sb), fl.full((40, 36), np.nan, f32)), last,
         sa.astype(np.float64) @ sb, 1e-5, 1e-6)
    kern, why = load_hgemm()
    if kern is None:
        rep.log(f"  -- hgemm: {why}")
    else:
        ha = (rng.random((128, 64)) - 0.5).astype(np.float16)
        hb = (rng.random((64, 128)) - 0.5).astype(np.float16)
        from examples.hgemm import launch_threads as hgemm_threads
        both("hgemm", kern, (hgemm_threads(kern.tiles, 128, 128),),
             lambda: (fl.asarray(ha), fl.asarray(hb), fl.full(128 * 128, np.nan, fl.f16), 128),
             lambda args: args[2].numpy().reshape(128, 128), ha.astype(np.float64) @ hb, 1e-2,
             1e-2)
    sh = rng.integers(-1000, 1000, 70000).astype(np.int32)
    for size in (1, 1500, 70000):  # one chunk; two; recursion over 69 chunk sums
        try:
            out = scan(fl.asarray(sh[:size]), fl.full(size, -(2**31), fl.i32))
            check(f"prefix_sum scan n={size}", out.numpy(), np.cumsum(sh[:size], dtype=np.int32),
                  0)
        except Exception:  # noqa: BLE001
            rep.log(traceback.format_exc())
            checks.append((f"prefix_sum scan n={size}", False))
    rep.log("\n  the table, on made-up numbers:")
    fake = Report(None)
    copy = {"ms": 8 * COPY_N / 4.2e9}  # 4.2 TB/s
    fake.row("reduce (made up)", {"ms": 0.3}, {"torch.sum": {"ms": 0.31}}, "GB/s", 4 * REDUCE_N,
             copy, ">= 90% copy")
    fake.row("gemm (made up)", {"ms": 2.0, "ok": False, "err": 1.0},
             {"torch": {"ms": 1.0}}, "TFLOP/s", 2 * 4096.0 ** 3)
    fake.bounds.append({"case": "vector_add (made up)", "checked_ms": 0.38, "unchecked_ms": 0.37,
                        "overhead_pct": 2.7})
    fake.table()
    bad = [name for name, ok in checks if not ok]
    rep.log(f"\ndry run: {len(checks) - len(bad)}/{len(checks)} checks passed"
            + (f"; FAILED: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


# -- main -----------------------------------------------------------------------------------------

def environment(torch) -> dict:
    info = {"python": platform.python_version(), "fearless": fl.__version__,
            "numpy": np.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "cuda (torch)": torch.version.cuda}
    for name in ("triton", "cupy"):
        try:
            info[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001
            info[name] = f"unavailable: {type(exc).__name__}"
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True, capture_output=True)
    info["commit"] = git.stdout.strip() or "unknown"
    return info


def gpu_run(rep: Report, sections: set) -> None:
    import torch
    fl.set_backend("cuda")
    rep.data["env"] = environment(torch)
    rep.log("env: " + ", ".join(f"{k} {v}" for k, v in rep.data["env"].items()))
    clock = Clock(torch)
    copy = None
    try:
        copy = bench_copy(rep, clock, torch)
    except Exception:  # noqa: BLE001
        rep.fail("copy")
    steps = {"reduce": lambda: bench_reduce(rep, clock, torch, copy),
             "transpose": lambda: bench_transpose(rep, clock, torch, copy),
             "histogram": lambda: bench_histogram(rep, clock, torch),
             "sgemm": lambda: bench_sgemm(rep, clock, torch),
             "hgemm": lambda: bench_hgemm(rep, clock, torch),
             "softmax": lambda: bench_softmax(rep, clock, torch, copy),
             "scan": lambda: bench_scan(rep, clock, torch, copy),
             "bounds": lambda: bench_bounds(rep, clock, torch)}
    for name, step in steps.items():
        if name in sections:
            rep.log(f"\n[{name}]")
            try:
                step()
            except Exception:  # noqa: BLE001
                rep.fail(name)
            torch.cuda.empty_cache()
            rep.save()
    rep.table()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: check every fearless kernel on the CPU backend at tiny sizes")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help="comma list of " + ", ".join(SECTIONS) + " (copy always runs)")
    args = ap.parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if sections - set(SECTIONS):
        ap.error(f"unknown sections: {', '.join(sorted(sections - set(SECTIONS)))}")
    out_dir = Path(os.environ.get("OUT") or "bench_out")
    rep = Report(out_dir)
    status = dry_run(rep) if args.dry_run else (gpu_run(rep, sections) or 0)
    return rep.finish(status)


if __name__ == "__main__":
    sys.exit(main())
