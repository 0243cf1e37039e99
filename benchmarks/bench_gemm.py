"""GEMM benchmark on the GPU (issue 13): fearless tile GEMMs against cuBLAS, Triton and cuTile.

C[M, N] = A[M, K] @ B[K, N] in f16 and bf16 (f32 accumulation, one rounding), row-major, for
square sizes 1024-8192 (16384 with ``--full``) and the LLM shapes M (tokens) in 1, 16, 128, 1024,
8192 by (K, N) in (4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256).

fearless: ``examples.tile_gemm.matmul`` with output tiles 128x128, 128x256 and 256x128 (bk 64;
the large two with fearless's default ``num_worker_warps_per_cta: 8``), each launched one tile
per block and persistent (``schedule=ft.persistent()``), and 128x128 and 128x256 with
``schedule=ft.stream_k()``; where M <= 512 also 128x64, 64x128 and 64x64, one tile per block;
for every LLM shape ``fearless.nn.linear`` (the models' path: its default plan, the decode GEMV
for M <= 16 and split-K where the tiles leave SMs idle; on B.T stored as the (N, K) weight it
takes: the same bytes); and ``ft.autotune`` over those configs (the first call tunes; the winner
is timed like the rest). Peers: cuBLAS
(``torch.matmul``), Triton's autotuned matmul (``tile_peers.py``), cuTile Python when
``cuda.tile`` imports.

Timing (every case alike): CUDA events on the legacy default stream. Each timed run is one launch:
first the L2 is flushed (``--flush-mb`` MB read with torch, default 256, over four times the
H200's 60 MB; ``--flush write`` writes it instead, as runs before session 19 did: a write leaves
L2 full of dirty lines that the timed kernel's reads then write back to memory, which cost the
decode GEMV 10 points of copy bandwidth on the H200, benchmarks/RESULTS.md), then the GPU is
held in ``torch.cuda._sleep`` while the host enqueues, then the start event, the launch, the
end event (for fearless, recorded right after the enqueue, by a ``.then()`` callback). A run
where the GPU reached the start event before the host had enqueued the launch is retried with a
longer sleep, and counted as host-bound if it stays so. The cases of
one shape are timed together, interleaved: first each case's untimed calls (the first call: the
compile, the autotuning; then two more, the second's wall time sizing the sleep), then
``--reps`` rounds (default 21, ``--quick`` 15), each one timed run of every case, the order
rotated by one case each round, so that clock and thermal drift over the shape's seconds
falls on every case alike instead of on whichever runs last (back to back, the same kernel
measured 653 and 712 TFLOP/s in two rows of one run). Each case has its own output, checked
after the rounds. A row reports the median of its runs (and the min in the JSON).

Reported per row: ms, TFLOP/s (2*M*N*K), % of cuBLAS, for fearless % of the best fearless config
of its shape, for M <= 16 % of copy bandwidth on the weights (bytes of B / time against a torch
device-to-device copy: ``bench_tile.bench_copy``), the max error relative to max |C| against
cuBLAS's C, and the warnings of its compile (``PerformanceWarning``: spills, lost TMA facts),
captured per specialisation. Then the issue's targets: per dtype the geometric mean of
best-fearless / cuBLAS over the square sizes 2048-16384 (>= 98%, none below 95%), the LLM shapes
with M >= 128 (each >= 95%), M <= 16 (>= 85% of copy bandwidth), and every config >= 70% of the
best of its shape unless its compile or launch warned (for M <= 16 only nn.linear counts: the
GEMM tiles of 128 rows are not what fearless offers for a decode step), and stream-K faster than
the same tile one per block on every shape whose last wave it splits (``compiler/info.py``'s
``tail_split`` for the GPU's SMs).

Run from the repository root on the GPU machine:
    PYTHONPATH=src:. python3 benchmarks/bench_gemm.py [--quick] [--full]
        [--dtypes f16,bf16] [--shapes square,llm | 2048,4096,llm:1024,llm:8192x4096x14336,...]
``--quick``: f16, square 2048/4096/8192 and the LLM rows M=1024, 15 rounds.
Output: a line per case, per-shape ratios, a table last; ``$OUT`` (default ./bench_out) gets
bench_gemm.json and bench_gemm.log. Without a GPU, ``--dry-run`` runs every fearless config at
tiny sizes on the CPU backend against float64 NumPy, and lowers every GPU specialisation the
chosen shapes would time to Tile IR bytecode (no tileiras).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import fearless as fl
from fearless import bf16, f16, f32
from fearless import tile as ft
from fearless.compiler import info
from fearless.errors import OccupancyWarning
from fearless.ir import types as T
from fearless.kernel.tile import _schedule_type as schedule_type
from fearless.kernel.tile_fast import pow2_div
from fearless.runtime.partition import (one_block_per_tile, splits_every_tile,
                                        stream_k_launches)
from fearless.runtime.tile_launch import idle_sm_advice
from examples.tile_gemm import matmul

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benchmark modules
from bench_linear import fearless_runner, linear, linear_module  # noqa: E402
from bench_tile import (Clock, Owned, bench_copy, environment, lowered,  # noqa: E402
                        rel_err)
from gemm_targets import (DECODE, TUNED, flagged, shape_summary, summary,  # noqa: E402
                          target_lines)
from run_log import RunLog  # noqa: E402
from tile_peers import cutile_matmul, triton  # noqa: E402
if triton is not None:
    from tile_peers import tr_matmul

DTYPES = {"f16": f16, "bf16": bf16}
SQUARE, FULL_SQUARE = (1024, 2048, 4096, 8192), 16384
LLM_M = (1, 16, 128, 1024, 8192)
LLM_KN = ((4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256))
QUICK_SHAPES, QUICK_DTYPES = "2048,4096,8192,llm:1024", "f16"
REPS, QUICK_REPS = 21, 15   # timed rounds per shape (cheap: the runs are mostly sub-ms)

@dataclass(frozen=True)
class Config:
    """One fearless tile GEMM: output tile, K step, ``schedule`` ("" one tile per block,
    "persistent" or "stream-K"), and the largest M it is timed at (None: every M)."""

    tile: tuple
    bk: int = 64
    schedule: str = ""
    max_m: int | None = None

    def partition_schedule(self, blocks: int | None = None):
        """The ``schedule=`` of its output partition."""
        make = {"": None, "persistent": ft.persistent, "stream-K": ft.stream_k}[self.schedule]
        return make and make(blocks=blocks)

    def forms(self, m: int, n: int, sms: int) -> list:
        """The ``ir.types.Persistent`` (None: no schedule) of each launch over an (m, n)
        output on ``sms`` SMs, one block per SM: the runtime's rules (``runtime/partition.py``)
        and types (``kernel/tile.py``)."""
        schedule = self.partition_schedule()
        if schedule is None:
            return [None]
        tiles, stream_k = self.tiles(m, n), isinstance(schedule, ft.StreamK)
        if one_block_per_tile(tiles, sms, stream_k):
            return [schedule_type(schedule, True)]
        first = schedule_type(schedule, False)
        if not stream_k:
            return [first]
        return [replace(first, phase=ph) for ph in stream_k_launches(tiles, sms)]

    def applies(self, m: int) -> bool:
        return self.max_m is None or m <= self.max_m

    def tiles(self, m: int, n: int) -> int:
        """Tiles of an (m, n) output."""
        return -(-m // self.tile[0]) * -(-n // self.tile[1])

    @property
    def name(self) -> str:
        return f"{self.tile[0]}x{self.tile[1]}{' ' + self.schedule if self.schedule else ''}"


# The 64-wide tiles, one per block (persistent, 1.6-2.7x slower: RESULTS.md, session 14),
# are timed where M <= SMALL_M: there 128 x 128 tiles leave most SMs idle (M 128, N 4096: 32
# blocks on 132 SMs).
SMALL_M = 512   # from M 1024 on, 128 x 128 tiles give 2 blocks per SM at N 4096
# Stream-K with the two tiles it speeds up at M 128 (RESULTS.md, sessions 17-18); 256 x 128
# tiles run slower than 128 x 256 at every shape timed.
CONFIGS = tuple(Config(tile, 64, p) for tile in ((128, 128), (128, 256), (256, 128))
                for p in ("", "persistent")) + tuple(
    Config(tile, 64, "stream-K") for tile in ((128, 128), (128, 256))) + tuple(
    Config(tile, 64, max_m=SMALL_M) for tile in ((128, 64), (64, 128), (64, 64)))
# the same configs as ft.Configs: the tuner picks one per shape (issue 15: within 1% of the best)
tuned_matmul = ft.autotune(
    [ft.Config(tile=c.tile, bk=c.bk, schedule=c.partition_schedule()) for c in CONFIGS],
    key=("a", "b"))(matmul)


@dataclass(frozen=True)
class Shape:
    """C[m, n] = A[m, k] @ B[k, n] in ``dtype``; ``kind`` "square" or "llm"."""

    kind: str
    m: int
    n: int
    k: int
    dtype: object

    @property
    def label(self) -> str:
        return f"{self.dtype.name} {self.m}x{self.n}x{self.k}" + (
            f" (llm M={self.m})" if self.kind == "llm" else "")

    @property
    def decode(self) -> bool:
        return self.kind == "llm" and self.m <= linear_module.DECODE_MAX_T


def select(shapes: str, dtypes: str, full: bool) -> list[Shape]:
    """The shapes named by ``--shapes`` (a comma list of ``square``, ``llm``, a square size,
    ``llm:M``, or one LLM row ``llm:MxNxK``) in each dtype of ``--dtypes``, in order, without
    repeats. SystemExit for an unknown name."""
    picked: list[tuple] = []
    for item in (s.strip() for s in shapes.split(",") if s.strip()):
        if item == "square":
            picked += [("square", s, s, s) for s in SQUARE + ((FULL_SQUARE,) if full else ())]
        elif item == "llm" or item.startswith("llm:") and item[4:].isdigit():
            ms = LLM_M if item == "llm" else (int(item[4:]),)
            picked += [("llm", m, n, k) for m in ms for k, n in LLM_KN]
        elif item.isdigit():
            picked.append(("square", int(item), int(item), int(item)))
        elif re.fullmatch(r"llm:\d+x\d+x\d+", item):
            picked.append(("llm", *map(int, item[4:].split("x"))))
        else:
            raise SystemExit(f"--shapes: unknown {item!r} (square, llm, a size, llm:M, "
                             f"llm:MxNxK)")
    unknown = [d for d in dtypes.split(",") if d.strip() not in DTYPES]
    if unknown:
        raise SystemExit(f"--dtypes: unknown {', '.join(unknown)} (f16, bf16)")
    out = [Shape(*p, DTYPES[d.strip()]) for d in dtypes.split(",") for p in picked]
    return list(dict.fromkeys(out))


# -- timing --------------------------------------------------------------------------------------

class FlushClock(Clock):
    """bench_tile's event clock, one launch per timed run, the L2 flushed before each."""

    def __init__(self, torch, flush_mb: int, flush: str = "read"):
        super().__init__(torch)
        self.scratch = torch.zeros(flush_mb << 20, dtype=torch.uint8, device="cuda")
        self.flush = {"write": self.scratch.zero_, "read": self.scratch.max}[flush]

    def warm(self, run) -> float:
        """Two untimed ``run(mark)`` calls after the case's first call (whatever that left to
        compile or tune); returns the sleep, ms, that covers the host's enqueue of one run:
        1.5 x the second's synchronised wall time + 0.5."""
        run(lambda: None)
        self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(lambda: None)
        self.torch.cuda.synchronize()
        return 1.5 * (time.perf_counter() - t0) * 1e3 + 0.5

    def timed(self, run, cover: float) -> tuple[float, bool, float]:
        """One timed run: (device ms, host-bound, the cover for the next run). ``run(mark)``
        enqueues one launch and calls ``mark()`` right after; the L2 is flushed before it and
        the GPU held in a sleep of ``cover`` ms while the host enqueues. A run the GPU reached
        before the host had enqueued it is retried twice, the sleep doubled each time;
        host-bound: still so."""
        for _attempt in range(3):
            self.flush()  # outside the timed region: before the sleep
            ms, late = self._behind_sleep(lambda _n, mark: run(mark), 1, cover)
            if not late:
                break
            cover *= 2
        return ms, late, cover


