"""Tile track benchmark on the GPU: fearless tile kernels against cuBLAS/PyTorch, Triton and cuTile.

Sections (each fails alone: its traceback is printed and the run goes on):

1. gemm: fp16 4096^3 and 8192^3, bf16 4096^3. ``examples.tile_gemm.matmul`` with output tiles
   128x128, 256x128, 128x256 (bk 64; the large two with fearless's default of eight worker
   warps), each also on a second kernel object with the entry hint ``num_cta_in_cga=2``
   (``ft.kernel(matmul.fn, hints=...)``), each one tile per block and persistent
   (``schedule=ft.persistent()``: one tile block per SM, grouped order), against ``torch.matmul``
   (cuBLAS), a Triton matmul (autotuned; ``tile_peers.py``), and cuTile Python when ``cuda.tile``
   imports. TFLOP/s and % of cuBLAS.
2. norm: row softmax and layer norm over 8192x8192 f32, tile rows 1, 2, 4, against torch
   (``torch.softmax``, ``F.layer_norm``) and Triton kernels (``tile_peers.py``). ms, GB/s (8*m*n bytes)
   and % of copy bandwidth (``dst.copy_(src)`` over 2^28 f32, measured in the same run).
3. add: vector add over 2^27 f32, tiles 1024 and 4096, against torch.add, Triton and the copy.
4. jit: per kernel, in a child process: the first call (a tileiras compile into a fresh cache,
   or, without tileiras, a disk-cache load, and the log says which), the first call of a new
   kernel object (disk hit) and a warm call.
5. chain: N = 1, 10, 100, 1000 launches of a small elementwise kernel (2048x2048 f16): eager
   (each op synced), one ``.then()`` chain and one ``fl.zip`` synced once, a replayed CUDA graph
   (``fl.graph``): microseconds per kernel and the graph's gain.

Timing: CUDA events on the legacy default stream (fearless's and torch's), warm-up, many
iterations, the median of several repetitions, no L2 flush. Each fearless case has two times:
``call``, one lazy operation built and synced per iteration (the product's real cost), and
``kernel``, the device time per launch of a ``.then()`` chain synced once. For device times the
GPU first runs ``torch.cuda._sleep`` long enough for the host to enqueue everything, then the
start event; the end event is recorded right after the last enqueue (for fearless, from the
chain's last callback), so host gaps are excluded; a case where the host still fell behind is
marked host-bound. Peers are timed the same way. Ratios are peer time / fearless time (above 1:
fearless is faster).

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_tile.py [--sections gemm,norm,add,jit,chain] [--quick]
Output: a table at the end; ``$OUT`` (default ./bench_out) gets bench_tile.json and bench_tile.log.
Without a GPU, ``--dry-run`` runs every fearless kernel here once at tiny sizes on the CPU
backend against NumPy, and lowers the GPU specialisations to Tile IR bytecode (no tileiras).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import bf16, f16, f32
from fearless import tile as ft
from fearless.config import CONFIG
from examples.tile_gemm import matmul
from examples.tile_layernorm import layernorm
from examples.tile_softmax import softmax
from examples.tile_vector_add import add

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tile_peers, beside this script
from run_log import EventClock, RunLog  # noqa: E402
from tile_peers import cutile_matmul, triton  # noqa: E402 - the Triton/cuTile peers
if triton is not None:
    from tile_peers import tr_add, tr_layernorm, tr_matmul, tr_softmax

SECTIONS = ("jit", "gemm", "norm", "add", "chain")
GEMM_SHAPES = ((f16, 4096), (f16, 8192), (bf16, 4096))
GEMM_CONFIGS = tuple((tile, 64, cga, persistent)   # (output tile, bk, num_cta_in_cga=2,
                     for tile in ((128, 128), (256, 128), (128, 256))   # persistent schedule)
                     for cga in (False, True) for persistent in (False, True))
NORM_M = NORM_N = 8192
NORM_ROWS = (1, 2, 4)
ADD_N, ADD_TILES = 1 << 27, (1024, 4096)
COPY_N = 1 << 28
CHAIN_SHAPE, CHAIN_TILE, CHAIN_NS = (2048, 2048), (64, 64), (1, 10, 100, 1000)
TARGET_MS = 100.0   # device time aimed at per repetition (--quick: 30)
REPS = 5            # repetitions, of which the median is kept (--quick: 3)


@ft.kernel
def scale(y: ft.Out[f16], x: ft.In[f16], g: ft.In[f16]):
    """y = x * g with one gain per column: the small elementwise kernel of the chains."""
    _, j = y.tile_index
    y.store(ft.load_like(x, y) * ft.load(g, (j,), (y.tile_shape[1],)))


cga_matmul = ft.kernel(matmul.fn, hints={"sm_90": {"num_cta_in_cga": 2}})


def gemm_kernel(cga: bool):
    return cga_matmul if cga else matmul


# -- fearless operations -------------------------------------------------------------------------

def chain(make, part, n: int):
    """One DeviceOperation running ``make(part)`` n times in a ``.then()`` chain; ``make`` takes
    the Out partition and returns a kernel call (whose result starts with that partition)."""
    op = make(part)
    for _ in range(n - 1):
        op = op.then(lambda r: make(r[0]))
    return op


def allow_depth(n: int) -> None:
    """Building, running and releasing a chain of n recurse n Python frames deep."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * n + 2000))


