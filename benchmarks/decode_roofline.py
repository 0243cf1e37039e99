"""Where a decode GEMV's time goes: ``fearless.nn.linear`` at T tokens (default 1) against
``torch.nn.functional.linear`` (cuBLAS) and a device-to-device copy of the weight, over weight
shapes from 8 KB to 134 MB, bf16, on the GPU.

Each case is timed as ``benchmarks/bench_linear.py`` times it (its ``Clock``: L2 flushed, the GPU
held while the host enqueues, CUDA events, median of ``--iters``), so a kernel's time here is
what issue 13's "% of copy" compares. Per shape the table gives the times and the GEMV's %
of copy ((weight bytes / GEMV time) / (2 x weight bytes / copy time)), beside a read of the
weight alone (``w.amax()``: what streaming it costs without a GEMV). Then a least-squares fit
``time = t0 + bytes / rate`` over the shapes of at least 8 MB, per timed thing (the copy moves
twice the weight's bytes): ``t0`` is what every launch costs in this measurement, ``rate``
the streaming bandwidth. Last, per shape, the GEMV bandwidth past ``t0`` that 85% of copy would
need (issue 13's decode target), to compare with HBM3e's 4.8 TB/s on the H200.

``--flush``: how each iteration empties L2 (``bench_linear.Clock``): "write" (a ``zero_()`` that
leaves L2 full of dirty lines, which a streaming kernel may write back to memory inside its
timed window; bench_linear and bench_gemm flushed so until session 19), "read" (a reduction:
clean lines; their default since), or "both" (the default: every table and fit once per way,
to see what the flush itself costs: 3.49 against 4.20 TB/s for the GEMV on the H200).

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/decode_roofline.py [--tokens 1] [--iters 30]
        [--flush write|read|both]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_linear as B  # noqa: E402  (its Clock and fearless runner)

SHAPES = ((64, 64), (4096, 64), (4096, 1024), (4096, 4096), (14336, 4096), (4096, 14336),
          (4096, 16384), (16384, 4096))
FIT_MB = 8.0       # shapes below this are all launch cost: left out of the fit
TARGET = 0.85      # issue 13: a decode GEMV at >= 85% of copy bandwidth on the weights


def fit(mb: list, us: list) -> tuple[float, float]:
    """(t0 us, rate TB/s) of the least-squares line us = t0 + mb / rate (MB / us = TB/s)."""
    slope, t0 = np.polyfit(np.asarray(mb), np.asarray(us), 1)
    return float(t0), float(1.0 / slope)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--flush", choices=("write", "read", "both"), default="both")
    args = ap.parse_args()
    import torch
    for flush in ("write", "read") if args.flush == "both" else (args.flush,):
        print(f"\n== L2 flushed by a {flush} of 512 MB ==")
        roofline(torch, B.Clock(torch, 512, flush), args.tokens, args.iters)


def roofline(torch, clock, tokens: int, iters: int) -> None:
    """Time every shape, then print the table, the fits and the target's needs."""
    rows = []
    for n, k in SHAPES:
        x = torch.randn(tokens, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        want = torch.nn.functional.linear(x, w).float()
        err = ((B.linear(x, w).float() - want).abs().max() / want.abs().max()).item()
        ours, late = clock.time(B.fearless_runner(x, w, {}), iters)
        cublas, _ = clock.time(lambda mark: (torch.nn.functional.linear(x, w), mark()),
                               iters)
        dst = torch.empty_like(w)
        copy, _ = clock.time(lambda mark: (dst.copy_(w), mark()), iters)
        read, _ = clock.time(lambda mark: (w.amax(), mark()), iters)   # reads w once
        mb = n * k * 2 / 1e6
        rows.append((n, k, mb, ours * 1e3, cublas * 1e3, copy * 1e3, read * 1e3))
        print(f"N {n:6} K {k:6} {mb:8.2f} MB: fearless {ours * 1e3:7.2f} us ({late} late), "
              f"cuBLAS {cublas * 1e3:7.2f}, copy {copy * 1e3:7.2f}, read {read * 1e3:7.2f}; "
              f"error {err:.1e} of max |y|{'  WRONG' if err > 2.0 ** -6 else ''}", flush=True)
    print(f"\n{'N':>6} {'K':>6} {'MB':>8} {'fearless us':>11} {'cuBLAS us':>9} {'copy us':>8} "
          f"{'read us':>8} {'%copy':>6} {'cuBLAS %copy':>12}")
    for n, k, mb, ours, cublas, copy, read in rows:
        print(f"{n:6} {k:6} {mb:8.2f} {ours:11.2f} {cublas:9.2f} {copy:8.2f} {read:8.2f} "
              f"{100 * copy / (2 * ours):6.1f} {100 * copy / (2 * cublas):12.1f}")
    big = [r for r in rows if r[2] >= FIT_MB]
    mbs = [r[2] for r in big]
    fits = {"fearless": fit(mbs, [r[3] for r in big]), "cuBLAS": fit(mbs, [r[4] for r in big]),
            "copy": fit([2 * m for m in mbs], [r[5] for r in big]),
            "read": fit(mbs, [r[6] for r in big])}
    print(f"\nfit over the {len(big)} shapes of {FIT_MB:g} MB or more: time = t0 + bytes / rate")
    for who, (t0, rate) in fits.items():
        print(f"  {who:9} t0 {t0:5.2f} us, rate {rate:5.2f} TB/s")
    t0 = fits["fearless"][0]
    print(f"\nwhat {TARGET:.0%} of copy needs of a GEMV that pays the fit's t0 ({t0:.2f} us):")
    for n, k, mb, ours, _, copy, _ in big:
        budget = copy / (2 * TARGET)
        need = mb / (budget - t0) if budget > t0 else float("inf")
        print(f"  N {n:6} K {k:6}: at most {budget:6.2f} us, {need:5.2f} TB/s past t0 "
              f"(fearless now {ours:6.2f} us)")


if __name__ == "__main__":
    main()