class WallClock:
    """The dry run's stand-in for FlushClock on the CPU backend: the wall time of one run, no
    flush, no sleep (it exercises the rounds, not the GPU's clock)."""

    def warm(self, run) -> float:
        run(lambda: None)
        return 0.0

    def timed(self, run, cover: float) -> tuple[float, bool, float]:
        t0 = time.perf_counter()
        run(lambda: None)
        return (time.perf_counter() - t0) * 1e3, False, cover


@dataclass
class Case:
    """One row of a shape. ``first()``: the first call (the compile, the autotuning);
    ``run(mark)``: one timed launch, calling ``mark()`` right after enqueuing it; ``check()``:
    {"ok", "err"} from the output the timed runs left (None: not checked); ``key``: the
    specialisation whose compile warnings the case shares; ``launch``: the warnings of this
    shape's launch (a kernel's first launch of a specialisation gives them, so a later shape's
    are worked out: ``launch_advice``). ``measure`` fills in the rest."""

    config: str
    who: str
    first: Callable
    run: Callable
    check: Callable | None = None
    key: tuple | None = None
    launch: list = field(default_factory=list)
    first_ms: float = 0.0
    warnings: list = field(default_factory=list)
    cover: float = 0.0       # ms of sleep that covers the host's enqueue of one run
    times: list = field(default_factory=list)   # device ms of each timed run
    late: int = 0            # timed runs that stayed host-bound
    failed: bool = False


