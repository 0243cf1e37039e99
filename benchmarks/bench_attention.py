"""Attention benchmark on the GPU: ``fearless.nn`` prefill against torch SDPA, decode against copy.

Sections:
1. prefill: ``attention`` (flash, tile kernels) against ``torch.nn.functional.
   scaled_dot_product_attention`` (its flash backend on the H200) on the same token-major views:
   f16 and bf16; B = 4 with 16 query and 16 kv heads, and 32 query / 8 kv heads (GQA); S 1024
   and 4096; D 64 and 128; causal and not. TFLOP/s (4 B Hq S Skv D, halved for causal) and the
   ratio SDPA time / fearless time (above 1: fearless is faster).
2. decode: ``decode_attention`` (split-K + merge) over a full cache (lengths = context), bf16,
   batch 1 and 16, context 1024 to 8192, Qwen3-1.7B heads (16 q / 8 kv, D 128) and Llama-3-8B
   heads (32 q / 8 kv, D 128): GB/s of K and V read and % of the copy bandwidth
   (``dst.copy_(src)`` over 1 GiB, 2 bytes moved per byte copied, measured in the same run).
   Successive calls read distinct caches (at least 256 MB in turn), so L2 does not hold them.
3. nn-tuned (not in the default): ``fearless.nn.attention``'s prefill as FEARLESS_NN_AUTOTUNE=1
   runs it (``ft.autotune`` over its tiles, once per power-of-two bucket of lengths) on the
   prefill section's cases: each config's TFLOP/s as the tuner timed it, the tuning's cost in
   seconds (cubins compiled ahead or not: the log says), the winner timed as in section 1.
4. example (not in the default): ``examples/tile_attention.py``'s ``attention_tuned``, a
   user's flash attention tuned by ``ft.autotune``, against SDPA on the same (heads, S, D)
   data: f16 and bf16, 64 heads (the issue's 4 x 16), D 128, S 1024 and 4096, causal and not;
   each config's TFLOP/s as the tuner timed it, the tuning's cost in seconds, the winner's
   time as in section 1.

Timing as ``bench_tile.py`` (its Clock): CUDA events on the legacy default stream, the GPU held
by ``torch.cuda._sleep`` while the host enqueues a ``.then()`` chain of calls, the median of
repetitions; correctness of every fearless case is checked against SDPA (prefill) or a float32
torch reference (decode) before timing.

Tuning: every ``--prefill`` / ``--decode`` option is one configuration (repeat the option to
sweep several in one run; each runs every case):
    --prefill bm=128,bn=64,occ=2,klat=2,vlat=4,ftz=1  (PrefillTuning; occ, klat, vlat: an
                                                 int or none; ftz 0 or 1)
    --decode bn=64,waves=2,occ=none,klat=none   (DecodeTuning)
A ``d=64`` or ``d=128`` item applies a configuration to that head dim only.
Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_attention.py [--sections prefill,decode,example]
        [--quick]
        [--prefill ...]... [--decode ...]...
Output: the log as it goes, a table of ratios last; ``$OUT`` (default ./bench_out) gets
bench_attention.json and .log. ``--dry-run`` (no GPU) runs each configuration once at tiny sizes
on the CPU backend against NumPy.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import fearless as fl
from run_log import RunLog

A = importlib.import_module("fearless.nn.attention")

PREFILL_CASES = [(dt, heads, s, d, causal)
                 for dt in ("float16", "bfloat16") for heads in ((16, 16), (32, 8))
                 for s in (1024, 4096) for d in (64, 128) for causal in (True, False)]
DECODE_SHAPES = {"qwen3-1.7b": (16, 8, 128), "llama3-8b": (32, 8, 128)}
DECODE_CASES = [(name, b, ctx) for name in DECODE_SHAPES for b in (1, 16)
                for ctx in (1024, 2048, 4096, 8192)]
BATCH = 4


def parse_config(text: str, base):
    """``bm=128,bn=64,occ=2,klat=2,vlat=4`` -> a tuning dataclass (fields or short names)."""
    names = {"occ": "occupancy", "klat": "k_latency", "vlat": "v_latency"}
    fields = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = item.partition("=")
        key = names.get(key, key)
        fields[key] = (None if value.lower() == "none" else
                       bool(int(value)) if key == "ftz" else int(value))
    return replace(base, **fields)


def label(cfg) -> str:
    return ",".join(f"{k}={v}" for k, v in vars(cfg).items())


class Report(RunLog):
    def __init__(self, out_dir):
        super().__init__(out_dir, "bench_attention")

    def table(self) -> None:
        self.log("\n" + "=" * 100)
        self.log(f"{'case':<58}{'fearless':>12}{'peer':>12}   ratio")
        for r in self.rows:
            peer = f"{r['peer_ms']:.4g}" if r.get("peer_ms") else ""
            self.log(f"{r['case']:<58}{r['ms']:>12.4g}{peer:>12}   {r['ratio']}")
        self.log("ms per call (device time). prefill ratio: SDPA time / fearless time (above 1: "
                 "fearless faster); decode: % of copy bandwidth")


# -- GPU -------------------------------------------------------------------------------------------

def against_sdpa(clock, make, part, s: int, sdpa, flops: float) -> tuple:
    """(ms, SDPA's ms, the ratio's words): ``make(partition)``'s device time in a chain, as
    ``bench_tile`` times kernels, and SDPA's (``time_peer``)."""
    from bench_tile import allow_depth, chain, time_peer
    n = 20 if s >= 4096 else 100
    allow_depth(n)

    def run(k_, mark):
        nonlocal part
        op = chain(make, part, k_)
        part = op.then(lambda r: (mark(), r)[1]).sync()[0]
    ms, late = clock.device(run, n)
    peer = time_peer(clock, sdpa)["kernel_ms"]
    return ms, peer, (f"{peer / ms:.2f}x SDPA ({flops / ms / 1e9:.0f} TF vs "
                      f"{flops / peer / 1e9:.0f}){' host-bound' if late else ''}")


