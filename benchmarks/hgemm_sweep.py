"""Tile-configuration sweep of the mma.sync HGEMM (``examples/hgemm.py``) against cuBLAS.

For each ``Tiles`` in CONFIGS: build the kernel with ``make_hgemm``, check it once against
``torch.matmul`` in f32 (relative error = max |got - want| / max |want| < 1e-2), then time it
with ``bench_simt_depth.Clock`` (CUDA events, host enqueue hidden behind a sleep, about 50 ms of
launches per repetition, median of 5) at 8192^3 and 4096^3 f16, with cuBLAS (``torch.matmul``
f16) timed in the same run. A table last: config, registers per thread (of the loaded cubin),
ms, TFLOP/s, % of cuBLAS; the fastest configuration at 8192^3 is named at the end.

Configurations over 48 KB of shared memory (``stages * (bm + bn) * bk * 2`` bytes) have their
stages in dynamic shared memory, opted in up to 227 KB per block (see the example's docstring).

On the GPU machine, from the repository root:
    PYTHONPATH=src:. python3 benchmarks/hgemm_sweep.py [--sizes 8192,4096] [--only NAME,...]
Output: a line per measurement as it goes and the table; ``$OUT`` (when set) gets
hgemm_sweep.log and hgemm_sweep.json. ``--dry-run`` (no GPU): compiles every configuration to
PTX for sm_90, prints the main loop's instruction mix per 16-wide k step and, where ``ptxas`` is
on PATH, its registers, spills and shared memory; then runs every configuration once on the CPU
backend at a small size, checked against NumPy.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fearless as fl
from examples.hgemm import DEFAULT, Tiles, launch_threads, make_hgemm
from fearless.runtime.launch import device_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_log, beside this script
from run_log import RunLog

T = Tiles
CONFIGS = (
    T(128, 128, 32, 2, 4, 3),   # the original: 8 warps of 64 x 32, one block per SM
    T(128, 128, 32, 2, 2, 3),   # 4 warps of 64 x 64: two blocks per SM (<= 255 registers)
    T(128, 128, 16, 2, 2, 4),   # the same, 4 stages of k 16 (32 KB): the best under 48 KB
    T(128, 256, 32, 2, 4, 2),   # 8 warps of 64 x 64, double-buffered
    T(128, 128, 32, 2, 2, 4),   # 4 warps of 64 x 64, 4 stages (64 KB, dynamic)
    T(128, 128, 32, 2, 2, 5),   # 5 stages (80 KB)
    T(128, 128, 64, 2, 2, 3),   # k 64, 3 stages (96 KB): half the barriers per k
    T(128, 256, 32, 2, 4, 3),   # CUTLASS's sm80 default shape: 8 warps of 64 x 64 (96 KB)
    T(128, 256, 32, 2, 4, 4),   # the same, 4 stages (128 KB)
    T(256, 128, 32, 4, 2, 3),   # transposed (96 KB)
    T(128, 256, 64, 2, 4, 3),   # k 64 (192 KB)
    T(128, 128, 32, 2, 4, 4),   # 8 warps of 64 x 32, 4 stages (64 KB)
)
SIZES = (8192, 4096)


# -- the PTX view: what the main loop executes ----------------------------------------------------

_CATEGORIES = (("mma", r"^mma\."), ("ldmatrix", r"^ldmatrix"), ("cp.async", r"^cp\.async\.c[ag]\."),
               ("cp.async.group", r"^cp\.async"), ("barrier", r"^bar"), ("branch", r"^bra"),
               ("predicate", r"^(setp|and\.pred|or\.pred|not\.pred|xor\.pred|selp)"),
               ("int64", r"^\w+(\.\w+)*\.[sub]64\b"), ("int32", r"^\w+(\.\w+)*\.[sub]32\b"),
               ("cvt", r"^cvt"), ("ld/st", r"^(ld|st)\."), ("atom", r"^atom"))


def _blocks(ptx: str) -> dict:
    """Basic blocks of the kernel body: label -> instructions (comments and directives out)."""
    body = ptx[ptx.index("{", ptx.index(".entry")):]
    out, cur = {"entry": []}, "entry"
    for line in body.splitlines():
        s = line.split("//")[0].strip()
        if not s or s.startswith(".") or s in "{}":
            continue
        if re.fullmatch(r"\$\w+:", s):
            cur = s[:-1]
            out[cur] = []
        else:
            out[cur].append(s)
    return out


def _successors(blocks: dict) -> dict:
    names, succ = list(blocks), {}
    for i, name in enumerate(names):
        ins = blocks[name]
        succ[name] = [m.group(1) for x in ins if (m := re.search(r"bra(?:\.uni)?\s+(\$\w+);", x))]
        if not (ins and re.match(r"^(bra|ret)", ins[-1])) and i + 1 < len(names):
            succ[name].append(names[i + 1])
    return succ


def _cycles(succ: dict) -> list:
    """Strongly connected components with a cycle (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root, first in succ.items():
        if root in index:
            continue
        work = [(root, iter(first))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(succ[nxt])))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1 or node in succ[node]:
                    out.append(comp)
    return out


