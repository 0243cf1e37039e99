"""Linear-layer benchmark on the GPU: ``fearless.nn.linear`` against ``torch.nn.functional.linear``
(cuBLAS) on the projection shapes of Qwen3-1.7B and Llama-3.1-8B, bf16, no bias.

Shapes (N, K) per model: q (Hq*D, H), k/v (Hkv*D, H), o (H, Hq*D), gate/up (I, H), down (H, I),
lm_head (V, H); T tokens each (default 1, 16, 128, 2048). Every fearless configuration (the
default plan and the ``--decode``/``--prefill`` ones) is checked against cuBLAS's output (max
error relative to max |y|) and timed; so is cuBLAS, and for T <= 16 a device-to-device copy of
the weight's bytes (``dst.copy_(src)``: 2 x bytes moved), whose bandwidth the GEMV is measured
against: % of copy = (weight bytes / GEMV time) / (2 x weight bytes / copy time).

Timing: CUDA events on the legacy default stream (besides: wall time per eager ``linear`` call,
host work and sync included, the cost before graph capture; and a WRONG flag when the error
passes 2**-6 of max |y|). Each iteration first flushes L2 (reads a buffer of ``--flush-mb``,
default 512 MB, ten times the H200's 50 MB L2; ``--flush write`` writes it, as runs before
session 19 did, which leaves dirty lines that the timed kernel's reads write back: on the H200
that cost the decode GEMV at 117-134 MB about 10 points of copy bandwidth, 3.49 against 4.20
TB/s, ``decode_roofline.py`` in benchmarks/RESULTS.md), then holds the GPU
with ``torch.cuda._sleep`` long enough for the host to enqueue the case, then records the start
event, the case, and the end event. fearless's end event is recorded by a ``.then()`` callback
right after its kernels are enqueued (``fearless.nn._common.run`` is wrapped for that), so the
host's sync stays outside the time; an iteration where the GPU reached the start event before
the host had enqueued everything is counted as host-bound. Median over ``--iters`` iterations.

Configurations: ``NAME[/key=value...]``: NAME is ``default`` (the plan ``linear`` chooses),
``mma``, ``mma_t`` or ``sum``; keys ``tile=BMxBN``, ``bk``, ``splits``, ``lat`` (tileiras's
latency hint on w's loads). ``--decode`` configs run for T <= 16, ``--prefill`` for larger T.
Before timing, every specialisation is compiled for the GPU's arch in ``--jobs`` processes at
once (tileiras, no GPU needed) into the JIT disk cache, on stand-in tensors with the same layout
facts (``_standin``).

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_linear.py \\
        [--models qwen3-1.7b,llama-3.1-8b] [--tokens 1,16,128,2048]
        [--projs q,kv,o,gate,down,lm_head]
        [--decode default --decode mma_t --decode mma/splits=4/bk=512/lat=4] [--prefill default]
Output: per-case lines as they run, a table at the end; ``$OUT`` (default ./bench_out) gets
bench_linear.json and bench_linear.log. ``--dry-run`` runs every configuration once on the cpu
backend at small sizes against NumPy (no GPU, no torch).
"""
from __future__ import annotations

import argparse
import importlib
import multiprocessing
import os
import statistics
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import bf16
from fearless.kernel.tile_fast import pow2_div
from fearless.nn import _common
from fearless.runtime import device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_log import EventClock, RunLog  # noqa: E402

linear_module = importlib.import_module("fearless.nn.linear")
linear = linear_module.linear

MODELS = {  # hidden, intermediate, q heads, kv heads, head dim, vocabulary
    "qwen3-1.7b": (2048, 6144, 16, 8, 128, 151936),
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, 128256),
}
PROJS = ("q", "kv", "o", "gate", "down", "lm_head")
DECODE = ("default", "mma", "sum", "mma_t/tile=16x128/bk=512", "mma_t/bk=512", "mma_t/lat=4")
PREFILL = ("default", "mma/tile=128x128", "mma/tile=64x128")
H200_SMS = 132