def measure(rep: Report, clock, shape: Shape, cases: list[Case], reps: int,
            copy_gbps: float | None) -> None:
    """Time one shape's ``cases`` in interleaved rounds and add a row per case, in the order
    given (cuBLAS first: the others' % of it).

    Each case first gets its untimed calls (``first()``, then ``clock.warm``); then ``reps``
    rounds each time one run of every case (``clock.timed``), starting one case later each
    round, so that clock and thermal drift over the shape's seconds falls on every case alike
    instead of on whichever would run last. A row reports the median and the min of its runs.
    A case that raises is logged with its traceback and dropped; the others go on."""
    def guarded(case: Case, step) -> bool:
        try:
            step(case)
            return True
        except Exception:  # noqa: BLE001 - one case must not stop the run
            rep.fail(f"{shape.label} {case.config}")
            case.failed = True
            return False

    def warm(case: Case) -> None:
        case.first_ms, warned = compiled_first(case.first)
        if case.key is not None:  # a specialisation warns at its compile only: remember it
            warned = [w for w in rep.spec_warnings.setdefault(case.key, warned) or warned
                      if not any(why in w for why in LAUNCH_WARNINGS)]
        case.warnings = list(dict.fromkeys(warned + case.launch))
        case.cover = clock.warm(case.run)

    def timed(case: Case) -> None:
        ms, late, case.cover = clock.timed(case.run, case.cover)
        case.times.append(ms)
        case.late += late

    def record(case: Case) -> None:
        res = {"ms": statistics.median(case.times), "min_ms": min(case.times),
               "reps": len(case.times), "host_bound": case.late,
               **(case.check() if case.check else {}), "warnings": case.warnings,
               "first_ms": case.first_ms if case.who == "fearless" else None}
        rep.add(shape, case.config, case.who, res, copy_gbps)

    ready = [c for c in cases if guarded(c, warm)]
    for r in range(reps if ready else 0):
        k = r % len(ready)
        for case in ready[k:] + ready[:k]:
            if not case.failed:
                guarded(case, timed)
    for case in ready:
        if not case.failed:
            guarded(case, record)