def loop_profile(ptx: str) -> tuple[collections.Counter, int]:
    """Instruction counts of the main loop (the largest cycle holding mma), error-reporting
    blocks (those with the error word's compare-and-swap, and blocks only they reach) left out;
    and the number of basic blocks on the hot path."""
    blocks = _blocks(ptx)
    succ = _successors(blocks)
    loops = [c for c in _cycles(succ) if any(x.startswith("mma") for n in c for x in blocks[n])]
    if not loops:
        return collections.Counter(), 0
    loop = max(loops, key=lambda c: sum(len(blocks[n]) for n in c))
    preds = collections.defaultdict(set)
    for n in loop:
        for m in succ[n]:
            preds[m].add(n)
    cold = {n for n in loop if any(".cas." in x for x in blocks[n])}
    grown = True
    while grown:
        new = {n for n in loop if n not in cold and preds[n] and preds[n] <= cold}
        cold |= new
        grown = bool(new)
    counts = collections.Counter()
    for n in loop:
        if n not in cold:
            for x in blocks[n]:
                x = re.sub(r"^@!?%p\d+\s+", "", x)
                counts[next((c for c, rx in _CATEGORIES if re.search(rx, x)),
                            "other:" + x.split()[0])] += 1
    return counts, len(loop) - len(cold)


def ptxas_facts(ptx: str, arch: str = "sm_90") -> str:
    """``ptxas -v``'s registers, spills and shared memory, or why not."""
    exe = shutil.which("ptxas")
    if exe is None:
        return "ptxas not on PATH"
    r = subprocess.run([exe, f"-arch={arch}", "-v", "-o", os.devnull, "-"], input=ptx,
                       capture_output=True, text=True, check=False)
    text = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    smem = re.search(r"(\d+) bytes smem", text)
    if r.returncode or not regs:
        return f"ptxas failed: {text.strip()[-300:]}"
    return (f"{regs.group(1)} registers, spills {spill.group(1)}/{spill.group(2)} B "
            f"(store/load), {smem.group(1) if smem else '?'} B shared")


def kernel_ptx(kern, arch: str = "sm_90") -> str:
    from fearless.cli import param_types
    return kern.inspect("ptx", param_types(kern, {}), arch)


# -- recording ------------------------------------------------------------------------------------