def gpu_prefill(rep, clock, torch, cfg, quick):
    import torch.nn.functional as F
    for dt, (hq, hkv), s, d, causal in PREFILL_CASES:
        if quick and (s, hq) != (4096, 16):
            continue
        if cfg.get(d) is None:
            continue
        A.PREFILL[d] = cfg[d]
        case = f"prefill {dt} {hq}/{hkv}h S{s} D{d} {'causal' if causal else 'full'}"
        try:
            tdt = getattr(torch, dt)
            g = torch.Generator(device="cuda").manual_seed(1)
            qkv = torch.randn((BATCH * s, (hq + 2 * hkv) * d), generator=g, device="cuda",
                              dtype=tdt).view(BATCH, s, hq + 2 * hkv, d)
            q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

            def sdpa():
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                      enable_gqa=hq != hkv)
            want = sdpa().transpose(1, 2).reshape(BATCH, s, hq * d)
            fq, fk, fv = (fl.asarray(x) for x in (q, k, v))
            out = torch.empty((BATCH, s, hq * d), device="cuda", dtype=tdt)
            part = fl.asarray(out).partition(A.prefill_tile(d))

            def make(p):   # this configuration's tiles (nn.attention would tune them)
                return A.attention_op(p, fq, fk, fv, causal)
            part = make(part).sync()[0]           # compile outside the timing
            err = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
            flops = 4 * BATCH * hq * s * s * d / (2 if causal else 1)
            ms, peer, ratio = against_sdpa(clock, make, part, s, sdpa, flops)
            rep.rows.append({"case": f"{case} [{label(cfg[d])}]", "ms": ms, "peer_ms": peer,
                             "ratio": ratio + ('' if err < 0.02 else f' WRONG err {err:.3g}'),
                             "err": err})
            rep.log(f"  {rep.rows[-1]['case']}: {ms:.4g} ms vs SDPA {peer:.4g} ms: "
                    f"{rep.rows[-1]['ratio']} (max err vs SDPA {err:.3g} of max |out|)")
        except Exception:  # noqa: BLE001 - a case's failure is logged, the run goes on
            rep.fail(case)


