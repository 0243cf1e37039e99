"""The ``fearless`` command: doctor, demo, inspect, compile, export, bench, tune, stats, sanitize.

    fearless doctor                      what works on this machine, and what to do otherwise
    fearless demo                        run the examples (GPU if usable, else CPU), check, time
    fearless inspect TARGET --stage S    print a compile stage of a kernel
        TARGET: module:function, path/to/file.py:function, or path/to/file.py (every kernel)
        S: ast, types, ir, passes, llvm, ptx, cubin, sass (needs nvdisasm or cuobjdump) for
           SIMT kernels; ast, types, ir, tileir, cubin for tile kernels
        --signature x=f32,out=f32:2      dtypes (and ranks) for generic parameters; a tile
                                         kernel's Out takes its tile shape: out=f32:2/128x128;
                                         specialised as a call with such arguments would be
                                         (kernel/params.py): one parameter binds a TypeVar for
                                         all, an annotation's dtype or rank is checked
        --const bk=64                    ft.Const values of a tile kernel (else their defaults)
    fearless compile SCRIPT... --arch sm_90 [--arch sm_80]
        run each script on the CPU with its kernels (SIMT and tile) compiling for the GPU
        instead of running: fills the JIT cache (FEARLESS_CACHE_DIR), so a GPU machine needs
        no tileiras, and fails on any kernel that does not compile
    fearless export TARGET [--signature ...] [--arch sm_90 ...] [--block 256] -o DIR
        SIMT kernels compiled ahead of time for C and C++ callers: a cubin per arch and a C
        header whose launch function checks the launch contract (fearless/export.py)
    fearless bench TARGET --signature "x=f32[n],..." --size n=4096 [--runs 100] [--compare T2]
        time one kernel: the first call (its compile) apart, warm-up, then P50/P99/min over
        the runs (CUDA events, L2 flushed between runs), GB/s and TFLOP/s from --bytes and
        --flops (fearless/bench.py; `fearless bench --help`)
    fearless tune TARGET --signature "a=f16[m,k],..." --size m=4096,k=4096 [--scalar n=3]
        [--const causal=1]
        tune an ft.autotune kernel ahead of time on this machine (its GPU) for arguments of
        those shapes (written as for bench) and store the ranking where its calls find it
        (fearless/tune.py)
    fearless stats SCRIPT [--format table|json|prometheus] [--profile] [-- ARGS]
        run the script with fl.stats counting (and with --profile, timing each launch: P50
        and P99 per kernel), then print what its kernels did
    fearless sanitize SCRIPT... [--tool T|all ...] [--jobs N] [-- ARGS]
        the scripts under compute-sanitizer; several runs go in parallel, with a summary
    fearless generate PATH --prompt-ids 1,2,3 [--max-new-tokens 64] [--batch B] [--dtype D]
        greedy tokens of a Hugging Face Llama/Qwen3 checkpoint directory (fearless.models),
        then the prefill and decode tokens/s

Exit status: 0, 1 when fearless refuses or fails (the error's message, without a traceback), 2
for a mistake on the command line (a missing file or kernel, a bad --signature or --const: one
line), 1 when a script given raises (its traceback, without fearless's frames).
"""
from __future__ import annotations

import argparse
import sys
import traceback

from fearless.compiler import STAGE_NAMES, TILE_STAGE_NAMES
from fearless.config import CONFIG
from fearless.errors import FearlessError
from fearless.targets import (ScriptError, UsageError, check_names, find_kernels, param_types,
                              parse_block, parse_consts, parse_signature, script_path, user_code)
