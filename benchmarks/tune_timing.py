"""How a tuner's clock ranks GEMM configs (issue 13): the same configs timed six ways in one
run on the GPU, to see which way picks what bench_gemm's flushed launches find fastest.

For each shape (f16, ``examples.tile_gemm.matmul``, bench_gemm's configs), each config's median
microseconds by:
  A  one config after another, each captured once and replayed back to back (7 replays, the
     tuner's way before session 20);
  B  the same, the configs in reverse order;
  C  interleaved rounds, each config's graph replayed once per round, no flush;
  D  interleaved rounds, an L2 flush by a read (torch) and 2 ms of ``torch.cuda._sleep``
     before each timed replay;
  F  ``runtime/timing.interleaved_seconds`` with ``autotuning/flush.l2_flush()``, as the tuner
     times now (fresh outputs per round, the flush kernel before each timed replay);
  E  eager launches, each after the read flush and the sleep (bench_gemm's clock).
A star marks each way's fastest config.

    PYTHONPATH=src:. python3 benchmarks/tune_timing.py 16384x16384x16384 4096x4096x4096 ...
"""
from __future__ import annotations

import os
import statistics
import sys

import torch

import fearless as fl
from fearless.autotuning import flush
from fearless.runtime import timing
from fearless.runtime.capture import capture
from fearless.runtime.stream import synchronize

sys.path.insert(0, os.path.dirname(__file__))
import bench_gemm  # noqa: E402
from examples.tile_gemm import matmul  # noqa: E402

ROUNDS = 7
WAYS = "ABCDFE"


class Runs:
    """One config's launches over one output, given back after each (``enqueue``)."""

    def __init__(self, cfg, a, b, m: int, n: int):
        self.cfg, self.a, self.b = cfg, a, b
        self.out = fl.asarray(torch.empty(m, n, device="cuda", dtype=torch.float16))

    def enqueue(self) -> None:
        r = matmul(self.out.partition(self.cfg.tile, schedule=self.cfg.partition_schedule()),
                   self.a, self.b, bk=self.cfg.bk).enqueue()
        self.out = r[0].unpartition()


def event_us(run, before=None) -> float:
    if before is not None:
        before()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    run()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e3


def back_to_back(graph) -> float:
    graph.replay()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(ROUNDS):
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def probe(m: int, n: int, k: int) -> None:
    scratch = torch.zeros(512 << 20, dtype=torch.uint8, device="cuda")

    def torch_flush():
        scratch.max()
        torch.cuda._sleep(2_000_000)

    a = fl.asarray(torch.randn(m, k, device="cuda", dtype=torch.float16))
    b = fl.asarray(torch.randn(k, n, device="cuda", dtype=torch.float16))
    runs = {c.name: Runs(c, a, b, m, n) for c in bench_gemm.CONFIGS if c.applies(m)}
    for r in runs.values():
        r.enqueue()
    synchronize()
    res = {name: {} for name in runs}
    graphs = {}
    for name, r in runs.items():
        with capture() as g:
            r.enqueue()
        graphs[name] = g
    for way, order in (("A", list(runs)), ("B", list(runs)[::-1])):
        for name in order:
            res[name][way] = back_to_back(graphs[name])
    for way, before in (("C", None), ("D", torch_flush)):
        times = {name: [] for name in runs}
        for _ in range(ROUNDS):
            for name, g in graphs.items():
                times[name].append(event_us(g.replay, before))
        for name in runs:
            res[name][way] = statistics.median(times[name])
    for g in graphs.values():
        g.release()

    def fresh(name):
        def prepare():
            r = Runs(runs[name].cfg, a, b, m, n)
            return r.enqueue
        return prepare

    seconds = timing.interleaved_seconds([fresh(name) for name in runs], ROUNDS,
                                         flush.l2_flush())
    for name, s in zip(runs, seconds):
        res[name]["F"] = s * 1e6
    times = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, r in runs.items():
            times[name].append(event_us(r.enqueue, torch_flush))
    for name in runs:
        res[name]["E"] = statistics.median(times[name])
    best = {w: min(res, key=lambda c: res[c][w]) for w in WAYS}
    print(f"\n{m}x{n}x{k} f16, us (* fastest by that way)")
    for name, r in res.items():
        print(f"  {name:22}" + "".join(f" {w}{'*' if best[w] == name else ' '}{r[w]:9.1f}"
                                      for w in WAYS), flush=True)


def main() -> None:
    fl.set_backend("cuda")
    for spec in sys.argv[1:] or ["4096x4096x4096"]:
        probe(*map(int, spec.split("x")))


if __name__ == "__main__":
    main()