LAUNCH_WARNINGS: set = set()   # launch_advice's reasons: a shape's own, not a compile's


def split_tails(shape: Shape, sms: int) -> dict:
    """The stream-K configs that split ``shape``'s last wave on ``sms`` SMs
    (``info.tail_split``), each with the name of the same tile one per block."""
    return {c.name: Config(c.tile, c.bk).name for c in CONFIGS if c.schedule == "stream-K"
            and info.tail_split(c.tiles(shape.m, shape.n), sms)}


def launch_advice(shape: Shape, cfg: Config, sms: int) -> list[str]:
    """The PerformanceWarning a first launch of ``cfg`` over ``shape`` gives when its tiles do
    not suit the shape (``tile_launch.idle_sm_advice``; one tile per block or persistent
    alike; for stream-K, none where it splits a tail after whole waves, and its own where it
    splits every tile: ``runtime/partition.splits_every_tile``), as ``compiled_first`` words
    it."""
    tiles = cfg.tiles(shape.m, shape.n)
    split = splits_every_tile(stream_k_launches(tiles, sms) if cfg.schedule == "stream-K"
                              else ())
    if split is None:
        return []
    why = idle_sm_advice((shape.m, shape.n), cfg.tile, tiles, sms, split)
    if why is None:
        return []
    LAUNCH_WARNINGS.add(why)
    return [f"{OccupancyWarning.__name__}: tile kernel 'matmul': {why}"]