from fearless.tracebacks import user_frames

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fearless", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check Python, LLVM, libdevice, driver, GPU and cache")
    demo = sub.add_parser("demo", help="run the examples and check them against NumPy")
    demo.add_argument("--png", default=None,
                      help="where the image-filter example writes its result (default: "
                           "$TMPDIR/fearless-demo/sobel_grace_hopper.png)")
    insp = sub.add_parser("inspect", help="print one compile stage of a kernel")
    insp.add_argument("target")
    insp.add_argument("--stage", choices=tuple(dict.fromkeys(STAGE_NAMES + TILE_STAGE_NAMES)),
                      default="ir")
    insp.add_argument("--signature", default="", help="name=dtype[:ndim][/tile],... for "
                                                      "generic params and tile shapes")
    insp.add_argument("--const", default="", help="name=value,... for a tile kernel's constants")
    insp.add_argument("--arch", default="sm_90")
    comp = sub.add_parser("compile", help="compile a script's kernels for GPUs ahead of time "
                                           "(no GPU needed)")
    comp.add_argument("scripts", nargs="+")
    comp.add_argument("--arch", action="append", default=None,
                      help="target, e.g. sm_90 (repeat for several; default sm_90)")
    exp = sub.add_parser("export", help="compile SIMT kernels ahead of time for C and C++ "
                                         "callers: cubins and a C header")
    exp.add_argument("target")
    exp.add_argument("--signature", default="", help="name=dtype[:ndim],... for generic params")
    exp.add_argument("--arch", action="append", default=None,
                     help="target, e.g. sm_90 (repeat for several; default sm_90)")
    exp.add_argument("--block", default=None,
                     help="the block when the contract does not fix it: 256, or 32x8 (x first)")
    exp.add_argument("-o", "--out", required=True, help="the directory to write into")
    _bench_parser(sub)
    tune = sub.add_parser("tune", help="tune an ft.autotune kernel ahead of time on this "
                                        "machine's GPU, into the cache its calls read")
    tune.add_argument("target")
    tune.add_argument("--signature", default="", help="name=[dtype][extents],... as for bench: "
                      "a shape for every tensor parameter, a dtype for generic ones")
    tune.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                      help="values of the names the shapes use (repeatable)")
    tune.add_argument("--shape", default="", help="name=4096x4096,...: shapes, the older form")
    tune.add_argument("--scalar", default="", help="name=value,... for every scalar parameter")
    tune.add_argument("--const", default="", help="name=value,... for ft.Const parameters that "
                                                  "no config sets (default: their defaults)")
    st = sub.add_parser("stats", help="run a script with fl.stats counting and print them")
    st.add_argument("script")
    st.add_argument("--format", choices=("table", "json", "prometheus"), default="table")
    st.add_argument("--profile", action="store_true",
                    help="also time each launch (fl.profile(): CUDA events on the GPU)")
    san = sub.add_parser("sanitize", help="run scripts under compute-sanitizer")
    san.add_argument("scripts", nargs="+", metavar="script")
    san.add_argument("--tool", action="append", default=None,
                     choices=("memcheck", "racecheck", "initcheck", "synccheck", "all"),
                     help="repeat for several; all: the four (default memcheck)")
    san.add_argument("--jobs", type=int, default=4, help="runs at once, for several")
    gen = sub.add_parser("generate", help="greedy tokens of a Hugging Face checkpoint "
                                          "(Llama, Qwen3)")
    gen.add_argument("path", help="checkpoint directory: config.json + *.safetensors")
    gen.add_argument("--prompt-ids", required=True, help="token ids, comma-separated")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--batch", type=int, default=1, help="copies of the prompt decoded at once")
    gen.add_argument("--dtype", default=None, help="bf16, f16 or f32 (default: the checkpoint's)")
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if argv[:1] in (["sanitize"], ["stats"]) and "--" in argv:  # the scripts' own arguments follow `--`
        k = argv.index("--")
        argv, script_args = argv[:k], argv[k + 1:]
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from fearless.doctor import run as doctor
            return doctor()
        if args.command == "sanitize":
            from fearless import sanitize
            tools = sanitize.TOOLS if "all" in (args.tool or ()) else \
                tuple(dict.fromkeys(args.tool or ("memcheck",)))
            if len(args.scripts) == 1 and len(tools) == 1:
                return sanitize.run(args.scripts[0], tools[0], script_args)
            return sanitize.run_many(args.scripts, tools, script_args, jobs=args.jobs)
        if args.command == "demo":
            from fearless.demo import run as demo_run
            return demo_run(args.png)
        if args.command == "generate":
            from fearless.models.cli import run as generate
            return generate(args.path, _token_ids(args.prompt_ids), args.max_new_tokens,
                            args.batch, args.dtype)
        if args.command == "stats":
            return run_with_stats(args.script, script_args, args.format, args.profile)
        if args.command == "bench":
            from fearless import bench
            return bench.run(args.target, args.signature, args.size, args.const, args.launch,
                             args.block, args.runs, args.warmup, args.bytes, args.flops,
                             args.compare, args.json)
        if args.command == "tune":
            from fearless import tune
            return tune.run(args.target, args.signature, args.shape, args.scalar, args.size,
                            args.const)
        if args.command == "compile":
            return compile_ahead(args.scripts, args.arch or ["sm_90"])
        if args.command == "export":
            return export_kernels(args.target, args.signature, args.arch or ["sm_90"],
                                  args.block, args.out)
        return inspect(args.target, args.stage, args.signature, args.arch, args.const)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FearlessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ScriptError as exc:
        cause = exc.__cause__
        tb = cause.__traceback__ if CONFIG.full_traceback else user_frames(cause.__traceback__)
        print("".join(traceback.format_exception(type(cause), cause, tb)).rstrip(),
              file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _bench_parser(sub) -> None:
    from fearless import bench
    b = sub.add_parser("bench", help="time one kernel: P50/P99/min over runs, the compile apart",
                       description=bench.__doc__.split("\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("target", help="FILE:kernel or module:kernel")
    b.add_argument("--signature", default="", help="name=[dtype][extents][/tile],...: a shape "
                   "per array parameter, e.g. x=f32[n],c=f32[m,n]/64x64")
    b.add_argument("--size", action="append", default=[], help="name=value,... binding the "
                   "names of the shapes, --bytes and --flops (repeatable)")
    b.add_argument("--const", default="", help="name=value,... for a tile kernel's constants")
    b.add_argument("--launch", default=None, help="a SIMT kernel's launch size, e.g. n or m,n "
                   "(default: the shape of its first written array)")
    b.add_argument("--block", default=None, help="a SIMT kernel's block: 256, or 32x8")
    b.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    b.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    b.add_argument("--bytes", default=None, help="bytes one run moves, e.g. 3*4*n: gives GB/s")
    b.add_argument("--flops", default=None, help="floating-point operations of one run, e.g. "
                   "2*m*n*k: gives TFLOP/s")
    b.add_argument("--compare", default=None, metavar="TARGET2",
                   help="a second kernel timed on the same inputs; prints the ratio")
    b.add_argument("--json", action="store_true", help="one JSON object instead of the table")


def _token_ids(text: str) -> list[int]:
    """``1,2,3`` -> [1, 2, 3]. Raises UsageError."""
    try:
        ids = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--prompt-ids {text!r}: expected integers joined by commas, such as "
                         f"1,2,3") from None
    if not ids:
        raise UsageError("--prompt-ids: the prompt needs at least one token id")
    return ids


def inspect(target: str, stage: str, signature: str, arch: str, consts: str = "") -> int:
    from fearless.kernel.params import CONST, NO_DEFAULT
    from fearless.kernel.tile import TileKernel
    sig, given = parse_signature(signature), parse_consts(consts)
    kernels = find_kernels(target)
    check_names(kernels, sig, "--signature", False)
    check_names(kernels, given, "--const", True)
    for k in kernels:
        types = param_types(k, sig)
        if isinstance(k, TileKernel):
            values = {p.name: given.get(p.name, p.default) for p in k.params if p.kind is CONST}
            missing = [n for n, v in values.items() if v is NO_DEFAULT]
            if missing:
                raise UsageError(f"give --const {missing[0]}=... for kernel '{k.name}'")
            print(f"// kernel {k.name}, stage {stage}")
            print(k.inspect(stage, types, values, arch), end="")
        else:
            print(f"// kernel {k.name}, stage {stage}")
            print(k.inspect(stage, types, arch), end="")
    return 0


def export_kernels(target: str, signature: str, archs: list[str], block: str | None,
                   out: str) -> int:
    """``fearless export``: each kernel of ``target`` (fearless/export.py)."""
    from fearless import export
    from fearless.kernel import Kernel
    sig = parse_signature(signature)
    kernels = find_kernels(target)
    check_names(kernels, sig, "--signature", False)
    tiles = [k.name for k in kernels if not isinstance(k, Kernel)]
    if tiles:   # refused before any file is written
        raise UsageError(f"{', '.join(tiles)}: tile kernels are not exported yet; name a SIMT "
                         f"kernel (FILE:kernel)")
    blk = parse_block(block)
    for k in kernels:
        done = export.export(k, param_types(k, sig), archs, out, blk)
        print(f"{done.header}  ({', '.join(str(p) for p in done.cubins.values())})")
    return 0


def run_with_stats(script: str, script_args: list[str], fmt: str, profile: bool = False) -> int:
    """``fearless stats``: run ``script`` (as ``python script args``) with ``fl.stats``
    counting (``profile``: and timing each launch), then print them as a table, JSON or the
    Prometheus text format."""
    import runpy

    import fearless as fl
    path = script_path(script)
    sys.path.insert(0, str(path.parent))
    fl.stats.reset()
    fl.stats.enable()
    fl.stats.profiling = profile
    argv, sys.argv = sys.argv, [str(path), *script_args]
    code = 0
    try:
        with user_code(f"running {script}"):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:   # the script's sys.exit(): its status, after the counts
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:   # printed whatever the script did: a failing run is when they matter most
        sys.argv = argv
        sys.path.remove(str(path.parent))
        fl.stats.disable()
        if fmt == "json":
            print(fl.stats.json(indent=2))
        elif fmt == "prometheus":
            print(fl.stats.prometheus(), end="")
        else:
            print(stats_table(fl.stats()))
    return code


def stats_table(snap: dict) -> str:
    """``fl.stats()`` as a table: a row per kernel (compiles summed over its signatures; with
    launch times, their P50 and P99 in microseconds and the clock), then a line per tuning of
    an autotuned kernel."""
    timed = any(k["device_time"] for k in snap["kernels"].values())
    rows = [f"{'kernel':24} {'launches':>9} {'cold':>5} {'cold s':>8} {'disk':>5} "
            f"{'disk s':>7} {'memory':>6}" + (f" {'p50 us':>9} {'p99 us':>9}" if timed else "")
            + "  refused / kernel errors"]
    for name, k in snap["kernels"].items():
        c = {key: sum(v[key] for v in k["compiles"].values())
             for key in ("cold", "cold_s", "disk", "disk_s", "memory")}
        errors = ", ".join(f"{e} {n}" for e, n in {**k["refused"], **k["kernel_errors"]}.items())
        t = k["device_time"]
        times = "" if not timed else f" {'-':>9} {'-':>9}" if t is None else \
            f" {t['p50_s'] * 1e6:>9.2f} {t['p99_s'] * 1e6:>9.2f}"
        rows.append(f"{name[:24]:24} {k['launches']:>9} {c['cold']:>5} {c['cold_s']:>8.3f} "
                    f"{c['disk']:>5} {c['disk_s']:>7.3f} {c['memory']:>6}{times}  "
                    f"{errors or '-'}")
    for name, k in snap["kernels"].items():
        for r in k["autotune"]:
            rows.append(f"tuned {name} for {r['key'] or 'its call'}: {r['winner']} in "
                        f"{r['seconds']:.1f} s ({r['tried']} tried, {r['dropped']} dropped, "
                        f"{r['skipped']} skipped)")
    clocks = sorted({k["device_time"]["clock"] for k in snap["kernels"].values()
                     if k["device_time"]})
    if clocks:
        rows.append(f"launch times: {', '.join(clocks)} (cuda_events: GPU time between CUDA "
                    f"events; host_wall: the cpu backend's wall clock)")
    rows.append(f"graph replays: {snap['graphs']['replays']}")
    mem = snap["memory"]
    device = "" if mem is None or mem["device_total"] is None else \
        f"; the device: {mem['device_free']} of {mem['device_total']} bytes free"
    rows.append("device memory: " + (f"{mem['current']} bytes now, {mem['peak']} at most{device}"
                                      if mem is not None else "not counted (cpu backend)"))
    return "\n".join(rows)


def compile_ahead(scripts: list[str], archs: list[str]) -> int:
    """Run ``scripts`` under ``runtime.ahead.compile_only(archs)`` and list what was compiled."""
    import runpy
    import time

    import fearless as fl
    from fearless.runtime.ahead import compile_only

    paths = [script_path(s) for s in scripts]
    fl.set_backend("cpu")
    total = 0
    for script, path in zip(scripts, paths):
        sys.path.insert(0, str(path.parent))
        t0 = time.perf_counter()
        argv, sys.argv = sys.argv, [str(path)]   # the script sees the argv `python script` gives
        try:
            with compile_only(archs) as made, user_code(f"running {script}"):
                runpy.run_path(str(path), run_name="__main__")
        finally:
            sys.argv = argv
        for kernel, types, constants, arch, compiled in made:
            shapes = ", ".join(f"{t}" for t in types)
            consts = "".join(f", {k}={v}" for k, v in sorted(constants.items()))
            print(f"{arch}  {kernel.name}({shapes}{consts}): {len(compiled.cubin)} bytes")
        print(f"{script}: {len(made)} cubins in {time.perf_counter() - t0:.1f} s")
        total += len(made)
    if not total:
        print("error: no kernel launch ran; nothing was compiled", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