class Owned:
    """An Out partition threaded through successive synced calls (``sync`` gives it back)."""

    def __init__(self, make, part):
        self.make, self.part = make, part

    def call(self):
        self.part = self.make(self.part).sync()[0]

    def run_chain(self, n: int, mark=None):
        op = chain(self.make, self.part, n)
        if mark is not None:
            op = op.then(lambda r: (mark(), r)[1])
        self.part = op.sync()[0]

    def done(self):
        return self.part.unpartition()


def run_once(make, part) -> np.ndarray:
    owned = Owned(make, part)
    owned.call()
    return owned.done().numpy()


# -- timing --------------------------------------------------------------------------------------

class Clock(EventClock):
    """CUDA events on the legacy default stream, where torch and fearless both enqueue."""

    def calls(self, call, n: int, reps: int | None = None) -> float:
        """Median ms per ``call()`` over repetitions of n calls (host cost included)."""
        call()
        self.torch.cuda.synchronize()
        out = []
        for _ in range(reps or REPS):
            s, e = self._event(), self._event()
            s.record()
            for _ in range(n):
                call()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) / n)
        return statistics.median(out)

    def device(self, run, n: int, reps: int | None = None) -> tuple[float, bool]:
        """(median device ms per kernel, host-bound). ``run(n, mark)`` enqueues n kernels and
        calls ``mark()`` right after enqueuing the last one (it may sync afterwards)."""
        t0 = time.perf_counter()
        run(n, lambda: None)
        self.torch.cuda.synchronize()
        cover = 1.5 * (time.perf_counter() - t0) * 1e3 + 2.0
        out, late = [], False
        for _ in range(reps or REPS):
            for _attempt in range(3):
                ms, was_late = self._behind_sleep(run, n, cover)
                if not was_late:
                    break
                cover *= 2
            late |= was_late
            out.append(ms / n)
        return statistics.median(out), late

    def _behind_sleep(self, run, n: int, cover_ms: float) -> tuple[float, bool]:
        s, e, seen = self._event(), self._event(), {}

        def mark():
            seen["late"] = s.query()  # the GPU reached the start before the host was done
            e.record()
        self.torch.cuda._sleep(int(min(cover_ms, 5000.0) * self.cycles_per_ms))
        s.record()
        run(n, mark)
        e.synchronize()
        return s.elapsed_time(e), bool(seen.get("late"))


def count_for(ms_each: float, target: float | None = None, hi: int = 2000) -> int:
    """Iterations that fill about ``target`` ms (TARGET_MS by default)."""
    return int(min(hi, max(3, (target or TARGET_MS) / max(ms_each, 1e-4))))


def time_fearless(clock: Clock, owned: Owned, kernel_n: int | None = None) -> dict:
    est = clock.calls(owned.call, 3, reps=1)
    call = clock.calls(owned.call, count_for(est, TARGET_MS / 2, hi=200))
    n = kernel_n or count_for(est, hi=400)
    allow_depth(n)
    kernel, late = clock.device(lambda k, mark: owned.run_chain(k, mark), n)
    return {"call_ms": call, "kernel_ms": kernel, "kernel_n": n, "host_bound": late}


def time_peer(clock: Clock, fn) -> dict:
    def run(n, mark):
        for _ in range(n):
            fn()
        mark()
    ms, late = clock.device(run, count_for(clock.calls(fn, 3, reps=1)))
    return {"kernel_ms": ms, "host_bound": late}


# -- recording -----------------------------------------------------------------------------------