class Sweep(RunLog):
    def __init__(self, out_dir):
        super().__init__(out_dir, "hgemm_sweep")

    def table(self, cublas: dict) -> None:
        self.log("")
        self.log(f"{'config':32s} {'size':>6s} {'regs':>5s} {'ms':>8s} {'TFLOP/s':>8s} "
                 f"{'% cuBLAS':>9s}  check")
        for n, res in sorted(cublas.items(), reverse=True):
            self.log(f"{'cuBLAS (torch.matmul f16)':32s} {n:6d} {'':>5s} {res['ms']:8.3f} "
                     f"{2 * n ** 3 / (res['ms'] * 1e9):8.1f} {100.0:8.1f}%")
        for row in sorted(self.rows, key=lambda r: (-r["n"], r.get("ms") or 1e9)):
            ms = row.get("ms")
            if ms is None:
                self.log(f"{row['config']:32s} {row['n']:6d} {row.get('registers', '?')!s:>5s} "
                         f"{'failed':>8s}  {row.get('why', '')}")
                continue
            base = cublas.get(row["n"])
            pct = f"{100 * base['ms'] / ms:8.1f}%" if base else f"{'-':>9s}"
            self.log(f"{row['config']:32s} {row['n']:6d} {row.get('registers', '?')!s:>5s} "
                     f"{ms:8.3f} {row['tflops']:8.1f} {pct}  rel err {row['error']:.2e}"
                     f"{' HOST-BOUND' if row.get('host_bound') else ''}")


# -- the GPU run ----------------------------------------------------------------------------------

def registers_of(kern):
    """Registers per thread of the loaded cubin (after a launch), or None."""
    for entry in getattr(kern, "_entries", {}).values():
        loaded = getattr(entry, "loaded", None)
        if loaded is not None:
            return loaded.registers
    return None


