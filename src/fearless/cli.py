"""The ``fearless`` command: doctor, demo, inspect, compile, export, tune, stats, sanitize.

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
    fearless tune TARGET --shape a=4096x4096,... [--signature a=f16,...] [--scalar n=3]
        tune an ft.autotune kernel ahead of time on this machine (its GPU) for arguments of
        those shapes (contiguous; floats random normal, integers and bools zero, Outs zero)
        and store the ranking where its calls find it (FEARLESS_CACHE_DIR/autotune/); a
        --shape for every tensor parameter, a --scalar for every scalar one
    fearless stats SCRIPT [--format table|json|prometheus] [-- ARGS]
        run the script with fl.stats counting, then print what its kernels did
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
    tune = sub.add_parser("tune", help="tune an ft.autotune kernel ahead of time on this "
                                        "machine's GPU, into the cache its calls read")
    tune.add_argument("target")
    tune.add_argument("--shape", required=True, help="name=4096x4096,... for every tensor "
                                                     "parameter")
    tune.add_argument("--signature", default="", help="name=dtype,... for generic params")
    tune.add_argument("--scalar", default="", help="name=value,... for every scalar parameter")
    st = sub.add_parser("stats", help="run a script with fl.stats counting and print them")
    st.add_argument("script")
    st.add_argument("--format", choices=("table", "json", "prometheus"), default="table")
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
            return run_with_stats(args.script, script_args, args.format)
        if args.command == "compile":
            return compile_ahead(args.scripts, args.arch or ["sm_90"])
        if args.command == "tune":
            return tune_kernels(args.target, args.signature, args.shape, args.scalar)
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


def _kernels(target: str, autotuned: bool = False):
    """The kernels ``target`` names (module:name, file.py:name, or every one of a module):
    SIMT and tile kernels, or with ``autotuned`` the ``ft.autotune`` ones. Raises UsageError."""
    from fearless.kernel import Kernel
    from fearless.kernel.tile import TileKernel
    from fearless.tile.tuning import Autotuned
    kinds, what, noun = ((Autotuned,), "ft.autotune kernel", "ft.autotune kernel") \
        if autotuned else ((Kernel, TileKernel), "@fearless.kernel or tile kernel", "kernel")
    module_spec, _, name = target.rpartition(":") if ":" in target else (target, "", "")
    module = _load_module(module_spec)
    found = {n: v for n, v in vars(module).items() if isinstance(v, kinds)}
    listing = f"its {noun}s: {', '.join(found)}" if found else f"it defines no {noun}"
    fix = "; wrap it in @ft.autotune(configs=[ft.Config(...), ...]) (or with no configs, " \
          "the default space)" if autotuned else ""
    if name:
        k = getattr(module, name, None)
        if k is None:
            raise UsageError(f"{module_spec} has no '{name}'; {listing}")
        if not isinstance(k, kinds):
            article = "an" if autotuned else "a"
            raise UsageError(f"'{name}' in {module_spec} is a {type(k).__name__}, not {article} "
                             f"{what}; {listing}{fix}")
        return [k]
    if not found:
        raise UsageError(f"no {what} in {module_spec}{fix}")
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


def _parse_numbers(text: str, option: str = "--const") -> dict:
    """``bk=64,alpha=0.5`` -> {name: int or float}. Raises UsageError naming ``option``."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not name.isidentifier():
            raise UsageError(f"{option} {item!r}: expected name=value, e.g. "
                             f"{'bk=64' if option == '--const' else 'n=3'}")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"{option} {item!r}: {value!r} is not a number") from None
    return out