class Report(RunLog):
    """Rows for the final table, everything for the JSON, and the log as it goes."""

    def __init__(self, out_dir: Path | None, gemm_shapes: set | None = None):
        super().__init__(out_dir, "bench_tile")
        self.gemm_shapes = gemm_shapes   # "f16:4096", ...: the GEMM shapes to run (None: all)

    def row(self, case: str, fearless: dict, peers: dict, unit: str, work: float) -> dict:
        """``work`` per launch: flops (TFLOP/s) or bytes (GB/s); 0 for plain times."""
        per_ms = {"TFLOP/s": 1e9, "GB/s": 1e6}.get(unit)
        fk = fearless.get("kernel_ms")
        times = {k: v["kernel_ms"] for k, v in peers.items() if v and v.get("kernel_ms")}
        rate = (lambda ms: work / (ms * per_ms)) if per_ms else (lambda ms: None)
        r = {"case": case, "fearless": fearless, "peers": peers, "unit": unit,
             "fearless_rate": rate(fk) if fk else None,
             "peer_rate": {k: rate(t) for k, t in times.items()},
             "vs": {k: t / fk for k, t in times.items()} if fk else {}}
        self.rows.append(r)
        if per_ms:
            flags = " [host-bound]" if fearless.get("host_bound") else ""
            flags += "" if fearless.get("ok", True) else f" WRONG (err {fearless.get('err')})"
            self.log(f"  {case}: fearless kernel {fk:.4g} ms = {r['fearless_rate']:.4g} {unit}"
                     f" (call {fearless['call_ms']:.4g} ms){flags} | "
                     + "  ".join(f"{k} {t:.4g} ms" for k, t in times.items()))
        return r

    def table(self) -> None:
        self.log("\n" + "=" * 110)
        self.log(f"{'case':<42}{'fearless ms':>12}   {'peers ms':<36}ratio")
        for r in self.rows:
            fk = r["fearless"].get("kernel_ms")
            peers = " ".join(f"{k}={t:.3g}" for k, t in
                             ((k, v.get("kernel_ms")) for k, v in r["peers"].items()) if t)
            real = [(k, v) for k, v in r["vs"].items() if k != "copy"]
            best = min(real, key=lambda kv: kv[1], default=None)
            ratio = f"{best[1]:.2f}x {best[0]}" if best else ""
            if "cuBLAS" in r["vs"]:
                ratio = f"{100 * r['vs']['cuBLAS']:.0f}% of cuBLAS"
            if "copy" in r["vs"]:
                ratio += f", {100 * r['vs']['copy']:.0f}% of copy"
            cell = f"{fk:.4g}" if fk else "n/a"
            self.log(f"{r['case']:<42}{cell:>12}   {peers:<36}{ratio}")
        self.log("fearless: device ms per launch (chains: graph replay, host included, per "
                 "kernel). ratio: the fastest peer's\ntime / fearless's (above 1: fearless is "
                 "faster); GEMM: % of cuBLAS; % of copy: of the copy bandwidth")


def peer(rep: Report, clock: Clock, peers: dict, name: str, fn, err=None) -> None:
    """Time ``fn`` as peer ``name`` (``err()``: its error, checked after the timing)."""
    try:
        peers[name] = time_peer(clock, fn)
        if err is not None:
            peers[name]["err"] = err()
    except Exception:  # noqa: BLE001 - a peer's failure leaves its column out
        rep.fail(name)


def fearless_case(rep: Report, clock: Clock, case: str, make, out, tile, peers: dict, unit: str,
                  work: float, check, kernel_n: int | None = None,
                  schedule=None) -> dict | None:
    """Time ``make`` writing the torch tensor ``out`` partitioned by ``tile`` (and
    ``schedule``); ``check(out)`` gives (ok, error) afterwards."""
    try:
        owned = Owned(make, fl.asarray(out).partition(tile, schedule=schedule))
        owned.call()  # the compile (or disk-cache load) stays out of the timing
        res = time_fearless(clock, owned, kernel_n)
        owned.done()
        res["ok"], res["err"] = check(out)
        return rep.row(case, res, peers, unit, work)
    except Exception:  # noqa: BLE001 - one case must not stop the run
        rep.fail(f"{case} (fearless)")
        return None


# -- section 1: GEMM -----------------------------------------------------------------------------

def bench_gemm(rep: Report, clock: Clock, torch, quick: bool) -> None:
    ct_run, ct_why = cutile_matmul()
    rep.data["cutile"] = ct_why or "installed"
    rep.log(f"cuTile Python: {ct_why or 'installed'}")
    for dt, size in GEMM_SHAPES:
        if rep.gemm_shapes and f"{dt.name}:{size}" not in rep.gemm_shapes:
            continue
        try:
            gemm_case(rep, clock, torch, dt, size, ct_run, quick)
        except Exception:  # noqa: BLE001
            rep.fail(f"gemm {dt.name} {size}")
        rep.save()


