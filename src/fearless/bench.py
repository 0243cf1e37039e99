"""``fearless bench``: one kernel timed the way benchmarking guides ask.

    fearless bench FILE:kernel --signature SIG --size NAME=VALUE [...] [--runs 100]
                   [--warmup 10] [--bytes EXPR] [--flops EXPR] [--compare FILE:kernel2]
                   [--const NAME=VALUE] [--launch EXPR[,EXPR]] [--block 256] [--json]

    fearless bench examples/saxpy.py:saxpy --signature "x=[n],y=[n],out=[n]" \\
        --size n=2**24 --size a=2.5 --bytes "3*4*n" --flops "2*n"

Inputs: every array parameter needs a shape in ``--signature``, ``name=[dtype][extents]``
(``x=f32[n]``, ``a=f16[m,k]``, ``x=[n]`` to keep the annotation's dtype); an extent is an
expression of the ``--size`` names (``[n+1]``). A tile kernel's ``ft.Out`` also needs its tile
shape unless its annotation gives one: ``c=f32[m,n]/128x128``. Arrays the kernel reads hold
random values (floats: standard normal; integers: 0 to 15; bools: either), arrays it writes
start at zero; a scalar parameter takes the ``--size`` of its name, else 1. ``--size`` values
are expressions too (``n=2**24``), of the names bound before them. A SIMT kernel is launched
over ``--launch`` (default: the shape of its first written array) with ``--block`` (default:
its contract's, else ``prepare``'s). ``--const`` sets a tile kernel's ``ft.Const`` values.

Timing: the first call is timed on its own (it compiles: the JIT compile, cold or from the
disk cache, is reported apart; FEARLESS_CACHE=0 forces a cold compile), then ``--warmup``
untimed runs, then ``--runs`` timed runs, each on its own: on the GPU a pair of CUDA events
around it, after the L2 cache is flushed (twice the L2 read; ``autotuning/flush.py``);
on the cpu backend the wall clock around the NumPy interpreter (not a GPU time: the output
says so). Reported: P50, P99 (nearest rank), min and max, and at the P50 the GB/s of
``--bytes`` and the TFLOP/s of ``--flops`` (expressions of the sizes). ``--compare`` times a
second kernel on the same inputs (by parameter name) in the same process and prints the ratio
of their P50s. ``--json`` prints one JSON object instead of the table.
"""
from __future__ import annotations

import json
import statistics
import time

import numpy as np

from fearless.observe import percentile
from fearless.targets import (UsageError, check_names, evaluate, find_kernels, param_types,
                              parse_block, parse_consts, parse_signature, parse_sizes)


def run(target: str, signature: str, sizes: list[str], consts: str = "", launch: str | None = None,
        block: str | None = None, runs: int = 100, warmup: int = 10, nbytes: str | None = None,
        flops: str | None = None, compare: str | None = None, as_json: bool = False) -> int:
    """``fearless bench`` (the module docstring): print the table or the JSON; 0. Raises
    UsageError for a mistake on the command line, FearlessError as a launch would."""
    import fearless as fl
    from fearless.runtime import timing
    if runs < 1 or warmup < 0:
        raise UsageError(f"--runs {runs} / --warmup {warmup}: give at least one run and no "
                         f"negative warm-up")
    shapes: dict = {}
    sig = parse_signature(signature, shapes)
    bound = parse_sizes(sizes)
    given = parse_consts(consts)
    work = {"bytes": nbytes, "flops": flops}
    amounts = {k: None if v is None else evaluate(v, bound, f"--{k}") for k, v in work.items()}
    kernels = [_one(target)] + ([_one(compare)] if compare else [])
    check_names(kernels, sig, "--signature", False)
    if given:
        check_names(kernels, given, "--const", True)
    inputs = Inputs(sig, shapes, bound)
    results = []
    for k in kernels:
        call = _prepare(k, inputs, given, launch, parse_block(block))
        results.append(_time(fl, k, call, runs, warmup, amounts))
    backend = fl.current_backend()
    report = {"backend": backend,
              "device": _device_name() if backend == "cuda" else "the NumPy interpreter",
              "clock": "cuda_events" if backend == "cuda" else "host_wall",
              "runs": runs, "warmup": warmup, "l2_flush_bytes": timing.l2_flush_bytes(),
              "sizes": bound, "bytes": amounts["bytes"], "flops": amounts["flops"],
              "kernels": results,
              "ratio": None if len(results) < 2 else results[1]["p50_s"] / results[0]["p50_s"]}
    print(json.dumps(report, indent=2) if as_json else table(report))
    return 0