def gpu(rep: Sweep, configs, sizes) -> None:
    import torch
    from bench_simt_depth import Clock

    fl.set_backend("cuda")
    clock = Clock(torch)
    rep.log(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    kernels = {}
    for tiles in configs:
        t0 = time.perf_counter()
        try:
            kernels[tiles] = make_hgemm(tiles)
        except Exception:  # noqa: BLE001 - one bad configuration leaves its rows out
            rep.fail(f"build {tiles.name}")
        rep.data.setdefault("build_s", {})[tiles.name] = time.perf_counter() - t0
    cublas = {n: one_size(rep, clock, torch, kernels, n) for n in sizes}
    rep.data["cublas"] = cublas
    rep.table(cublas)
    timed = [r for r in rep.rows if r.get("ms") is not None and r["n"] == max(sizes)]
    if timed:
        best = min(timed, key=lambda r: r["ms"])
        rep.log(f"\nfastest at {best['n']}^3: {best['config']} ({best['tflops']:.1f} TFLOP/s, "
                f"{100 * cublas[best['n']]['ms'] / best['ms']:.1f}% of cuBLAS); the example's "
                f"default is {DEFAULT.name}")


def one_size(rep: Sweep, clock, torch, kernels: dict, n: int) -> dict:
    """cuBLAS's timing at n^3 after every kernel's (each checked once, then timed)."""
    ta = (torch.rand(n, n, device="cuda") - 0.5).half()
    tb = (torch.rand(n, n, device="cuda") - 0.5).half()
    tc = torch.empty(n, n, device="cuda", dtype=torch.float16)
    want = torch.matmul(ta.float(), tb.float())
    a, b, c = fl.asarray(ta), fl.asarray(tb), fl.asarray(tc.view(-1))
    base = clock(lambda: torch.matmul(ta, tb))
    rep.log(f"cuBLAS {n}^3 f16: {base['ms']:.3f} ms = {2 * n ** 3 / (base['ms'] * 1e9):.1f} "
            "TFLOP/s")
    for tiles, kern in kernels.items():
        row = {"config": tiles.name, "n": n}
        rep.rows.append(row)
        try:
            t0 = time.perf_counter()
            launch = kern.prepare(launch_threads(tiles, n, n))
            tc.fill_(float("nan"))
            kern[launch](a, b, c, n)   # compiles and loads on the first size
            fl.synchronize()
            row["first_call_s"] = time.perf_counter() - t0
            row["registers"] = registers_of(kern)
            row["error"] = ((tc.float() - want).abs().max() / want.abs().max()).item()
            if not row["error"] < 1e-2:  # NaN (an unwritten element) fails too
                row["why"] = f"wrong result: relative error {row['error']:.3g}"
                rep.log(f"  {tiles.name} {n}^3: {row['why']}")
                continue
            res = clock(lambda kern=kern, launch=launch: kern[launch](a, b, c, n))
            fl.synchronize()
            row.update(ms=res["ms"], reps_ms=res["reps_ms"], host_bound=res["host_bound"],
                       tflops=2 * n ** 3 / (res["ms"] * 1e9))
            rep.log(f"  {tiles.name} {n}^3: {res['ms']:.3f} ms = {row['tflops']:.1f} TFLOP/s = "
                    f"{100 * base['ms'] / res['ms']:.1f}% of cuBLAS, {row['registers']} "
                    f"registers, rel err {row['error']:.2e}, first call "
                    f"{row['first_call_s']:.1f} s")
        except Exception:  # noqa: BLE001
            row["why"] = "raised (see the log)"
            rep.fail(f"{tiles.name} {n}^3")
    return base


# -- the dry run ----------------------------------------------------------------------------------

def dry_run(rep: Sweep, configs) -> bool:
    from examples.hgemm import run
    rep.log("PTX for sm_90, main loop per 16-wide k step (error-reporting blocks left out):")
    for tiles in configs:
        t0 = time.perf_counter()
        try:
            ptx = kernel_ptx(make_hgemm(tiles))
        except Exception:  # noqa: BLE001
            rep.fail(f"compile {tiles.name}")
            continue
        counts, hot = loop_profile(ptx)
        steps = tiles.stages * tiles.bk // 16  # the loop body is unrolled over the stages
        mix = " ".join(f"{k} {v / steps:.1f}" for k, v in sorted(counts.items()))
        rep.log(f"  {tiles.name}: {ptxas_facts(ptx)}; {time.perf_counter() - t0:.1f} s")
        rep.log(f"      {mix}; total {sum(counts.values()) / steps:.1f}, {hot} basic blocks "
                f"per {tiles.stages} stages")
        rep.rows.append({"config": tiles.name, "ptx_loop_per_k16": {k: v / steps for k, v in
                                                                    counts.items()}})
    fl.set_backend("cpu")
    ok = True
    cpu_limit = device_limits("cpu").max_shared_optin
    for tiles in configs:
        if tiles.shared_bytes > cpu_limit:  # the cpu backend keeps sm_86's opt-in limit
            rep.log(f"  cpu {tiles.name}: skipped, {tiles.shared_bytes} bytes of shared memory "
                    f"> the cpu backend's {cpu_limit}")
            continue
        # two tiles of C; one pass round the stages and then some, with stages left unused
        shape = (tiles.bm, 2 * tiles.bn, tiles.bk * (tiles.stages + 1))
        try:
            result = run(shape, repeat=0, kern=make_hgemm(tiles))
            rep.log(f"  cpu {tiles.name} {shape}: error ratio {result.error_ratio:.3f} (<= 1)")
        except Exception:  # noqa: BLE001
            rep.fail(f"cpu {tiles.name}")
            ok = False
    return ok and not rep.data["errors"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: PTX + ptxas facts per config, every config on the CPU backend")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--only", default="", help="comma-separated config names")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if not args.only or c.name in args.only.split(",")]
    out = os.environ.get("OUT")
    rep = Sweep(Path(out) if out else None)
    t0 = time.perf_counter()
    try:
        if args.dry_run:
            ok = dry_run(rep, configs)
        else:
            gpu(rep, configs, [int(s) for s in args.sizes.split(",")])
            ok = not rep.data["errors"]
    finally:
        rep.log(f"total {time.perf_counter() - t0:.1f} s")
        rep.save()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