def gemm_case(rep: Report, clock: Clock, torch, dt, size: int, ct_run, quick: bool) -> None:
    m = n = k = size
    case = f"gemm {dt.name} {size}^3"
    rep.log(f"\n[{case}]")
    gen = torch.Generator(device="cuda").manual_seed(0)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt.name]
    a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=tdt, generator=gen)
    ref, c = torch.matmul(a, b), torch.empty(m, n, device="cuda", dtype=tdt)
    peers: dict = {}
    peer(rep, clock, peers, "cuBLAS", lambda: torch.matmul(a, b, out=c))
    if triton is not None:
        def grid(meta):
            return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
        peer(rep, clock, peers, "triton", lambda: tr_matmul[grid](
            a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride()), lambda: rel_err(c, ref))
    if ct_run is not None:
        peer(rep, clock, peers, "cutile", lambda: ct_run(a, b, c), lambda: rel_err(c, ref))
    fa, fb = fl.asarray(a), fl.asarray(b)
    bound = 8 * (2.0 ** -11 if dt is f16 else 2.0 ** -8)  # relative to max |C|: a few roundings
    rows = []
    for tile, bk, cga, persistent in GEMM_CONFIGS[:2] if quick else GEMM_CONFIGS:
        kern = gemm_kernel(cga)
        rows.append(fearless_case(
            rep, clock, f"{case} {tile[0]}x{tile[1]} bk{bk}{' cga2' if cga else ''}"
                        f"{' persistent' if persistent else ''}",
            lambda p, kern=kern, bk=bk: kern(p, fa, fb, bk=bk),
            torch.full_like(ref, float("nan")), tile, peers, "TFLOP/s", 2.0 * m * n * k,
            lambda out: (rel_err(out, ref) <= bound, rel_err(out, ref)),
            kernel_n=10 if size >= 8192 else 20,
            schedule=ft.persistent() if persistent else None))
    rep.log("  peers' max |error| / max |C|: " + ", ".join(
        f"{k} {v['err']:.1e}" for k, v in peers.items() if "err" in v))
    good = [r for r in rows if r and r["fearless"]["ok"]]
    if good and "cuBLAS" in peers:
        best = max(good, key=lambda r: r["fearless_rate"])
        rep.log(f"  best: {best['case']}: {best['fearless_rate']:.0f} TFLOP/s = "
                f"{100 * best['vs']['cuBLAS']:.0f}% of cuBLAS "
                f"({best['peer_rate']['cuBLAS']:.0f} TFLOP/s)")


def rel_err(got, want) -> float:
    """max |got - want| / max |want|, in f32."""
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


# -- sections 2 and 3: bandwidth -----------------------------------------------------------------

def bench_copy(rep: Report, clock: Clock, torch) -> dict:
    src = torch.randn(COPY_N, device="cuda")
    dst = torch.empty_like(src)
    res = time_peer(clock, lambda: dst.copy_(src))
    res["GB/s"] = 8 * COPY_N / (res["kernel_ms"] * 1e6)
    rep.data["copy"] = res
    rep.log(f"copy bandwidth (torch dst.copy_(src), 2^28 f32): {res['GB/s']:.0f} GB/s")
    return res


def copy_peer(copy: dict | None, nbytes: int) -> dict:
    """The pseudo-peer "copy": moving ``nbytes`` at the measured copy bandwidth."""
    return {"copy": {"kernel_ms": nbytes / (copy["GB/s"] * 1e6), "derived": True}} if copy else {}


def bench_norms(rep: Report, clock: Clock, torch, copy: dict | None) -> None:
    import torch.nn.functional as F
    m, n, eps = NORM_M, NORM_N, 1e-5
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(m, n, device="cuda", generator=gen) * 4
    w, b = (torch.randn(n, device="cuda", generator=gen) for _ in "wb")
    out = torch.empty_like(x)
    width = 1 << (n - 1).bit_length()
    fx, fw, fb = fl.asarray(x), fl.asarray(w), fl.asarray(b)
    cases = (
        ("softmax", lambda: torch.softmax(x, dim=-1),
         lambda: tr_softmax[(m,)](out, x, n, x.stride(0), BLOCK=width),
         lambda p: softmax(p, fx), 2e-6),
        ("layernorm", lambda: F.layer_norm(x, (n,), w, b, eps),
         lambda: tr_layernorm[(m,)](out, x, w, b, n, x.stride(0), eps, BLOCK=width),
         lambda p: layernorm(p, fx, fw, fb, eps), 2e-5),
    )
    for name, torch_fn, triton_fn, make, tol in cases:
        rep.log(f"\n[{name} {m}x{n} f32]")
        ref = torch_fn()
        bound = tol * max(1.0, float(ref.abs().max()))
        peers: dict = {}
        peer(rep, clock, peers, "torch", torch_fn)
        if triton is not None:
            peer(rep, clock, peers, "triton", triton_fn, lambda ref=ref: abs_check(ref, 0)(out)[1])
        peers.update(copy_peer(copy, 8 * m * n))
        for rows in NORM_ROWS:
            fearless_case(rep, clock, f"{name} {m}x{n} rows={rows}", make,
                          torch.full_like(x, float("nan")), (rows, width), peers, "GB/s",
                          8 * m * n, abs_check(ref, bound))
            rep.save()


def abs_check(ref, bound: float):
    """check(out) -> (max |out - ref| <= bound, that maximum)."""
    def check(out):
        err = float((out - ref).abs().max())
        return err <= bound, err
    return check


