"""Host cost of a launch: microseconds of Python and driver work per kernel launch (issue 10).

What an LLM decode step pays a few hundred times: the time from a launch call to its return,
the GPU kept out of it. Each case enqueues N launches (200: fewer than the GPU's queue holds,
so a back-pressured queue does not stand in for the host's cost) of a kernel that does almost
nothing (32 elements) back to back, measures the wall clock of the loop, then synchronises
outside the timing; the median of several repetitions, divided by N.

Cases, each beside its peers in the same run:
1. SIMT eager launch with 1, 4 and 16 tensor arguments (``k[launch](...)``, one PreparedLaunch
   reused), with fearless tensors and with torch tensors; peers: a CuPy RawKernel, a Triton
   kernel and cuda.core's ``launch`` with the same number of pointers, and ``torch.add(out=)``.
2. Tile: building one lazy operation (``k(out.partition(t), x)`` then ``cancel()``), and one
   operation built and synced per iteration, against ``torch.add`` + ``synchronize``.
3. A graph of 32 kernels (``fl.graph``): ``replay()`` (enqueue only), per replay and per
   kernel; ``launch().sync()`` (the GPU's time included); the bare ``cuGraphLaunch``.
4. The cost of observing: the 4-tensor SIMT launch and the tile build + sync with ``fl.stats``
   off, counting (``fl.stats.enable()``) and profiling (``fl.profile()``: a CUDA event pair per
   launch, resolved every 1024 launches), each beside the others in the same run.
Anchor rows, published by their authors (not run here): cutile-rs 0.4, 4 tensors on a cache hit,
1.6-1.9 us; numba-cuda-mlir, one array, 2.98 us (../shared/reference/peers.md).

Run on the GPU machine from a checkout:  PYTHONPATH=src:. python3 benchmarks/bench_launch.py
``--dry-run`` runs the fearless cases on the cpu backend (no peers: their times are not launch
costs there) to check the script; ``--stats`` runs only case 4. Output: a table at the end; ``$OUT`` (default ./bench_out)
gets bench_launch.log and bench_launch.json.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_log import RunLog  # noqa: E402

N_ELEMS = 32
ARGS = (1, 4, 16)
ANCHORS = [("anchor: cutile-rs 0.4, 4 tensors, cache hit (published)", 1.6, 1.9),
           ("anchor: numba-cuda-mlir, 1 array (published)", 2.98, 2.98)]


def _source(counts) -> str:
    """fearless SIMT kernels with 1, 4, 16 tensor parameters (the last one written), a tile
    kernel, and Triton and CUDA C sources with as many pointers."""
    lines = ["import fearless as fl", "from fearless import tile as ft", ""]
    for n in counts:
        ins = [f"x{k}: fl.Slice[fl.f32]" for k in range(n - 1)]
        lines += ["@fl.kernel",
                  f"def k{n}({', '.join(ins + ['out: fl.DisjointSlice[fl.f32]'])}):",
                  "    i = fl.thread.index_1d()",
                  "    if i < len(out):",
                  f"        out[i] = {' + '.join(f'x{k}[i]' for k in range(n - 1)) or '1.0'}",
                  ""]
    lines += ["@ft.kernel", "def tile_add(o: ft.Out[fl.f32], x: ft.In[fl.f32]):",
              "    o.store(ft.load_like(x, o) + 1.0)", ""]
    return "\n".join(lines)


def _triton_source(counts) -> str:
    lines = ["import triton", "import triton.language as tl", ""]
    for n in counts:
        ptrs = [f"p{k}" for k in range(n)]
        body = " + ".join(f"tl.load(p{k} + offs, mask=m)" for k in range(n - 1)) or "1.0"
        lines += ["@triton.jit", f"def t{n}({', '.join(ptrs)}, n, BLOCK: tl.constexpr):",
                  "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
                  "    m = offs < n", f"    tl.store(p{n - 1} + offs, {body}, mask=m)", ""]
    return "\n".join(lines)


def _cuda_source(n: int) -> str:
    ins = ", ".join([f"const float* x{k}" for k in range(n - 1)] + ["float* out", "int n"])
    body = " + ".join(f"x{k}[i]" for k in range(n - 1)) or "1.0f"
    return (f'extern "C" __global__ void c{n}({ins}) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i < n) out[i] = {body};\n}}\n")


def _import(path: Path, name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Bench(RunLog):
    def __init__(self, out_dir, launches: int, reps: int, sync):
        super().__init__(out_dir, "bench_launch")
        self.launches, self.reps, self.sync = launches, reps, sync

    def host_us(self, launch_once, launches: int | None = None) -> float:
        """Median over repetitions of the wall clock of `launches` calls (default the run's),
        per call, in us; the GPU work is synchronised after each repetition, outside the
        timing."""
        launches = launches or self.launches
        for _ in range(20):
            launch_once()
        self.sync()
        times = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            for _ in range(launches):
                launch_once()
            times.append((time.perf_counter() - t0) / launches * 1e6)
            self.sync()
        return statistics.median(times)

    def case(self, group: str, name: str, launch_once, note: str = "",
             launches: int | None = None) -> None:
        try:
            us = self.host_us(launch_once, launches)
        except Exception:
            self.fail(f"{group}: {name}")
            return
        self.rows.append({"group": group, "case": name, "us": us, "note": note})
        self.log(f"{group:10} {name:48} {us:8.2f} us {note}")

    def table(self) -> None:
        self.log("")
        self.log("=" * 78)
        self.log(f"{'group':10} {'case':48} {'host us/launch':>16}")
        for r in self.rows:
            self.log(f"{r['group']:10} {r['case']:48} {r['us']:16.2f}")
        for name, lo, hi in ANCHORS:
            self.log(f"{'anchor':10} {name[:48]:48} {lo:>9.2f}-{hi:.2f}")
        self.log(f"errors: {len(self.data['errors'])}")


def fearless_simt(bench: Bench, mod, fl, torch) -> None:
    for n in ARGS:
        kernel = getattr(mod, f"k{n}")
        launch = kernel.prepare(N_ELEMS)
        host = [np.random.default_rng(k).standard_normal(N_ELEMS).astype(np.float32)
                for k in range(n - 1)]
        args = [fl.asarray(h) for h in host] + [fl.zeros(N_ELEMS)]
        bench.case("simt", f"fearless, {n} fearless tensors", lambda: kernel[launch](*args))
        want = sum((h.astype(np.float64) for h in host), np.zeros(N_ELEMS)) if n > 1 else \
            np.ones(N_ELEMS)
        got = args[-1].numpy()
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            bench.data["errors"].append({"where": f"simt k{n}", "traceback": "wrong values"})
            bench.log(f"!! k{n} computed wrong values")
        if torch is not None:
            targs = [torch.from_numpy(h).cuda() for h in host] + \
                [torch.zeros(N_ELEMS, device="cuda")]
            bench.case("simt", f"fearless, {n} torch tensors", lambda: kernel[launch](*targs))
            if not np.allclose(targs[-1].cpu().numpy(), want, rtol=1e-5, atol=1e-5):
                bench.data["errors"].append({"where": f"simt k{n} torch", "traceback": "wrong"})
                bench.log(f"!! k{n} computed wrong values on torch tensors")
        if n == 4:
            _floor_and_profile(bench, kernel, launch, args, targs if torch is not None else None)


def _floor_and_profile(bench: Bench, kernel, launch, args, targs) -> None:
    """The driver's own share (one packed cuLaunchKernel, no checks) and a profile of the
    4-tensor launch, written to $OUT/bench_launch_profile.txt."""
    import cProfile
    import io
    import pstats

    from fearless.runtime import pack
    kernel[launch](*args)
    if not launch._plans:
        return  # the cpu backend (--dry-run) launches without plans
    plan = next(iter(launch._plans.values()))
    address = plan.params.address
    bench.case("simt", "floor: cuLaunchKernel of a packed k4 (ctypes)",
               lambda: pack.launch(plan.function, plan.grid, plan.block, 0, 0, address, "k4"))
    if targs is not None:
        import torch
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            bench.case("simt", "fearless, 4 torch tensors, on a torch stream",
                       lambda: kernel[launch](*targs))
        side.synchronize()
    for name, call_args in (("fearless", args), ("torch", targs)):
        if call_args is None:
            continue
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3000):
            kernel[launch](*call_args)
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        if bench.out_dir is None:
            continue
        with open(Path(bench.out_dir) / "bench_launch_profile.txt", "a") as f:
            f.write(f"==== k4, {name} tensors, 3000 launches ====\n{text.getvalue()}\n")


def peers_simt(bench: Bench, torch, tmp: Path) -> None:
    a, b, c = (torch.rand(N_ELEMS, device="cuda") for _ in range(3))
    bench.case("simt", "torch.add(a, b, out=c) (3 tensors)", lambda: torch.add(a, b, out=c))
    try:
        import cupy as cp
        for n in ARGS:
            kern = cp.RawKernel(_cuda_source(n), f"c{n}")
            arrs = [cp.ones(N_ELEMS, dtype=cp.float32) for _ in range(n)]
            nn = np.int32(N_ELEMS)
            bench.case("simt", f"CuPy RawKernel, {n} pointers",
                       lambda kern=kern, arrs=arrs, nn=nn: kern((1,), (128,), (*arrs, nn)))
    except Exception:
        bench.fail("CuPy")
    try:
        path = tmp / "tr_kernels.py"
        path.write_text(_triton_source(ARGS))
        tr = _import(path, "tr_kernels")
        for n in ARGS:
            fn = getattr(tr, f"t{n}")
            ts = [torch.ones(N_ELEMS, device="cuda") for _ in range(n)]
            bench.case("simt", f"Triton, {n} pointers",
                       lambda fn=fn, ts=ts: fn[(1,)](*ts, N_ELEMS, BLOCK=32))
    except Exception:
        bench.fail("Triton")
    try:
        from cuda.core import Device, LaunchConfig, Program, launch
        dev = Device()
        dev.set_current()
        stream = dev.create_stream()
        config = LaunchConfig(grid=1, block=128)
        for n in ARGS:
            code = Program(_cuda_source(n), code_type="c++").compile("cubin")
            kern = code.get_kernel(f"c{n}")
            ts = [torch.ones(N_ELEMS, device="cuda") for _ in range(n)]
            ptrs = [t.data_ptr() for t in ts]
            bench.case("simt", f"cuda.core launch, {n} pointers",
                       lambda kern=kern, ptrs=ptrs: launch(stream, config, kern, *ptrs,
                                                           np.int32(N_ELEMS)),
                       note="(its own stream)")
        stream.sync()
    except Exception:
        bench.fail("cuda.core")


def fearless_tile(bench: Bench, mod, fl, torch) -> None:
    x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
    held = {"part": fl.zeros(1 << 16).partition(1024)}  # moved in and given back each time

    def build():
        held["part"] = mod.tile_add(held["part"], x).cancel()[0]

    def build_sync():
        held["part"] = mod.tile_add(held["part"], x).sync()[0]

    bench.case("tile", "fearless: build an operation (then cancel)", build)
    bench.case("tile", "fearless: build + .sync() (2^16 f32)", build_sync)
    got = held["part"].unpartition().numpy()
    if not np.array_equal(got, np.arange(1 << 16, dtype=np.float32) + 1):
        bench.data["errors"].append({"where": "tile_add", "traceback": "wrong values"})
        bench.log("!! tile_add computed wrong values")
    if torch is not None:
        a = torch.rand(1 << 16, device="cuda")
        c = torch.empty_like(a)

        def torch_sync():
            torch.add(a, 1.0, out=c)
            torch.cuda.synchronize()
        bench.case("tile", "torch.add + synchronize (2^16 f32)", torch_sync)


def fearless_graph(bench: Bench, mod, fl, kernels: int = 32) -> None:
    out = fl.zeros(1 << 16)
    x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
    part = out.partition(1024)
    op = mod.tile_add(part, x)
    for _ in range(kernels - 1):
        op = op.then(lambda r: mod.tile_add(r[0], x))
    graph = fl.graph(op)
    # few replays per repetition: 200 replays of 32 kernels fill the GPU's queue, and the
    # enqueue then waits for the GPU (36 us per replay measured so, against 3.4 us for 50)
    replays = 8
    bench.case("graph", f"fearless: replay() of {kernels} kernels (enqueue)", graph.replay,
               launches=replays)
    last = bench.rows[-1] if bench.rows and bench.rows[-1]["group"] == "graph" else None
    if last is not None:
        bench.rows.append({"group": "graph", "case": "  ... per kernel node",
                           "us": last["us"] / kernels, "note": ""})
    bench.case("graph", f"fearless: launch().sync() of {kernels} kernels (GPU time included)",
               lambda: graph.launch().sync())
    if graph.backend == "cuda":
        stream = fl.current_stream()
        bench.case("graph", f"floor: cuGraphLaunch of the {kernels} kernels (cuda.core)",
                   lambda: graph._executable.launch(stream.core), launches=replays)
    graph.release()


def stats_modes(bench: Bench, mod, fl) -> None:
    """Case 4: the same launches with fl.stats off, counting and profiling."""
    kernel = mod.k4
    launch = kernel.prepare(N_ELEMS)
    args = [fl.asarray(np.ones(N_ELEMS, np.float32)) for _ in range(3)] + [fl.zeros(N_ELEMS)]
    x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
    held = {"part": fl.zeros(1 << 16).partition(1024)}

    def tile_sync():
        held["part"] = mod.tile_add(held["part"], x).sync()[0]

    was = fl.stats.on
    fl.stats.disable()
    try:
        for mode in ("off", "counting", "profiling"):
            fl.stats.reset()
            if mode == "counting":
                fl.stats.enable()
            with fl.profile() if mode == "profiling" else contextlib.nullcontext():
                bench.case("stats", f"k4, 4 fearless tensors, fl.stats {mode}",
                           lambda: kernel[launch](*args))
                bench.case("stats", f"tile build + .sync(), fl.stats {mode}", tile_sync)
            if mode == "profiling":
                t = fl.stats()["kernels"]["k4"]["device_time"]
                bench.log(f"           k4 launch times ({t['clock']}): {t['count']} timed, "
                          f"p50 {t['p50_s'] * 1e6:.2f} us, p99 {t['p99_s'] * 1e6:.2f} us")
            fl.stats.disable()
    finally:
        fl.stats.reset()
        fl.stats.enable(was)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the cpu backend, no peers")
    p.add_argument("--stats", action="store_true",
                   help="only the cost of fl.stats and fl.profile() per launch (case 4)")
    p.add_argument("--launches", type=int, default=200)
    p.add_argument("--reps", type=int, default=40)
    a = p.parse_args(argv)
    out_dir = Path(os.environ.get("OUT", "bench_out"))
    os.environ.setdefault("FEARLESS_CACHE_DIR", tempfile.mkdtemp(prefix="fearless-bench-"))
    import fearless as fl
    torch = None
    if a.dry_run:
        fl.set_backend("cpu")
        launches, reps = min(a.launches, 50), min(a.reps, 2)
        sync = fl.synchronize
    else:
        import torch
        launches, reps = a.launches, a.reps

        def sync():
            fl.synchronize()
            torch.cuda.synchronize()
    bench = Bench(out_dir, launches, reps, sync)
    bench.log(f"backend {fl.current_backend()}, {launches} launches x {reps} repetitions")
    tmp = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    path = tmp / "launch_kernels.py"
    path.write_text(_source(ARGS))
    mod = _import(path, "launch_kernels")
    sections = (("fearless simt", lambda: fearless_simt(bench, mod, fl, torch)),
                ("peers", lambda: peers_simt(bench, torch, tmp) if torch else None),
                ("fearless tile", lambda: fearless_tile(bench, mod, fl, torch)),
                ("fearless graph", lambda: fearless_graph(bench, mod, fl)),
                ("fl.stats", lambda: stats_modes(bench, mod, fl)))
    for section, run in sections[-1:] if a.stats else sections:
        try:
            run()
        except Exception:
            bench.fail(section)
    bench.table()
    bench.save()
    return 1 if bench.data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