def shapes(model: str) -> dict:
    """proj -> (N, K)."""
    h, i, hq, hkv, d, v = MODELS[model]
    return {"q": (hq * d, h), "kv": (hkv * d, h), "o": (h, hq * d), "gate": (i, h),
            "down": (h, i), "lm_head": (v, h)}


def parse_config(spec: str) -> dict:
    """``mma_t/tile=16x128/bk=512/splits=4/lat=3`` -> linear's keywords."""
    name, *items = spec.split("/")
    kw = {} if name == "default" else {"variant": name}
    for item in items:
        key, _, value = item.partition("=")
        if key == "tile":
            kw["tile"] = tuple(int(v) for v in value.split("x"))
        elif key in ("bk", "splits"):
            kw[key] = int(value)
        elif key == "lat":
            kw["latency"] = int(value)
        else:
            raise SystemExit(f"unknown key {key!r} in configuration {spec!r}")
    return kw


def explicit(t: int, n: int, k: int, kw: dict, sms: int) -> dict:
    """``kw`` with every plan field spelled out (what a stand-in compile must reproduce)."""
    p = linear_module._tuned(linear_module.plan(t, n, k, bf16, sms), t, kw.get("variant"),
                             kw.get("tile"), kw.get("bk"), kw.get("splits"), kw.get("latency"))
    return {"variant": p.form, "tile": (p.bm, p.bn), "bk": p.bk, "splits": p.splits,
            "latency": p.latency}


# -- compiling ahead, in parallel ------------------------------------------------------------

def _standin(n: int) -> int:
    """An extent with the layout facts of ``n`` (its power-of-two divisor, capped at 16)."""
    return n if n <= 64 else 3 * pow2_div(n)


def _compile_one(job) -> str:
    t, n, k, kw, arch = job
    from fearless.runtime import ahead
    fl.set_backend("cpu")
    x = np.zeros((t, _standin(k)), bf16.numpy)
    w = np.zeros((_standin(n), _standin(k)), bf16.numpy)
    try:
        with ahead.compile_only([arch]):
            linear(x, w, **kw)
    except Exception:
        return f"{job}: {traceback.format_exc()}"
    return ""


def precompile(jobs: list, workers: int, arch: str, log) -> None:
    unique = sorted({(t, n, k, tuple(sorted(kw.items()))) for t, n, k, kw in jobs})
    todo = [(t, n, k, dict(kw), arch) for t, n, k, kw in unique]
    t0 = time.perf_counter()
    # spawned, not forked: this process has a CUDA context
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max(1, workers), mp_context=spawn) as pool:
        errors = [e for e in pool.map(_compile_one, todo) if e]
    log(f"compiled {len(todo)} plans ahead in {time.perf_counter() - t0:.1f} s with {workers} "
        f"processes; {len(errors)} failed")
    for e in errors:
        log(e)


# -- timing ----------------------------------------------------------------------------------

class Clock(EventClock):
    """Per iteration: flush L2, hold the GPU while the host enqueues, time start..end.
    ``flush``: "write" (``zero_()`` the buffer: L2 is left full of dirty lines, which the timed
    kernel's reads may have to write back to memory) or "read" (a reduction over it: L2 is left
    holding clean lines)."""

    def __init__(self, torch, flush_mb: int, flush: str = "read"):
        super().__init__(torch)
        self.flush = torch.zeros(flush_mb << 20, dtype=torch.uint8, device="cuda")
        self.flush_by = {"write": self.flush.zero_, "read": self.flush.max}[flush]
        self.marks: list = []

    def time(self, run, iters: int) -> tuple[float, int]:
        """(median ms, iterations where the host fell behind). ``run(mark)`` enqueues the case
        and calls ``mark()`` right after enqueuing its last kernel."""
        torch = self.torch
        t0 = time.perf_counter()
        run(lambda: None)
        torch.cuda.synchronize()
        cover_ms = 2.0 * (time.perf_counter() - t0) * 1e3 + 0.05
        pairs, late = [], 0
        for _ in range(iters):
            s, e, seen = self._event(), self._event(), {}

            def mark():
                seen["late"] = s.query()
                e.record()
            self.flush_by()
            torch.cuda._sleep(int(min(cover_ms, 50.0) * self.cycles_per_ms))
            s.record()
            run(mark)
            late += bool(seen.get("late"))
            pairs.append((s, e))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in pairs), late