def _parse_shapes(text: str) -> dict:
    """``a=4096x4096,n=8`` -> {name: shape tuple}. Raises UsageError."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, spec = (s.strip() for s in item.partition("="))
        extents = spec.lower().split("x")
        if not eq or not name.isidentifier() or not all(
                e.strip().isdigit() and int(e) > 0 for e in extents):
            raise UsageError(f"--shape {item!r}: expected name=extents joined by x, such as "
                             f"a=4096x4096")
        out[name] = tuple(int(e) for e in extents)
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
    sig, given = _parse_signature(signature), _parse_numbers(consts)
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


def tune_kernels(target: str, signature: str, shape: str, scalar: str) -> int:
    """``fearless tune``: each ft.autotune kernel of ``target`` tuned for arguments of the
    ``shape`` given (``tuning.Autotuned.tune``), its report printed. Raises UsageError for the
    command line, AutotuneError where this machine does not tune (the cpu backend)."""
    sig, shapes, scalars = _parse_signature(signature), _parse_shapes(shape), \
        _parse_numbers(scalar, "--scalar")
    tuned = _kernels(target, autotuned=True)
    for option, given in (("--signature", sig), ("--shape", shapes), ("--scalar", scalars)):
        _check_names(tuned, given, option, False)
    for t in tuned:
        report = t.tune(**_tuning_arguments(t, sig, shapes, scalars))
        print(f"kernel '{t.name}': {report}")
    return 0


def _tuning_arguments(tuned, sig: dict, shapes: dict, scalars: dict) -> dict:
    """Arguments of ``tuned``'s runtime parameters as the command line describes them:
    contiguous tensors (In: floats random normal, integers and bools zero; Out and Atomic:
    zero) and the scalars' values. Raises UsageError for one left out or a rank that
    disagrees."""
    import numpy as np

    import fearless as fl
    from fearless.kernel import params as P
    given = {}
    for p in tuned.runtime:
        if p.kind is P.SCALAR:
            if p.name not in scalars:
                raise UsageError(f"give --scalar {p.name}=VALUE for kernel '{tuned.name}'")
            continue
        if p.name not in shapes:
            raise UsageError(f"give --shape {p.name}=EXTENTS (such as 4096x4096) for kernel "
                             f"'{tuned.name}'")
        dt, ndim, _ = sig.get(p.name, (None, None, None))
        rank = len(shapes[p.name])
        if ndim is not None and ndim != rank:
            raise UsageError(f"--signature gives '{p.name}' rank {ndim}, --shape rank {rank}")
        given[p.name] = (dt, rank, (1,) * rank if p.kind is P.OUT else None)
    try:
        infos = P.signature_infos(tuned.runtime, given)
    except P.Unspecified as exc:
        raise UsageError(str(exc)) from None
    rng, args = np.random.default_rng(0), {}
    for p, info in zip(tuned.runtime, infos):
        if p.kind is P.SCALAR:
            args[p.name] = scalars[p.name]
        elif p.kind is P.IN and info.dtype.is_float:
            args[p.name] = fl.asarray(rng.standard_normal(shapes[p.name]).astype(
                info.dtype.numpy))
        else:
            args[p.name] = fl.zeros(shapes[p.name], info.dtype)
    return args


def run_with_stats(script: str, script_args: list[str], fmt: str) -> int:
    """``fearless stats``: run ``script`` (as ``python script args``) with ``fl.stats``
    counting, then print them as a table, JSON or the Prometheus text format."""
    import runpy

    import fearless as fl
    path = _script(script)
    sys.path.insert(0, str(path.parent))
    fl.stats.reset()
    fl.stats.enable()
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
    """``fl.stats()`` as a table: a row per kernel (compiles summed over its signatures),
    then a line per tuning of an autotuned kernel."""
    rows = [f"{'kernel':24} {'launches':>9} {'cold':>5} {'cold s':>8} {'disk':>5} "
            f"{'disk s':>7} {'memory':>6}  refused / kernel errors"]
    for name, k in snap["kernels"].items():
        c = {key: sum(v[key] for v in k["compiles"].values())
             for key in ("cold", "cold_s", "disk", "disk_s", "memory")}
        errors = ", ".join(f"{e} {n}" for e, n in {**k["refused"], **k["kernel_errors"]}.items())
        rows.append(f"{name[:24]:24} {k['launches']:>9} {c['cold']:>5} {c['cold_s']:>8.3f} "
                    f"{c['disk']:>5} {c['disk_s']:>7.3f} {c['memory']:>6}  {errors or '-'}")
    for name, k in snap["kernels"].items():
        for r in k["autotune"]:
            rows.append(f"tuned {name} for {r['key'] or 'its call'}: {r['winner']} in "
                        f"{r['seconds']:.1f} s ({r['tried']} tried, {r['dropped']} dropped, "
                        f"{r['skipped']} skipped)")
    rows.append(f"graph replays: {snap['graphs']['replays']}")
    mem = snap["memory"]
    rows.append("device memory: " + (f"{mem['current']} bytes now, {mem['peak']} at most"
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
