"""The ``fearless`` command: doctor, demo, inspect, compile, export, stats, sanitize.

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
import importlib
import importlib.util
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

from fearless import dtypes
from fearless.compiler import STAGE_NAMES, TILE_STAGE_NAMES
from fearless.config import CONFIG
from fearless.errors import FearlessError
from fearless.tracebacks import user_frames

_SIGNATURE_FORM = "name=dtype[:ndim][/tile], e.g. x=f32, out=f32:2 or z=f16:2/64x64"


class UsageError(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


class ScriptError(Exception):
    """The user's script raised while it was loaded or run (its exception is the cause)."""


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


def _script(spec: str) -> Path:
    path = Path(spec).resolve()
    if not path.is_file():
        raise UsageError(f"{spec}: no such file" if not path.exists() else
                         f"{spec} is not a file")
    return path


@contextmanager
def _user_code(what: str):
    """Around running the user's code: an exception from it (not fearless's, not the command
    line's) becomes a ScriptError ``"{what} raised ..."``, whose cause main() prints."""
    try:
        yield
    except (FearlessError, UsageError):
        raise
    except Exception as exc:
        raise ScriptError(f"{what} raised {type(exc).__name__}") from exc


def _load_module(spec: str):
    if spec.endswith(".py") or "/" in spec:
        path = _script(spec)
        sys.path.insert(0, str(path.parent))
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        with _user_code(f"loading {spec}"):
            mod_spec.loader.exec_module(module)
        return module
    sys.path.insert(0, str(Path.cwd()))  # like `python -c "import spec"` run here
    with _user_code(f"importing {spec}"):
        try:
            return importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            if exc.name == spec.split(".")[0] or spec.startswith(f"{exc.name}."):
                raise UsageError(f"cannot import {spec!r} ({exc}); give module:function of an "
                                 f"importable module, or path/to/file.py:function") from None
            raise  # a module the user's code imports is missing: its error


def _kernels(target: str):
    from fearless.kernel import Kernel
    from fearless.kernel.tile import TileKernel
    module_spec, _, name = target.rpartition(":") if ":" in target else (target, "", "")
    module = _load_module(module_spec)
    found = {n: v for n, v in vars(module).items() if isinstance(v, (Kernel, TileKernel))}
    listing = f"its kernels: {', '.join(found)}" if found else "it defines no kernel"
    if name:
        k = getattr(module, name, None)
        if k is None:
            raise UsageError(f"{module_spec} has no '{name}'; {listing}")
        if not isinstance(k, (Kernel, TileKernel)):
            raise UsageError(f"'{name}' in {module_spec} is a {type(k).__name__}, not a "
                             f"@fearless.kernel or tile kernel; {listing}")
        return [k]
    if not found:
        raise UsageError(f"no @fearless.kernel or tile kernel in {module_spec}")
    return list(found.values())


def _parse_signature(text: str) -> dict:
    """``x=f32,out=f32:2/64x64`` -> {name: (dtype, ndim or None, tile shape or None)}.
    Raises UsageError."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, spec = (s.strip() for s in item.partition("="))
        if not eq or not name.isidentifier() or not spec:
            raise UsageError(f"--signature {item!r}: expected {_SIGNATURE_FORM}")
        spec, _, tile = spec.partition("/")
        dtype, _, ndim = spec.partition(":")
        try:
            dt = dtypes.coerce(dtype.strip())
        except TypeError:
            raise UsageError(f"--signature {item!r}: {dtype.strip()!r} is not a dtype; one of "
                             f"{', '.join(d.name for d in dtypes.ALL)}") from None
        if ndim and not (ndim.strip().isdigit() and int(ndim) > 0):
            raise UsageError(f"--signature {item!r}: the rank {ndim!r} is not a positive "
                             f"integer")
        extents = tile.split("x") if tile else []
        if not all(n.strip().isdigit() and int(n) > 0 for n in extents):
            raise UsageError(f"--signature {item!r}: the tile shape {tile!r} is not positive "
                             f"extents joined by x, such as 64x64")
        out[name] = (dt, int(ndim) if ndim else None,
                     tuple(int(n) for n in extents) if extents else None)
    return out


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


def _parse_consts(text: str) -> dict:
    """``bk=64,alpha=0.5`` -> {name: int or float}. Raises UsageError."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not name.isidentifier():
            raise UsageError(f"--const {item!r}: expected name=value, e.g. bk=64")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"--const {item!r}: {value!r} is not a number") from None
    return out