def tuned_row(rep, clock, case: str, tuned, out, args: tuple, want, s: int, sdpa,
              flops: float) -> None:
    """One tuned kernel's row: ``tuned.tune(out, *args)`` (each config's TFLOP/s as the tuner
    timed it, and the tuning's cost in seconds, logged), the winner run into ``out`` (a torch
    tensor) and checked against ``want()`` (SDPA's result in out's layout), then timed beside
    SDPA as ``against_sdpa`` times kernels."""
    report = tuned.tune(fl.asarray(out), *args)
    rep.log(f"  {case}: {report}")
    for n, c in enumerate(report):
        if c.seconds is not None:
            rep.log(f"    config {n}: {flops / c.seconds / 1e12:.0f} TF")
    part = tuned(fl.asarray(out), *args).sync()[0]
    expected = want()
    err = ((out.float() - expected.float()).abs().max() / expected.float().abs().max()).item()

    def make(p_):   # what a user calls: the ranking is kept, the winner runs
        return tuned(p_.unpartition(), *args)
    ms, peer, ratio = against_sdpa(clock, make, part, s, sdpa, flops)
    rep.rows.append({"case": f"{case} [tuned: config {report.winner}, "
                             f"{report.seconds:.1f} s to tune]", "ms": ms, "peer_ms": peer,
                     "ratio": ratio + ('' if err < 0.02 else f' WRONG err {err:.3g}'),
                     "err": err, "tuning_s": report.seconds,
                     "configs_tf": [None if c.seconds is None else flops / c.seconds / 1e12
                                    for c in report]})
    rep.log(f"  {rep.rows[-1]['case']}: {ms:.4g} ms vs SDPA {peer:.4g} ms: "
            f"{rep.rows[-1]['ratio']} (max err vs SDPA {err:.3g} of max |out|)")


EXAMPLE_CASES = [(dt, s, causal) for dt in ("float16", "bfloat16") for s in (1024, 4096)
                 for causal in (False, True)]
EXAMPLE_HEADS, EXAMPLE_D = 64, 128   # the shape: 4 x 16 heads, D 128


def gpu_example(rep, clock, torch, quick):
    """``examples/tile_attention.py``'s ``attention_tuned`` (a user's flash attention tuned by
    ft.autotune) against SDPA on the same (heads, S, D) data: per case the tuning (each
    config's time as the tuner measured it, and the tuning's wall-clock cost in seconds), then
    the winner timed as the prefill rows are, beside SDPA."""
    import torch.nn.functional as F
    from examples import tile_attention as E
    for dt, s, causal in EXAMPLE_CASES:
        if quick and (dt, s) != ("float16", 4096):
            continue
        case = f"example {dt} {EXAMPLE_HEADS}h S{s} D{EXAMPLE_D} {'causal' if causal else 'full'}"
        try:
            g = torch.Generator(device="cuda").manual_seed(5)
            q, k, v = (torch.randn((EXAMPLE_HEADS, s, EXAMPLE_D), generator=g, device="cuda",
                                   dtype=getattr(torch, dt)) for _ in range(3))
            scale = EXAMPLE_D ** -0.5

            def sdpa():
                return F.scaled_dot_product_attention(q[None], k[None], v[None],
                                                      is_causal=causal)[0]
            fq, fk, fv = (fl.asarray(x) for x in (q, k, v))
            flops = 4 * EXAMPLE_HEADS * s * s * EXAMPLE_D / (2 if causal else 1)
            tuned_row(rep, clock, case, E.attention_tuned, torch.empty_like(q),
                      (fq, fk, fv, scale, causal), sdpa, s, sdpa, flops)
        except Exception:  # noqa: BLE001 - a case's failure is logged, the run goes on
            rep.fail(case)


def gpu_nn_tuned(rep, clock, torch, quick):
    """The prefill cases through ``nn.attention``'s tuned kernel (``_prefill_tuned``): per case
    the tuning (each config's TFLOP/s, its cost in seconds), then the winner against SDPA."""
    import torch.nn.functional as F
    for dt, (hq, hkv), s, d, causal in PREFILL_CASES:
        if quick and (s, hq) != (4096, 16):
            continue
        case = f"nn-tuned {dt} {hq}/{hkv}h S{s} D{d} {'causal' if causal else 'full'}"
        try:
            tdt = getattr(torch, dt)
            g = torch.Generator(device="cuda").manual_seed(1)
            qkv = torch.randn((BATCH * s, (hq + 2 * hkv) * d), generator=g, device="cuda",
                              dtype=tdt).view(BATCH, s, hq + 2 * hkv, d)
            q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

            def sdpa():
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                      enable_gqa=hq != hkv)
            fq, fk, fv = (fl.asarray(x) for x in (q, k, v))
            out = torch.empty((BATCH, s, hq * d), device="cuda", dtype=tdt)
            flops = 4 * BATCH * hq * s * s * d / (2 if causal else 1)
            tuned_row(rep, clock, case, A._prefill_tuned(d, A.PREFILL[d], fq.dtype.name), out,
                      (fq, fk, fv, A.LOG2E / math.sqrt(d), int(causal)),
                      lambda: sdpa().transpose(1, 2).reshape(BATCH, s, hq * d), s, sdpa, flops)
        except Exception:  # noqa: BLE001 - a case's failure is logged, the run goes on
            rep.fail(case)