def bench_add(rep: Report, clock: Clock, torch, copy: dict | None) -> None:
    n = ADD_N
    rep.log(f"\n[vector add 2^{n.bit_length() - 1} f32]")
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z, ref = torch.empty_like(x), x + y
    peers: dict = {}
    peer(rep, clock, peers, "torch", lambda: torch.add(x, y, out=z))
    if triton is not None:
        grid = (triton.cdiv(n, 1024),)
        peer(rep, clock, peers, "triton", lambda: tr_add[grid](x, y, z, n, BLOCK=1024))
    peers.update(copy_peer(copy, 12 * n))
    fx, fy = fl.asarray(x), fl.asarray(y)
    for tile in ADD_TILES:
        fearless_case(rep, clock, f"vector add 2^27 tile={tile}", lambda p: add(p, fx, fy),
                      torch.full_like(x, float("nan")), tile, peers, "GB/s", 12 * n,
                      lambda out: (bool(torch.equal(out, ref)), float((out - ref).abs().max())))
        rep.save()


# -- section 4: JIT, in a child process ----------------------------------------------------------

def jit_cases() -> dict:
    """name -> build() -> (kernel, Out partition, inputs, constants), at sizes that specialise
    like the benchmark's (dtypes, tile shapes, 16-divisible extents and strides, so the same
    disk-cache keys) but cost less to allocate."""
    def ones(shape, dt):
        return fl.asarray(np.ones(shape, dt.numpy))

    def gemm(kern):
        a = ones((512, 512), f16)
        return kern, fl.zeros((512, 512), f16).partition((128, 128)), (a, a), {"bk": 64}

    def rows(kern, *extra):
        x = ones((64, NORM_N), f32)
        return kern, fl.zeros((64, NORM_N), f32).partition((1, NORM_N)), (x, *extra), {}
    return {
        "matmul 128x128 bk64": lambda: gemm(matmul),
        "matmul 128x128 bk64 cga2": lambda: gemm(cga_matmul),
        "softmax rows=1": lambda: rows(softmax),
        "layernorm rows=1": lambda: rows(layernorm, ones(NORM_N, f32), ones(NORM_N, f32), 1e-5),
        "vector add 1024": lambda: (add, fl.zeros(1 << 16, f32).partition(1024),
                                    (ones(1 << 16, f32), ones(1 << 16, f32)), {}),
        "scale 64x64": lambda: (scale, fl.zeros(CHAIN_SHAPE, f16).partition(CHAIN_TILE),
                                (ones(CHAIN_SHAPE, f16), ones(CHAIN_SHAPE[1], f16)), {}),
    }


def jit_probe(name: str) -> dict:
    """In the child: ms of the first call, of a new kernel object's first call (a disk hit) and
    of a warm call (median of 20), each built and synced."""
    kernel, part, args, consts = jit_cases()[name]()
    fl.synchronize()  # the context and the inputs are ready before the clock starts

    def once(k, p):
        t0 = time.perf_counter()
        p = k(p, *args, **consts).sync()[0]
        return p, (time.perf_counter() - t0) * 1e3
    part, first = once(kernel, part)
    part, disk = once(ft.kernel(kernel.fn, hints=kernel.hints or None), part)
    warm = []
    for _ in range(20):
        part, ms = once(kernel, part)
        warm.append(ms)
    return {"first_ms": first, "new_object_ms": disk, "warm_ms": statistics.median(warm)}


def tileiras_status() -> tuple[bool, str]:
    from fearless.backends.tileir import tileiras
    try:
        tc = tileiras.find()
    except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
        return False, f"unusable ({exc})"
    return (False, "not installed") if tc is None else (True, f"{tc.fingerprint()}, {tc.tileiras}")


def bench_jit(rep: Report, backend: str = "cuda") -> None:
    have, what = tileiras_status()
    mode = ("compile to IR only (cpu backend)" if backend == "cpu" else
            "a tileiras compile into a fresh cache" if have else
            "a disk-cache LOAD, not a compile (no tileiras here: the cubins must be cached)")
    rep.log(f"\n[JIT per kernel, each in a child process] tileiras: {what}\n"
            f"  first call = {mode}")
    env = dict(os.environ, FEARLESS_BACKEND=backend)
    if have and backend == "cuda":
        env["FEARLESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="fearless-bench-jit-")
    results = {}
    for name in jit_cases():
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--jit-probe", name],
                                  env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"child exited {proc.returncode}:\n{proc.stderr[-3000:]}")
            r = results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            rep.log(f"  {name:<26} first call {r['first_ms']:8.1f} ms   new object "
                    f"{r['new_object_ms']:7.2f} ms   warm call {r['warm_ms'] * 1e3:7.0f} us")
        except Exception:  # noqa: BLE001
            rep.fail(f"jit {name}")
    rep.data["jit"] = {"tileiras": what, "first_call": mode, "kernels": results}