def _names(kernel, constants: bool) -> list[str]:
    """The names of ``kernel``'s runtime parameters, or of its compile-time constants."""
    from fearless.kernel.params import CONST
    return [p.name for p in kernel.params if (p.kind is CONST) == constants]


def _check_names(kernels, given: dict, option: str, constants: bool) -> None:
    """Refuse a name in ``given`` that is a parameter (constant) of none of ``kernels``."""
    known = list(dict.fromkeys(n for k in kernels for n in _names(k, constants)))
    unknown = [n for n in given if n not in known]
    if unknown:
        which = ", ".join(f"'{k.name}'" for k in kernels)
        raise UsageError(f"{option} names '{unknown[0]}', which is not a "
                         f"{'constant' if constants else 'parameter'} of {which} "
                         f"(those are: {', '.join(known) or 'none'})")


def param_types(kernel, signature: dict) -> tuple:
    """The IR types of ``kernel``'s runtime parameters (SIMT or tile) that a call with
    arguments as ``signature`` describes them would specialise to (``kernel/params.py``):
    ``signature`` maps a name to (dtype, ndim or None, tile shape or None), the annotations fill
    the gaps. Raises UsageError for a generic parameter left open, ArgumentTypeError or
    ContractError for a signature the kernel refuses (as a call would)."""
    from fearless.kernel import params as P
    runtime = kernel.runtime_params
    try:
        infos = P.signature_infos(runtime, signature)
    except P.Unspecified as exc:
        raise UsageError(str(exc)) from None
    return P.specialise(kernel.name, runtime, infos)


def inspect(target: str, stage: str, signature: str, arch: str, consts: str = "") -> int:
    from fearless.kernel.params import CONST, NO_DEFAULT
    from fearless.kernel.tile import TileKernel
    sig, given = _parse_signature(signature), _parse_consts(consts)
    kernels = _kernels(target)
    _check_names(kernels, sig, "--signature", False)
    _check_names(kernels, given, "--const", True)
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
    sig = _parse_signature(signature)
    kernels = _kernels(target)
    _check_names(kernels, sig, "--signature", False)
    tiles = [k.name for k in kernels if not isinstance(k, Kernel)]
    if tiles:   # refused before any file is written
        raise UsageError(f"{', '.join(tiles)}: tile kernels are not exported yet; name a SIMT "
                         f"kernel (FILE:kernel)")
    blk = None
    if block is not None:
        parts = block.lower().split("x")
        if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--block {block!r}: expected positive extents joined by x, such "
                             f"as 256 or 32x8")
        blk = tuple(int(p) for p in parts)
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
    path = _script(script)
    sys.path.insert(0, str(path.parent))
    fl.stats.reset()
    fl.stats.enable()
    fl.stats.profiling = profile
    argv, sys.argv = sys.argv, [str(path), *script_args]
    code = 0
    try:
        with _user_code(f"running {script}"):
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
    launch times, their P50 and P99 in microseconds and the clock)."""
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

    paths = [_script(s) for s in scripts]
    fl.set_backend("cpu")
    total = 0
    for script, path in zip(scripts, paths):
        sys.path.insert(0, str(path.parent))
        t0 = time.perf_counter()
        argv, sys.argv = sys.argv, [str(path)]   # the script sees the argv `python script` gives
        try:
            with compile_only(archs) as made, _user_code(f"running {script}"):
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