def compiled_first(first) -> tuple[float, list[str]]:
    """Run ``first()`` (a first call: the compile) and return its wall ms and the warnings it
    raised, as "Category: message"."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        first()
        ms = (time.perf_counter() - t0) * 1e3
    return ms, list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))


# -- recording -----------------------------------------------------------------------------------

class Report(RunLog):
    """Rows (one per shape and config), per-shape summaries, the targets and the table."""

    def __init__(self, out_dir: Path | None):
        super().__init__(out_dir, "bench_gemm")
        self.sms = 132   # the blocks of a scheduled launch: the GPU's SMs (H200 for made-up rows)
        self.shapes: list[dict] = []
        self.spec_warnings: dict = {}   # (config, dtype, layout) -> warnings of its compile

    def extra(self) -> dict:
        return {"rows": self.rows, "shapes": self.shapes, "summary": summary(self.shapes)}

    def add(self, shape: Shape, config: str, kind: str, res: dict, copy_gbps: float | None):
        """A row: ``res`` has ms (and ok, err, warnings, first_ms)."""
        r = {"shape": shape.label, "kind": shape.kind, "m": shape.m, "n": shape.n,
             "k": shape.k, "dtype": shape.dtype.name, "config": config, "who": kind, **res,
             "tflops": 2.0 * shape.m * shape.n * shape.k / (res["ms"] * 1e9)}
        if copy_gbps:
            r["pct_copy"] = 100 * shape.k * shape.n * shape.dtype.itemsize / (
                res["ms"] * 1e6) / copy_gbps
        cublas = next((x for x in self.rows if x["shape"] == r["shape"]
                       and x["config"] == "cuBLAS"), None)
        if cublas is not None:
            r["pct_cublas"] = 100 * cublas["ms"] / r["ms"]
        self.rows.append(r)
        self.log(f"  {config:<28}{r['ms']:10.4f} ms {r['tflops']:8.1f} TFLOP/s"
                 + (f" {r['pct_cublas']:6.1f}% cuBLAS" if "pct_cublas" in r else "")
                 + (f" {r['pct_copy']:6.1f}% copy" if "pct_copy" in r else "")
                 + (f"  err {r['err']:.1e}" if r.get("err") is not None else "")
                 + ("" if r.get("ok", True) else " WRONG")
                 + (f" [host-bound x{r['host_bound']}]" if r.get("host_bound") else "")
                 + (f"  first call {r['first_ms']:.0f} ms" if r.get("first_ms") else "")
                 + "".join(f"\n      ! {w}" for w in r.get("warnings", ())))
        return r

    def close_shape(self, shape: Shape) -> dict:
        """The shape's summary: best fearless config, its ratios; each config's % of best."""
        rows = [r for r in self.rows if r["shape"] == shape.label]
        s = shape_summary(shape, rows, split_tails(shape, self.sms))
        self.shapes.append(s)
        if s["best"]:
            self.log(f"  % of best ({s['best']}): " + " | ".join(
                f"{r['config']} {r['pct_best']:.0f}{'*' if flagged(r) else ''}"
                for r in rows if "pct_best" in r) + "   (*: PerformanceWarning at its compile)")
            self.log(f"  best fearless: {s['best']} " + ", ".join(
                f"{v:.1f}% {k}" for k, v in (("of cuBLAS", s.get("pct_cublas")),
                                             ("of copy", s.get("pct_copy"))) if v is not None))
        return s

    def table(self) -> None:
        self.log("\n" + "=" * 120)
        self.log(f"{'shape':<36}{'cuBLAS TF/s':>12}{'triton':>8}{'cutile':>8}  "
                 f"{'best fearless':<26}{'TF/s':>7}{'%cuBLAS':>8}{'%copy':>7}  "
                 f"{'below 70% of best'}")
        for s in self.shapes:
            cell = lambda v, f="{:.0f}": f.format(v) if v is not None else "-"  # noqa: E731
            self.log(f"{s['shape']:<36}{cell(s.get('cublas_tflops')):>12}"
                     f"{cell(s['peers'].get('triton')):>8}{cell(s['peers'].get('cutile')):>8}  "
                     f"{s['best'] or 'none':<26}{cell(s.get('tflops')):>7}"
                     f"{cell(s.get('pct_cublas'), '{:.1f}'):>8}{cell(s.get('pct_copy')):>7}  "
                     f"{', '.join(s['weak']) or '-'}")
        self.log("triton, cutile: % of cuBLAS; %copy: bytes of B / time, % of the copy "
                 "bandwidth (M <= 16); below 70%: configs under 70% of the shape's best whose "
                 "compile or launch did not warn")
        for line in target_lines(summary(self.shapes)):
            self.log(line)


# -- the GPU run ---------------------------------------------------------------------------------

def layout_key(shape: Shape) -> tuple:
    """What besides the config and dtype a compiled specialisation depends on (layout facts)."""
    return tuple(pow2_div(n) for n in (shape.m, shape.n, shape.k))


def bench_shape(rep: Report, clock: FlushClock, torch, shape: Shape, ct_run, copy: dict | None,
                reps: int) -> None:
    m, n, k = shape.m, shape.n, shape.k
    rep.log(f"\n[gemm {shape.label}]")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[shape.dtype.name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=tdt, generator=gen)
    ref = torch.matmul(a, b)
    copy_gbps = copy["GB/s"] if copy and shape.m <= linear_module.DECODE_MAX_T else None
    # relative to max |C|: a few roundings of the output type
    bound = 8 * (2.0 ** -11 if shape.dtype is f16 else 2.0 ** -8)

    def checked(out):
        err = rel_err(out, ref)
        return {"ok": err <= bound, "err": err}

    def poisoned():
        return torch.full_like(ref, float("nan"))

    cases = []  # every case's output lives through the rounds: 11 x 2 GB at M=8192, N=128256

    def peer(name, fn, out, check=True):  # each its own output: the rounds interleave them
        cases.append(Case(name, "peer", fn, lambda mark: (fn(), mark()),
                          (lambda: checked(out)) if check else None))

    c = torch.empty_like(ref)
    peer("cuBLAS", lambda: torch.matmul(a, b, out=c), c, check=False)
    if triton is not None:
        def grid(meta):
            return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
        c_tr = poisoned()
        peer("triton", lambda: tr_matmul[grid](a, b, c_tr, m, n, k, *a.stride(), *b.stride(),
                                                *c_tr.stride()), c_tr)
    if ct_run is not None:
        c_ct = poisoned()
        peer("cutile", lambda: ct_run(a, b, c_ct), c_ct)
    fa, fb = fl.asarray(a), fl.asarray(b)
    for cfg in (c for c in CONFIGS if c.applies(m)):
        out = poisoned()
        owned = Owned(lambda p, cfg=cfg: matmul(p, fa, fb, bk=cfg.bk), fl.asarray(out)
                      .partition(cfg.tile, schedule=cfg.partition_schedule()))
        cases.append(Case(cfg.name, "fearless", owned.call,
                          lambda mark, owned=owned: owned.run_chain(1, mark),
                          lambda owned=owned, out=out: (owned.done(), checked(out))[1],
                          (cfg.name, shape.dtype.name, layout_key(shape)),
                          launch_advice(shape, cfg, fl.multiprocessor_count())))
    tuned_out = poisoned()
    cases.append(tuned_case(fa, fb, tuned_out, lambda _done: checked(tuned_out), rep))
    if shape.kind == "llm":   # the models' own GEMM path: split-K where tiles leave SMs idle
        w = b.t().contiguous()  # linear's (N, K) weight layout: the bytes of B
        got = {}
        cases.append(Case(DECODE, "fearless", lambda: got.update(y=linear(a, w)),
                          fearless_runner(a, w, {}), lambda: checked(got["y"]),
                          (DECODE, shape.dtype.name, layout_key(shape),
                           linear_module.plan(m, n, k, shape.dtype, fl.multiprocessor_count()))))
    measure(rep, clock, shape, cases, reps, copy_gbps)
    rep.close_shape(shape)


def tuned_case(fa, fb, out, check, rep: Report) -> Case:
    """The autotuned row: the first call tunes (the pick and its seconds logged), then the
    winner is timed as the hand-picked rows are, under the name ``ft.autotune``. ``out``: the
    output (a tensor ``fl.asarray`` takes); ``check(c)``: {"ok", "err"} of the fearless tensor
    ``c`` the runs left in it."""
    picked = {}

    def first():
        part = tuned_matmul(fl.asarray(out), fa, fb).sync()[0]
        report = tuned_matmul.report
        n = report.winner if report is not None and report.winner is not None else 0
        cfg = tuned_matmul.configs[n]
        kern = tuned_matmul._variant(n)
        picked["owned"] = Owned(lambda p: kern(p, fa, fb, **cfg.consts), part)
        if report is not None:
            rep.log(f"  autotuned: picked {CONFIGS[n].name} in {report.seconds:.1f} s")

    return Case(TUNED, "fearless", first, lambda mark: picked["owned"].run_chain(1, mark),
                lambda: check(picked["owned"].done()))


def gpu_run(rep: Report, shapes: list[Shape], reps: int, flush_mb: int,
            flush: str = "read") -> None:
    import torch
    fl.set_backend("cuda")
    rep.sms = fl.multiprocessor_count()
    rep.data["env"] = environment(torch)
    rep.data["settings"] = {"reps": reps, "flush_mb": flush_mb, "flush": flush,
                            "shapes": [s.label for s in shapes]}
    rep.log("env: " + ", ".join(f"{k} {v}" for k, v in rep.data["env"].items()))
    ct_run, ct_why = cutile_matmul()
    rep.data["cutile"] = ct_why or "installed"
    rep.log(f"cuTile Python: {ct_why or 'installed'}; L2 flush: a {flush} of {flush_mb} MB "
            f"per timed run, median of {reps} interleaved rounds")
    clock = FlushClock(torch, flush_mb, flush)
    copy = None
    if any(s.decode for s in shapes):
        try:
            copy = bench_copy(rep, clock, torch)
        except Exception:  # noqa: BLE001
            rep.fail("copy")
    for shape in shapes:
        try:
            bench_shape(rep, clock, torch, shape, ct_run, copy, reps)
        except Exception:  # noqa: BLE001
            rep.fail(f"gemm {shape.label}")
        rep.save()
        torch.cuda.empty_cache()  # the 128256-wide outputs are 2 GB each
    rep.table()


# -- dry run: the CPU backend at tiny sizes, and the GPU specialisations lowered -----------------

DRY_SHAPES = (("square", 200, 136, 100), ("llm", 1, 136, 100), ("llm", 16, 80, 96))
DRY_REPS = 3   # rounds of the dry run's interleaved timing (CPU wall times, meaningless)
# a scheduled launch's blocks there: persistent loops over tiles, stream-K splits the tails
DRY_BLOCKS = {"persistent": 3, "stream-K": 16}


def dry_run(rep: Report, shapes: list[Shape]) -> int:
    fl.set_backend("cpu")
    rep.sms = DRY_BLOCKS["stream-K"]
    rng = np.random.default_rng(0)
    rep.log(f"every fearless config on the CPU backend, timed as on the GPU ({DRY_REPS} "
            "interleaved rounds) but by the wall clock; err: max |C - float64 NumPy| / max |C|")
    for dt in dict.fromkeys(s.dtype for s in shapes):
        unit = 2.0 ** -11 if dt is f16 else 2.0 ** -8
        for kind, m, n, k in DRY_SHAPES:
            shape = Shape(kind, m, n, k, dt)
            rep.log(f"\n[gemm {shape.label}]")
            ah = rng.standard_normal((m, k), np.float32).astype(dt.numpy)
            bh = rng.standard_normal((k, n), np.float32).astype(dt.numpy)
            a64, b64 = ah.astype(np.float64), bh.astype(np.float64)
            want = a64 @ b64
            # f32 sums of exact products (k roundings of 2^-23 each), one rounding to dt
            bound = unit * np.abs(want) + (np.abs(a64) @ np.abs(b64)) * (k * 2.0 ** -23 + unit)

            def checked(out, want=want, bound=bound):
                return dry_verdict(out.numpy(), want, bound)

            fa, fb = fl.asarray(ah), fl.asarray(bh)
            cases = []
            for cfg in (c for c in CONFIGS if c.applies(m)):
                owned = Owned(lambda p, cfg=cfg: matmul(p, fa, fb, bk=cfg.bk),
                              fl.full((m, n), np.nan, dt).partition(
                                  cfg.tile,
                                  schedule=cfg.partition_schedule(DRY_BLOCKS.get(cfg.schedule))))
                cases.append(Case(cfg.name, "fearless", owned.call,
                                  lambda mark, owned=owned: owned.run_chain(1, mark),
                                  lambda owned=owned: checked(owned.done())))
            # the cpu backend does not tune: the first config runs (with a PerformanceWarning)
            cases.append(tuned_case(fa, fb, fl.full((m, n), np.nan, dt), checked, rep))
            if kind == "llm":
                w, got = np.ascontiguousarray(bh.T), {}
                cases.append(Case(DECODE, "fearless", lambda: got.update(y=linear(ah, w)),
                                  fearless_runner(ah, w, {}), lambda: checked(got["y"])))
            measure(rep, WallClock(), shape, cases, DRY_REPS, None)
            rep.close_shape(shape)
    checks = [(f"{r['shape']} {r['config']}", r["ok"]) for r in rep.rows]
    checks += dry_lower(rep, shapes)
    rep.log("\n  the summary and table, on made-up numbers:")
    fake = Report(None)
    for shape, times in fake_rows():
        for config, who, ms, warned in times:
            fake.add(shape, config, who, {"ms": ms, "ok": True, "err": 1e-3,
                                          "warnings": warned}, 3000.0 if shape.decode else None)
        fake.close_shape(shape)
    fake.table()
    bad = [name for name, ok in checks if not ok]
    failed = len(rep.data["errors"])  # cases that raised: no row, no check
    rep.log(f"\ndry run: {len(checks) - len(bad)}/{len(checks)} checks passed"
            + (f"; FAILED: {', '.join(bad)}" if bad else "")
            + (f"; {failed} cases raised (tracebacks above)" if failed else ""))
    return 1 if bad or failed else 0


def dry_verdict(got, want, bound) -> dict:
    """{"ok": every element within ``bound`` of ``want``, "err": max error / max |want|}."""
    err = np.abs(got.astype(np.float64) - want)
    return {"ok": bool((err <= bound).all()), "err": float(err.max() / np.abs(want).max())}


def fake_rows():
    """Made-up times that exercise every branch of the summary (a weak, unwarned config)."""
    sq = Shape("square", 4096, 4096, 4096, f16)
    dec = Shape("llm", 1, 4096, 4096, f16)
    tail = Shape("llm", 128, 4096, 4096, f16)   # 32 tiles of 128 x 128: stream-K splits them
    return [(sq, [("cuBLAS", "peer", 0.20, []), ("triton", "peer", 0.21, []),
                  ("128x128", "fearless", 0.205, []),
                  ("128x256", "fearless", 0.40, ["PerformanceWarning: spills"]),
                  ("256x128", "fearless", 0.35, [])]),
            (dec, [("cuBLAS", "peer", 0.012, []), ("128x128", "fearless", 0.030, []),
                   (DECODE, "fearless", 0.0125, [])]),
            (tail, [("cuBLAS", "peer", 0.015, []), ("128x128", "fearless", 0.023, []),
                    ("128x128 stream-K", "fearless", 0.019, []),
                    ("128x256", "fearless", 0.044, []),
                    ("128x256 stream-K", "fearless", 0.046, [])])]


def gpu_view(dt, shape: tuple, tile=None, schedule=None) -> T.TensorView:
    """The type a contiguous, 256-byte-aligned device tensor of ``shape`` specialises to (the
    layout facts of ``kernel/tile.py``'s ``_layout``)."""
    strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return T.TensorView(dt, len(shape), T.Role.OUT if tile else T.Role.IN, tile,
                        T.Layout(16, tuple(map(pow2_div, shape)), tuple(map(pow2_div, strides)),
                                 True), schedule)


def _form_label(form) -> str:
    """" one per block" or " launch N" for a scheduled compile's form, else ""."""
    if form is None or not (form.single or form.stream_k):
        return ""
    return " one per block" if form.single else f" launch {form.phase}"


def specialisations(shape: Shape) -> list[tuple]:
    """(name, kernel, types, constants) of each GPU compile that timing ``shape`` makes."""
    dt, (m, n, k) = shape.dtype, (shape.m, shape.n, shape.k)
    sms = linear_module._H200_SMS
    out = [(f"{cfg.name} {dt.name}{_form_label(form)}", matmul,
            (gpu_view(dt, (m, n), cfg.tile, form), gpu_view(dt, (m, k)), gpu_view(dt, (k, n))),
            {"bk": cfg.bk}) for cfg in CONFIGS if cfg.applies(m) for form in cfg.forms(m, n, sms)]
    if shape.kind == "llm":
        p = linear_module.plan(m, n, k, dt, linear_module._H200_SMS)
        consts = {"bk": p.bk, "form": linear_module._FORMS[p.form], "exact": False,
                  "has_bias": False, "latency": p.latency, "split": p.splits > 1}
        x, w = gpu_view(dt, (m, k)), gpu_view(dt, (n, k))
        if p.splits == 1:
            out.append((f"{DECODE} {dt.name}", linear_module._linear_tiles,
                        (gpu_view(dt, (m, n), (p.bm, p.bn)), x, w, w), consts))
        else:
            rm, rn = linear_module._reduce_tile(m, n, p.splits, linear_module._H200_SMS)
            out += [(f"{DECODE} split {dt.name}", linear_module._linear_tiles,
                     (gpu_view(f32, (p.splits, m, n), (1, p.bm, p.bn)), x, w, w), consts),
                    (f"{DECODE} reduce {dt.name}", linear_module._linear_reduce,
                     (gpu_view(dt, (m, n), (rm, rn)), gpu_view(f32, (p.splits, m, n)), w),
                     {"splits": p.splits, "has_bias": False})]
    return out


def dry_lower(rep: Report, shapes: list[Shape]) -> list[tuple[str, bool]]:
    """Lower each GPU specialisation the shapes would time to Tile IR bytecode (sm_90), once
    per distinct one, so that a lowering error shows here rather than on the GPU."""
    seen = {}
    for shape in shapes:
        for name, kern, types, consts in specialisations(shape):
            seen.setdefault((kern, types, tuple(sorted(consts.items()))),
                            (f"{name} (first: {shape.label})", kern, types, consts))
    rep.log(f"\n  lowering {len(seen)} GPU specialisations to Tile IR bytecode (sm_90):")
    return lowered(rep, seen.values())


# -- main ----------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: every fearless config at tiny sizes on the CPU backend, and "
                         "the GPU specialisations of the chosen shapes lowered to Tile IR")
    ap.add_argument("--shapes", help="comma list: square, llm, a square size, llm:M, "
                                     "llm:MxNxK (default square,llm)")
    ap.add_argument("--dtypes", help="comma list of f16, bf16 (default both)")
    ap.add_argument("--full", action="store_true", help="square sizes up to 16384")
    ap.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, dtypes "
                    f"{QUICK_DTYPES}, {QUICK_REPS} rounds (explicit options win)")
    ap.add_argument("--reps", type=int, help=f"timed rounds per shape, one run of each case "
                                             f"per round (default {REPS})")
    ap.add_argument("--flush-mb", type=int, default=256, help="L2 flush buffer, MB")
    ap.add_argument("--flush", choices=("read", "write"), default="read",
                    help="how the L2 is flushed before each timed run (default read)")
    args = ap.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        ap.error("--reps: at least 1")
    shapes = select(args.shapes or (QUICK_SHAPES if args.quick else "square,llm"),
                    args.dtypes or (QUICK_DTYPES if args.quick else "f16,bf16"), args.full)
    reps = args.reps or (QUICK_REPS if args.quick else REPS)
    out_dir = Path(os.environ.get("OUT") or "bench_out")
    rep = Report(out_dir)
    status = 0
    if args.dry_run:
        status = dry_run(rep, shapes)
    else:
        gpu_run(rep, shapes, reps, args.flush_mb, args.flush)
    return rep.finish(status)


if __name__ == "__main__":
    sys.exit(main())