def _one(target: str):
    found = find_kernels(target)
    if len(found) != 1:
        raise UsageError(f"{target} defines {len(found)} kernels "
                         f"({', '.join(k.name for k in found)}); name one: FILE:kernel")
    return found[0]


def _is_tile(kernel) -> bool:
    from fearless.kernel.tile import TileKernel
    return isinstance(kernel, TileKernel)


class Inputs:
    """The host data of each parameter name, made once and shared by the compared kernels."""

    def __init__(self, sig: dict, shapes: dict, bound: dict):
        self.sig, self.shapes, self.bound = sig, shapes, bound
        self.rng = np.random.default_rng(0)
        self.made: dict = {}

    def shape(self, kernel, name: str, ndim: int) -> tuple:
        exprs = self.shapes.get(name)
        if exprs is None:
            raise UsageError(f"kernel '{kernel.name}': give the shape of array parameter "
                             f"'{name}': --signature {name}=[...], e.g. {name}=["
                             f"{','.join('nmk'[:ndim]) if ndim <= 3 else 'n'}]")
        extents = tuple(evaluate(e, self.bound, f"--signature {name}: the extent") for e in exprs)
        if not all(isinstance(e, int) and e >= 0 for e in extents):
            raise UsageError(f"--signature {name}: the shape {extents} is not non-negative "
                             f"integers")
        return extents

    def array(self, kernel, name: str, dtype, ndim: int, written: bool) -> np.ndarray:
        shape = self.shape(kernel, name, ndim)
        key = (name, dtype.name, shape, written)
        if key not in self.made:
            if written:
                data = np.zeros(shape, dtype.numpy)
            elif dtype.is_float:
                data = self.rng.standard_normal(shape)
            elif dtype.is_bool:
                data = self.rng.random(shape) < 0.5
            else:
                data = self.rng.integers(0, 16, shape)
            self.made[key] = data
        return self.made[key]

    def scalar(self, name: str, dtype):
        return dtype(self.bound.get(name, 1))


def _prepare(kernel, inputs: Inputs, given: dict, launch: str | None, block):
    """``run()``: enqueue one launch (or tile call) of ``kernel`` on fresh copies of the
    inputs, without waiting."""
    import fearless as fl
    from fearless.ir import types as T
    from fearless.kernel.params import CONST, NO_DEFAULT
    types = param_types(kernel, inputs.sig)
    args = []
    for p, ty in zip(kernel.runtime_params, types):
        if isinstance(ty, T.Scalar):
            args.append(inputs.scalar(p.name, ty.dtype))
            continue
        written = ty.role.written if isinstance(ty, T.TensorView) else \
            ty.access is not T.Access.READ
        t = fl.asarray(inputs.array(kernel, p.name, ty.dtype, ty.ndim, written), ty.dtype)
        if isinstance(ty, T.TensorView) and ty.role is T.Role.OUT:
            t = t.partition(ty.tile_shape)
        args.append(t)
    if _is_tile(kernel):
        consts = {p.name: given.get(p.name, p.default) for p in kernel.params if p.kind is CONST}
        missing = [n for n, v in consts.items() if v is NO_DEFAULT]
        if missing:
            raise UsageError(f"give --const {missing[0]}=... for kernel '{kernel.name}'")
        state = [args]

        def run_tile():
            state[0] = list(kernel(*state[0], **consts).enqueue())
        return run_tile
    if launch is not None:
        size = tuple(evaluate(e, inputs.bound, "--launch") for e in launch.split(","))
    else:
        out = next((a for a, ty in zip(args, types) if isinstance(ty, T.Array)
                    and ty.access is not T.Access.READ), None)
        if out is None:
            raise UsageError(f"kernel '{kernel.name}' writes no array whose shape could give "
                             f"the launch; give --launch n (or m,n)")
        size = out.shape
    prepared = kernel.prepare(size[0] if len(size) == 1 else size, block)

    def run_simt():
        kernel[prepared](*args)
    return run_simt