def copy_bandwidth(clock, torch) -> float:
    """Bytes per ms moved by ``dst.copy_(src)`` (2 per byte copied) over 1 GiB."""
    from bench_tile import time_peer
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = time_peer(clock, lambda: dst.copy_(src))["kernel_ms"]
    return 2 * src.numel() * 2 / ms


def gpu_decode(rep, clock, torch, cfg, quick, copy_bpms):
    from bench_tile import allow_depth
    for name, b, ctx in DECODE_CASES:
        if quick and ctx not in (1024, 8192):
            continue
        hq, hkv, d = DECODE_SHAPES[name]
        A.DECODE[d] = cfg[d]
        case = f"decode {name} B{b} ctx{ctx}"
        try:
            g = torch.Generator(device="cuda").manual_seed(2)
            cache_bytes = 2 * b * ctx * hkv * d * 2
            copies = max(2, min(64, -(-(256 << 20) // cache_bytes)))
            caches = [(torch.randn((b, ctx, hkv, d), generator=g, device="cuda",
                                   dtype=torch.bfloat16),
                       torch.randn((b, ctx, hkv, d), generator=g, device="cuda",
                                   dtype=torch.bfloat16)) for _ in range(copies)]
            q = torch.randn((b, hq, d), generator=g, device="cuda", dtype=torch.bfloat16)
            lengths = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
            kc, vc = caches[0]
            got = A.decode_attention(q, kc, vc, lengths).float()
            kr = kc.float().repeat_interleave(hq // hkv, dim=2)
            vr = vc.float().repeat_interleave(hq // hkv, dim=2)
            p = torch.softmax(torch.einsum("bhd,bthd->bht", q.float(), kr) / math.sqrt(d), -1)
            want = torch.einsum("bht,bthd->bhd", p, vr)
            err = ((got - want).abs().max() / want.abs().max()).item()
            fcaches = [(fl.asarray(k), fl.asarray(v)) for k, v in caches]
            fq, flen = fl.asarray(q), fl.asarray(lengths)
            out = torch.empty((b, hq, d), device="cuda", dtype=torch.bfloat16)
            part = fl.asarray(out).partition((1, 1, d))
            turn = [0]

            def make(p_):
                k_, v_ = fcaches[turn[0] % copies]
                turn[0] += 1
                return A.decode_attention_op(p_, fq, k_, v_, flen)
            part = make(part).sync()[0]
            n = 200
            allow_depth(2 * n)

            def run(k_, mark):
                nonlocal part
                op = make(part)
                for _ in range(k_ - 1):
                    op = op.then(lambda r: make(r[0]))
                part = op.then(lambda r: (mark(), r)[1]).sync()[0]
            ms, late = clock.device(run, n)
            gbs = cache_bytes / ms / 1e6
            pct = 100 * cache_bytes / ms / copy_bpms
            rep.rows.append({"case": f"{case} [{label(cfg[d])}]", "ms": ms, "peer_ms": None,
                             "ratio": f"{pct:.0f}% of copy ({gbs:.0f} GB/s)"
                                      f"{' host-bound' if late else ''}"
                                      f"{'' if err < 0.02 else f' WRONG err {err:.3g}'}",
                             "err": err, "pct_copy": pct})
            rep.log(f"  {rep.rows[-1]['case']}: {ms * 1e3:.1f} us, {rep.rows[-1]['ratio']} "
                    f"(max err {err:.3g} of max |out|, {copies} caches in turn)")
        except Exception:  # noqa: BLE001
            rep.fail(case)


def gpu_run(rep, sections, quick, prefill_cfgs, decode_cfgs):
    import torch
    from bench_tile import Clock
    clock = Clock(torch)
    rep.data["device"] = torch.cuda.get_device_name()
    rep.data["sms"] = fl.multiprocessor_count()
    if "prefill" in sections:
        for cfg in prefill_cfgs:
            gpu_prefill(rep, clock, torch, cfg, quick)
    if "nn-tuned" in sections:
        gpu_nn_tuned(rep, clock, torch, quick)
    if "example" in sections:
        gpu_example(rep, clock, torch, quick)
    if "decode" in sections:
        copy_bpms = copy_bandwidth(clock, torch)
        rep.data["copy_GBps"] = copy_bpms / 1e6
        rep.log(f"copy bandwidth: {copy_bpms / 1e6:.0f} GB/s")
        for cfg in decode_cfgs:
            gpu_decode(rep, clock, torch, cfg, quick, copy_bpms)


# -- CPU dry run -----------------------------------------------------------------------------------

def dry_run(rep, prefill_cfgs, decode_cfgs) -> None:
    """Each configuration once at tiny sizes on the CPU backend, against float64 NumPy."""
    fl.set_backend("cpu")
    rng = np.random.default_rng(3)
    for cfg in prefill_cfgs:
        for d, tune in cfg.items():
            A.PREFILL[d] = tune
            q = rng.standard_normal((1, 150, 4, d)).astype(np.float16)
            k = rng.standard_normal((1, 150, 2, d)).astype(np.float16)
            got = A.attention(q, k, k, causal=True).numpy().astype(np.float64)
            kr = np.repeat(k.astype(np.float64), 2, axis=2)
            sc = np.einsum("bshd,bthd->bhst", q.astype(np.float64), kr) / math.sqrt(d)
            sc = np.where(np.tri(150, dtype=bool), sc, -np.inf)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            want = np.einsum("bhst,bthd->bshd", p / p.sum(-1, keepdims=True), kr)
            rep.log(f"dry prefill D{d} [{label(tune)}]: max err {np.abs(got - want).max():.3g}")
    for cfg in decode_cfgs:
        for d, tune in cfg.items():
            A.DECODE[d] = tune
            q = rng.standard_normal((2, 8, d)).astype(np.float16)
            kc = rng.standard_normal((2, 300, 2, d)).astype(np.float16)
            lengths = np.array([5, 300], np.int32)
            got = A.decode_attention(q, kc, kc, lengths).numpy().astype(np.float64)
            worst = 0.0
            for b in range(2):
                kr = np.repeat(kc[b, :lengths[b]].astype(np.float64), 4, axis=1)
                sc = np.einsum("hd,thd->ht", q[b].astype(np.float64), kr) / math.sqrt(d)
                p = np.exp(sc - sc.max(-1, keepdims=True))
                want = np.einsum("ht,thd->hd", p / p.sum(-1, keepdims=True), kr)
                worst = max(worst, np.abs(got[b] - want).max())
            rep.log(f"dry decode D{d} [{label(tune)}]: max err {worst:.3g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="prefill,decode")
    ap.add_argument("--quick", action="store_true",
                    help="S 4096 16/16 heads (example: f16 S 4096); ctx 1024, 8192")
    ap.add_argument("--prefill", action="append", default=[], metavar="CFG",
                    help="bm=,bn=,occ=,klat=,vlat=,ftz=[,d=64|128] (repeat to sweep)")
    ap.add_argument("--decode", action="append", default=[], metavar="CFG",
                    help="bn=,waves=,occ=,klat=,vlat=[,d=64|128] (repeat to sweep)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: the CPU backend, tiny sizes")
    args = ap.parse_args(argv)

    def configs(texts, table):
        out = []
        for text in texts or [""]:
            only = [int(p.split("=")[1]) for p in text.split(",") if p.startswith("d=")]
            rest = ",".join(p for p in text.split(",") if p and not p.startswith("d="))
            out.append({d: parse_config(rest, table[d]) if text else table[d]
                        for d in (only or A.HEAD_DIMS)})
        return out
    prefill_cfgs = configs(args.prefill, A.PREFILL)
    decode_cfgs = configs(args.decode, A.DECODE)
    out_dir = Path(os.environ.get("OUT") or "bench_out")
    rep = Report(out_dir)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if args.dry_run:
        dry_run(rep, prefill_cfgs, decode_cfgs)
    else:
        gpu_run(rep, sections, args.quick, prefill_cfgs, decode_cfgs)
        rep.table()
    rep.save()
    return 1 if rep.data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