def fearless_runner(x, w, kw):
    """``run(mark)`` for the clock: fearless.nn's one launch point, ``_common.run``, gets a
    ``.then(mark)`` after each operation of the call."""
    plain = _common.run

    def run(mark):
        _common.run = lambda op: plain(op.then(lambda r: (mark(), r)[1]))
        try:
            linear(x, w, **kw)
        finally:
            _common.run = plain
    return run


def call_ms(fn, n: int = 20) -> float:
    """Wall ms per call of ``fn`` (host work and the wait for the GPU: eager use's cost)."""
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1e3 / n


# -- the run ---------------------------------------------------------------------------------

class Report(RunLog):
    def __init__(self, out_dir):
        super().__init__(out_dir, "bench_linear")

    def table(self) -> None:
        best: dict = {}
        for r in self.rows:
            key = (r["model"], r["proj"], r["t"])
            if r.get("ms") and (key not in best or r["ms"] < best[key]["ms"]):
                best[key] = r
        self.log("")
        self.log(f"{'model':<13} {'proj':<8} {'T':>5} {'N':>7} {'K':>6}  {'best config':<28} "
                 f"{'us':>8} {'cuBLAS us':>9} {'%cuBLAS':>8} {'%copy':>6} {'cuBLAS %copy':>12}")
        for (model, proj, t), r in best.items():
            copy = f"{r['pct_copy']:6.1f}" if r.get("pct_copy") is not None else f"{'':6}"
            ccopy = f"{r['cublas_pct_copy']:12.1f}" if r.get("cublas_pct_copy") is not None \
                else f"{'':12}"
            self.log(f"{model:<13} {proj:<8} {t:>5} {r['n']:>7} {r['k']:>6}  {r['config']:<28} "
                     f"{r['ms'] * 1e3:8.1f} {r['cublas_ms'] * 1e3:9.1f} {r['pct_cublas']:8.1f} "
                     f"{copy} {ccopy}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default="1,16,128,2048")
    ap.add_argument("--projs", default=",".join(PROJS))
    ap.add_argument("--decode", action="append", help=f"default: {' '.join(DECODE)}")
    ap.add_argument("--prefill", action="append", help=f"default: {' '.join(PREFILL)}")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--flush-mb", type=int, default=512)
    ap.add_argument("--flush", choices=("read", "write"), default="read")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    decode = [(c, parse_config(c)) for c in (args.decode or DECODE)]
    prefill = [(c, parse_config(c)) for c in (args.prefill or PREFILL)]
    tokens = [int(t) for t in args.tokens.split(",")]
    cases = [(m, p, t, *shapes(m)[p]) for m in args.models.split(",")
             for p in args.projs.split(",") for t in tokens]
    if args.dry_run:
        return dry_run(cases, decode, prefill)
    out = Path(os.environ.get("OUT", "bench_out"))
    rep = Report(out)
    import torch
    import torch.nn.functional as F
    sms = fl.multiprocessor_count()
    rep.data["device"] = torch.cuda.get_device_name()
    rep.log(f"{rep.data['device']}, {sms} SMs, torch {torch.__version__}, "
            f"fearless {fl.__version__}")
    configs = {t: decode if t <= linear_module.DECODE_MAX_T else prefill for t in tokens}
    precompile([(t, n, k, explicit(t, n, k, kw, sms)) for _, _, t, n, k in cases
                for _, kw in configs[t]], args.jobs, device.cuda_arch(), rep.log)
    clock = Clock(torch, args.flush_mb, args.flush)
    copy_ms: dict = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for model, proj, t, n, k in cases:
        try:
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) * k ** -0.5
            want = F.linear(x, w).float()
            cublas, cublas_late = clock.time(lambda mark: (F.linear(x, w), mark()), args.iters)
            wbytes = n * k * 2
            if t <= linear_module.DECODE_MAX_T and wbytes not in copy_ms:
                src, dst = torch.empty_like(w), torch.empty_like(w)
                copy_ms[wbytes] = clock.time(lambda mark: (dst.copy_(src), mark()), args.iters)[0]
            copy_bw = 2 * wbytes / copy_ms[wbytes] if t <= linear_module.DECODE_MAX_T else None
        except Exception:
            rep.fail(f"{model} {proj} T={t} cuBLAS")
            continue
        for name, kw in configs[t]:
            row = {"model": model, "proj": proj, "t": t, "n": n, "k": k, "config": name,
                   "plan": explicit(t, n, k, kw, sms), "cublas_ms": cublas,
                   "cublas_host_bound": cublas_late}
            try:
                got = linear(x, w, **kw).float()
                row["err"] = float((got - want).abs().max() / want.abs().max())
                ms, late = clock.time(fearless_runner(x, w, kw), args.iters)
                row.update(ms=ms, host_bound=late, pct_cublas=100 * cublas / ms,
                           tflops=2 * t * n * k / ms / 1e9, gbps=wbytes / ms / 1e6,
                           call_ms=call_ms(lambda: linear(x, w, **kw)))
                if copy_bw is not None:
                    row["pct_copy"] = 100 * (wbytes / ms) / copy_bw
                    row["cublas_pct_copy"] = 100 * (wbytes / cublas) / copy_bw
                    row["copy_gbps"] = copy_bw / 1e6
            except Exception:
                rep.fail(f"{model} {proj} T={t} {name}")
                continue
            rep.rows.append(row)
            rep.log(f"{model} {proj:<7} T={t:<5} N={n:<6} K={k:<5} {name:<28} "
                    f"{ms * 1e3:8.1f} us ({row['pct_cublas']:5.1f}% of cuBLAS "
                    f"{cublas * 1e3:.1f} us"
                    + (f", {row['pct_copy']:5.1f}% of copy {row['copy_gbps']:.0f} GB/s"
                       if copy_bw is not None else f", {row['tflops']:.0f} TF/s")
                    + f"), err {row['err']:.1e}" + (" WRONG" if row["err"] > 2.0 ** -6 else "")
                    + f", {row['call_ms'] * 1e3:.0f} us per eager call"
                    + (f", host-bound x{late}" if late else ""))
    rep.table()
    rep.save()


def dry_run(cases, decode, prefill) -> None:
    """Every configuration once on the cpu backend at small sizes, against NumPy."""
    fl.set_backend("cpu")
    rng = np.random.default_rng(0)
    seen = set()
    for _, _, t, n, k in cases:
        t = min(t, 40)
        n, k = min(n, 200), min(k, 300)
        for name, kw in decode if t <= linear_module.DECODE_MAX_T else prefill:
            if (t, name) in seen:
                continue
            seen.add((t, name))
            x = rng.standard_normal((t, k), np.float32).astype(bf16.numpy)
            w = rng.standard_normal((n, k), np.float32).astype(bf16.numpy)
            want = x.astype(np.float64) @ w.astype(np.float64).T
            got = linear(x, w, **kw).numpy().astype(np.float64)
            err = np.abs(got - want).max() / np.abs(want).max()
            print(f"dry run T={t} N={n} K={k} {name}: max error {err:.1e} (relative to max |y|)")
            assert err < 2.0 ** -7, err


if __name__ == "__main__":
    main()