def _time(fl, kernel, call, runs: int, warmup: int, amounts: dict) -> dict:
    """The first call (with what it compiled), the warm-up, then the timed runs."""
    from fearless.autotuning.flush import l2_flush
    from fearless.runtime import timing
    was_on = fl.stats.on
    fl.stats.reset()
    fl.stats.enable()
    try:
        start = time.perf_counter()
        call()
        fl.synchronize()
        first = time.perf_counter() - start
        found = fl.stats()["kernels"].get(kernel.name, {}).get("compiles", {}).values()
    finally:
        fl.stats.enable(was_on)
    compiled = {key: sum(c[key] for c in found) for key in ("cold", "cold_s", "disk", "disk_s")}
    for _ in range(warmup):
        call()
    fl.synchronize()
    times = sorted(timing.run_seconds(call, runs, l2_flush()))
    p50 = percentile(times, 50)
    return {"kernel": kernel.name, "first_call_s": first, "compile": compiled,
            "p50_s": p50, "p99_s": percentile(times, 99), "min_s": times[0],
            "max_s": times[-1], "mean_s": statistics.fmean(times),
            "gb_per_s": None if amounts["bytes"] is None else amounts["bytes"] / p50 / 1e9,
            "tflop_per_s": None if amounts["flops"] is None else amounts["flops"] / p50 / 1e12}


def _device_name() -> str:
    from fearless.runtime import device
    return device.cuda_device().name


def table(report: dict) -> str:
    """The report as plain text: a header, a row per kernel, the ratio."""
    flush = report["l2_flush_bytes"]
    how = (f"CUDA events, L2 flushed before each run ({flush >> 20} MiB read)"
           if report["backend"] == "cuda" else
           "the wall clock: CPU times, not GPU times")
    sizes = ", ".join(f"{k}={v}" for k, v in report["sizes"].items()) or "none"
    rows = [f"fearless bench: backend {report['backend']} ({report['device']}); {how}",
            f"{report['runs']} timed runs after {report['warmup']} warm-up runs; sizes: {sizes}",
            f"{'kernel':20} {'first call':>11} {'compile':>16} {'p50 us':>10} {'p99 us':>10} "
            f"{'min us':>10} {'GB/s':>9} {'TFLOP/s':>8}"]
    for r in report["kernels"]:
        c = r["compile"]
        compiled = f"cold {c['cold_s']:.3f} s" if c["cold"] else \
            f"disk {c['disk_s']:.3f} s" if c["disk"] else "in memory"
        gbs = "-" if r["gb_per_s"] is None else f"{r['gb_per_s']:.4g}"
        tfs = "-" if r["tflop_per_s"] is None else f"{r['tflop_per_s']:.4g}"
        rows.append(f"{r['kernel'][:20]:20} {r['first_call_s']:>9.3f} s {compiled:>16} "
                    f"{r['p50_s'] * 1e6:>10.2f} {r['p99_s'] * 1e6:>10.2f} "
                    f"{r['min_s'] * 1e6:>10.2f} {gbs:>9} {tfs:>8}")
    if report["ratio"] is not None:
        a, b = (r["kernel"] for r in report["kernels"])
        rows.append(f"ratio of the P50s, {b} / {a}: {report['ratio']:.3f}")
    return "\n".join(rows)