# -- section 5: chains ---------------------------------------------------------------------------

def bench_chains(rep: Report, clock: Clock, torch) -> None:
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(CHAIN_SHAPE, device="cuda", generator=gen).half()
    g = torch.rand(CHAIN_SHAPE[1], device="cuda", generator=gen).half()
    ref, ty = x * g, torch.empty_like(x)
    fx, fg = fl.asarray(x), fl.asarray(g)
    make = lambda p: scale(p, fx, fg)  # noqa: E731
    torch_us = 1e3 * time_peer(clock, lambda: torch.mul(x, g, out=ty))["kernel_ms"]
    rep.log(f"\n[chains of scale {CHAIN_SHAPE[0]}x{CHAIN_SHAPE[1]} f16, tile {CHAIN_TILE}] us per"
            f" kernel (torch.mul back to back: {torch_us:.1f} us)")
    out: dict = {"torch_us": torch_us}
    for n in CHAIN_NS:
        y = torch.full_like(x, float("nan"))
        try:
            r = out[n] = chain_case(clock, torch, Owned(make, fl.asarray(y).partition(CHAIN_TILE)),
                                    make, n)
            r["ok"] = bool(torch.equal(y, ref))
            rep.log(f"  N={n:<5} eager {r['eager_us']:7.1f}  .then {r['then_us']:7.1f}  zip "
                    f"{r['zip_us']:7.1f}  graph {r['graph_us']:7.1f} (device {r['device_us']:5.1f})"
                    f"  graph gain {r['eager_us'] / r['graph_us']:5.1f}x vs eager, "
                    f"{r['then_us'] / r['graph_us']:5.1f}x vs .then{'' if r['ok'] else ' WRONG'}")
            rep.row(f"chain N={n}: graph vs eager, .then", {"kernel_ms": r["graph_us"] / 1e3},
                    {"eager": {"kernel_ms": r["eager_us"] / 1e3},
                     "then": {"kernel_ms": r["then_us"] / 1e3}}, "us", 0)
        except Exception:  # noqa: BLE001
            rep.fail(f"chain N={n}")
        rep.save()
    rep.data["chains"] = out


def chain_case(clock: Clock, torch, owned: Owned, make, n: int) -> dict:
    """Microseconds per kernel of n launches: eager, one .then chain, one zip, a graph replay
    (host included) and the graph's device time."""
    allow_depth(n)
    reps = 3 if n >= 1000 else REPS
    r = {"eager_us": 1e3 * clock.calls(owned.call, max(n, 20), reps),
         "then_us": 1e3 * clock.calls(lambda: owned.run_chain(n), 1, reps) / n,
         "zip_us": zip_us(clock, torch, make, n, reps)}
    graph = fl.graph(chain(make, owned.part, n))
    try:
        r["graph_us"] = 1e3 * clock.calls(graph.sync, 1, reps) / n

        def replay(_, mark):
            graph.launch().then(lambda _: mark()).sync()
        dev, r["device_host_bound"] = clock.device(replay, 1, reps)
        r["device_us"] = 1e3 * dev / n
    finally:
        owned.part = graph.release()[0]
    owned.done()
    return r


def zip_us(clock: Clock, torch, make, n: int, reps: int) -> float:
    """us per kernel of one ``fl.zip`` of n launches, synced once; each launch has its own
    output, since one pending operation cannot hold a partition twice."""
    parts = [fl.asarray(torch.empty(CHAIN_SHAPE, device="cuda", dtype=torch.float16))
             .partition(CHAIN_TILE) for _ in range(n)]

    def run():
        parts[:] = [r[0] for r in fl.zip(*(make(p) for p in parts)).sync()]
    ms = clock.calls(run, 1, reps)
    for p in parts:
        p.unpartition()
    return 1e3 * ms / n


# -- dry run: every fearless kernel here, on the CPU backend -------------------------------------

def dry_run(rep: Report) -> int:
    fl.set_backend("cpu")
    rng = np.random.default_rng(0)
    checks = []

    def check(name, got, want, rtol, atol=0.0):
        err = np.abs(got.astype(np.float64) - want)
        checks.append((name, bool((err <= atol + rtol * np.abs(want)).all())))
        rep.log(f"  {'ok ' if checks[-1][1] else 'BAD'} {name}: max err {err.max():.3g}")

    m, n, k = 200, 136, 100  # edge tiles everywhere
    for dt in (f16, bf16):
        ah = rng.standard_normal((m, k), np.float32).astype(dt.numpy)
        bh = rng.standard_normal((k, n), np.float32).astype(dt.numpy)
        a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
        unit = 2.0 ** -11 if dt is f16 else 2.0 ** -8
        fa, fb = fl.asarray(ah), fl.asarray(bh)
        for tile, bk, cga, persistent in GEMM_CONFIGS:
            kern = gemm_kernel(cga)
            schedule = ft.persistent(blocks=3) if persistent else None
            got = run_once(lambda p, kern=kern, bk=bk, fa=fa, fb=fb: kern(p, fa, fb, bk=bk),
                           fl.full((m, n), np.nan, dt).partition(tile, schedule=schedule))
            check(f"matmul {dt.name} {tile} bk{bk}{' cga2' if cga else ''}"
                  f"{' persistent' if persistent else ''}", got, a64 @ b64,
                  unit, (np.abs(a64) @ np.abs(b64)) * (k * 2.0 ** -23 + unit))

    xh = rng.standard_normal((6, 1000), np.float32) * 4
    wh, bh = rng.standard_normal(1000, np.float32), rng.standard_normal(1000, np.float32)
    x64 = xh.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    d = x64 - x64.mean(1, keepdims=True)
    fx, fw, fb = fl.asarray(xh), fl.asarray(wh), fl.asarray(bh)
    for rows in NORM_ROWS:
        def out(rows=rows):
            return fl.full(xh.shape, np.nan, f32).partition((rows, 1024))
        check(f"softmax rows={rows}", run_once(lambda p: softmax(p, fx), out()),
              e / e.sum(1, keepdims=True), 2e-6, 1e-9)
        check(f"layernorm rows={rows}", run_once(lambda p: layernorm(p, fx, fw, fb, 1e-5), out()),
              d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * wh + bh, 1e-5,
              1e-5 * (np.abs(wh) + 1))

    vx, vy = rng.standard_normal(5000, np.float32), rng.standard_normal(5000, np.float32)
    for tile in ADD_TILES:
        check(f"vector add tile={tile}",
              run_once(lambda p: add(p, fl.asarray(vx), fl.asarray(vy)),
                       fl.full(5000, np.nan, f32).partition(tile)), vx.astype(np.float64) + vy,
              6e-8)
    dry_chains(rng, check)
    dry_lower(rep, checks)
    rep.log("\n  the table, on made-up numbers:")
    fake = Report(None)
    fake.row("gemm f16 64^3", {"kernel_ms": 1.0, "call_ms": 1.1}, {"cuBLAS": {"kernel_ms": 0.9},
             "triton": {"kernel_ms": 1.2}}, "TFLOP/s", 2 * 64.0 ** 3)
    fake.row("add", {"kernel_ms": 1.0, "call_ms": 1.2, "ok": False, "err": 1.0},
             {"torch": {"kernel_ms": 0.8}, "copy": {"kernel_ms": 0.5}}, "GB/s", 12e6)
    fake.row("chain N=10", {"kernel_ms": 0.01}, {"eager": {"kernel_ms": 0.05}}, "us", 0)
    fake.table()
    bad = [name for name, ok in checks if not ok]
    rep.log(f"\ndry run: {len(checks) - len(bad)}/{len(checks)} checks passed"
            + (f"; FAILED: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def dry_chains(rng, check) -> None:
    """The chain section's kernel and its ways of running (1000 long only on the GPU)."""
    shape, tile = (96, 80), (32, 32)
    xh = rng.standard_normal(shape, np.float32).astype(np.float16)
    gh = rng.random(shape[1], np.float32).astype(np.float16)
    fx, fg = fl.asarray(xh), fl.asarray(gh)
    make = lambda p: scale(p, fx, fg)  # noqa: E731
    owned = Owned(make, fl.full(shape, np.nan, f16).partition(tile))
    owned.call()
    for n in (1, 10, 100):
        allow_depth(n)
        owned.run_chain(n, mark=lambda: None)
        graph = fl.graph(chain(make, owned.part, n))
        graph.sync()
        graph.launch().then(lambda _: None).sync()
        owned.part = graph.release()[0]
    parts = [fl.full(shape, np.nan, f16).partition(tile) for _ in range(10)]
    zipped = fl.zip(*(make(p) for p in parts)).sync()
    want = (xh * gh).astype(np.float64)  # one f16 rounding, as in the kernel
    check("scale: eager, .then chains, graphs", owned.done().numpy(), want, 0.0)
    check("scale: fl.zip", zipped[-1][0].unpartition().numpy(), want, 0.0)


def dry_lower(rep: Report, checks: list) -> None:
    """Lower each GPU specialisation to Tile IR bytecode (no tileiras needed), so that a
    lowering error (a tile shape, a hint) shows here rather than on the GPU."""
    from fearless.ir import types as T

    def view(dt, ndim, tile=None, schedule=None):
        return T.TensorView(dt, ndim, T.Role.OUT if tile else T.Role.IN, tile,
                            T.Layout(16, (16,) * ndim, (16,) * (ndim - 1) + (1,), True),
                            schedule)
    cases = [(f"matmul {dt.name} {tile}{' cga2' if cga else ''}"
              f"{' persistent' if persistent else ''}", gemm_kernel(cga),
              (view(dt, 2, tile, T.Persistent() if persistent else None), view(dt, 2),
               view(dt, 2)), {"bk": bk})
             for dt in (f16, bf16) for tile, bk, cga, persistent in GEMM_CONFIGS]
    for rows in NORM_ROWS:
        out = view(f32, 2, (rows, NORM_N))
        cases += [(f"softmax rows={rows}", softmax, (out, view(f32, 2)), {}),
                  (f"layernorm rows={rows}", layernorm,
                   (out, view(f32, 2), view(f32, 1), view(f32, 1), T.Scalar(f32)), {})]
    cases += [(f"vector add {tile}", add, (view(f32, 1, (tile,)), view(f32, 1), view(f32, 1)), {})
              for tile in ADD_TILES]
    cases.append(("scale", scale, (view(f16, 2, CHAIN_TILE), view(f16, 2), view(f16, 1)), {}))
    rep.log("\n  lowering the GPU specialisations to Tile IR bytecode (sm_90):")
    checks += lowered(rep, cases)


def lowered(rep, cases) -> list[tuple[str, bool]]:
    """Lower each ``(name, kernel, types, consts)`` of ``cases`` to Tile IR bytecode for sm_90
    (no tileiras, no GPU): a ``("lower NAME", ok)`` check each, a failure's traceback logged."""
    checks = []
    for name, kern, types, consts in cases:
        try:
            ok = bool(kern.inspect("tileir", types, consts, arch="sm_90"))
        except Exception:  # noqa: BLE001 - the check fails, the dry run goes on
            rep.log(traceback.format_exc())
            ok = False
        checks.append((f"lower {name}", ok))
        rep.log(f"  {'ok ' if ok else 'BAD'} lower {name}")
    return checks


# -- main ----------------------------------------------------------------------------------------

def environment(torch) -> dict:
    info = {"python": platform.python_version(), "fearless": fl.__version__,
            "numpy": np.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "cuda (torch)": torch.version.cuda,
            "triton": triton.__version__ if triton is not None else "not installed",
            "fearless cache": str(CONFIG.cache_dir)}
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True, capture_output=True)
    info["commit"] = git.stdout.strip() or "unknown"
    return info


def gpu_run(rep: Report, sections: set, quick: bool) -> None:
    global TARGET_MS, REPS
    if quick:
        TARGET_MS, REPS = 30.0, 3
    import torch
    fl.set_backend("cuda")
    rep.data["env"] = environment(torch)
    rep.log("env: " + ", ".join(f"{k} {v}" for k, v in rep.data["env"].items()))
    if "jit" in sections:  # first: children, before this process has warmed anything
        try:
            bench_jit(rep)
        except Exception:  # noqa: BLE001
            rep.fail("jit")
        rep.save()
    clock = Clock(torch)
    copy = None
    if sections & {"norm", "add"}:
        try:
            copy = bench_copy(rep, clock, torch)
        except Exception:  # noqa: BLE001
            rep.fail("copy")
    steps = {"gemm": lambda: bench_gemm(rep, clock, torch, quick),
             "norm": lambda: bench_norms(rep, clock, torch, copy),
             "add": lambda: bench_add(rep, clock, torch, copy),
             "chain": lambda: bench_chains(rep, clock, torch)}
    for name, step in steps.items():
        if name in sections:
            try:
                step()
            except Exception:  # noqa: BLE001
                rep.fail(name)
            rep.save()
    rep.table()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: check every fearless kernel on the CPU backend at tiny sizes")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma list of " +
                    ", ".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="two GEMM configs, fewer repetitions")
    ap.add_argument("--gemm-shapes", default="", help="comma list of the GEMM shapes to run, "
                    "such as f16:4096,f16:8192 (default: all)")
    ap.add_argument("--jit-probe", help=argparse.SUPPRESS)  # the child of the jit section
    args = ap.parse_args(argv)
    if args.jit_probe:
        print(json.dumps(jit_probe(args.jit_probe)))
        return 0
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if sections - set(SECTIONS):
        ap.error(f"unknown sections: {', '.join(sorted(sections - set(SECTIONS)))}")
    out_dir = Path(os.environ.get("OUT") or "bench_out")
    rep = Report(out_dir, {s.strip() for s in args.gemm_shapes.split(",") if s.strip()})
    if args.dry_run:
        status = dry_run(rep)
        try:
            bench_jit(rep, backend="cpu")
        except Exception:  # noqa: BLE001
            rep.fail("jit (cpu)")
    else:
        gpu_run(rep, sections, args.quick)
        status = 0
    return rep.finish(status)


if __name__ == "__main__":
    sys.exit(main())
