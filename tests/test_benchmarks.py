"""benchmarks/bench_gemm.py's timing rounds on the CPU: every case of a shape is timed in
interleaved rounds, the order rotated each round, a failing case dropped while the others go
on; and the whole dry run (every fearless config on the CPU backend against NumPy, timed in
those rounds) passes."""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

from fearless import f16

_BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gemm.py"


@functools.cache
def _bench_gemm():
    spec = importlib.util.spec_from_file_location("bench_gemm", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_gemm"] = mod  # its dataclasses resolve their annotations there
    spec.loader.exec_module(mod)
    return mod


class _StepClock:
    """Each timed run takes its place in the whole sequence of runs (from 1), in ms."""

    def __init__(self, order: list):
        self.order = order

    def warm(self, run) -> float:
        return 1.0

    def timed(self, run, cover: float):
        run(lambda: None)
        return float(len(self.order)), False, cover


def test_cases_are_timed_in_rotated_rounds_and_a_failure_drops_only_its_case():
    bench = _bench_gemm()
    order: list = []

    def case(name, who="fearless", fail_at=None):
        def run(mark):
            order.append(name)
            if order.count(name) == fail_at:
                raise RuntimeError(f"{name} failed")
            mark()
        return bench.Case(name, who, lambda: None, run, lambda: {"ok": True, "err": 0.0})

    rep = bench.Report(None)
    shape = bench.Shape("square", 64, 64, 64, f16)
    cases = [case("cuBLAS", "peer"), case("A"), case("B", fail_at=2), case("C")]
    bench.measure(rep, _StepClock(order), shape, cases, 4, None)
    # round r starts at case r; B raises in round 1 and is not run again
    assert order == ["cuBLAS", "A", "B", "C", "A", "B", "C", "cuBLAS",
                     "C", "cuBLAS", "A", "C", "cuBLAS", "A"]
    rows = {r["config"]: r for r in rep.rows}
    assert [r["config"] for r in rep.rows] == ["cuBLAS", "A", "C"]
    # a run's time is its place in the sequence, from 1: the median and min of each case's four
    assert (rows["cuBLAS"]["ms"], rows["cuBLAS"]["min_ms"]) == ((8 + 10) / 2, 1.0)
    assert (rows["A"]["ms"], rows["A"]["min_ms"]) == ((5 + 11) / 2, 2.0)
    assert (rows["C"]["ms"], rows["C"]["min_ms"]) == ((7 + 9) / 2, 4.0)
    assert all(r["reps"] == 4 for r in rep.rows)
    assert rows["A"]["pct_cublas"] == 100 * rows["cuBLAS"]["ms"] / rows["A"]["ms"]
    assert [e["where"] for e in rep.data["errors"]] == [f"{shape.label} B"]


def test_a_case_whose_first_call_fails_is_never_timed():
    bench = _bench_gemm()
    order: list = []

    def boom():
        raise ValueError("no compile")

    cases = [bench.Case("A", "fearless", boom, lambda mark: order.append("A")),
             bench.Case("B", "fearless", lambda: None, lambda mark: order.append("B"))]
    rep = bench.Report(None)
    bench.measure(rep, _StepClock(order), bench.Shape("square", 8, 8, 8, f16), cases, 3, None)
    assert order == ["B", "B", "B"]
    assert [r["config"] for r in rep.rows] == ["B"]
    assert len(rep.data["errors"]) == 1


def test_dry_run_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    bench = _bench_gemm()
    assert bench.main(["--dry-run", "--shapes", "2048", "--dtypes", "bf16"]) == 0
    log = (tmp_path / "bench_gemm.log").read_text()
    assert "ft.autotune" in log and "nn.linear" in log


def test_only_the_offered_path_counts_against_a_decode_shapes_best():
    bench = _bench_gemm()
    from fearless import f16

    def rows(configs):
        return [{"config": c, "who": "fearless", "ms": ms, "tflops": 1.0}
                for c, ms in configs] + [{"config": "cuBLAS", "who": "peer", "ms": 1.0,
                                          "tflops": 1.0}]
    slow = [(bench.DECODE, 1.0), ("128x128", 3.0)]
    decode = bench.shape_summary(bench.Shape("llm", 1, 4096, 4096, f16), rows(slow), {})
    square = bench.shape_summary(bench.Shape("square", 4096, 4096, 4096, f16), rows(slow),
                                  {})
    assert decode["weak"] == [] and square["weak"] == ["128x128"]
    # nn.linear itself below 70% of a GEMM tile on a decode shape still counts
    flipped = bench.shape_summary(bench.Shape("llm", 16, 4096, 4096, f16),
                                  rows([(bench.DECODE, 3.0), ("128x128", 1.0)]), {})
    assert flipped["weak"] == [bench.DECODE]


def test_a_config_whose_launch_leaves_sms_idle_is_counted_as_warned():
    """A first launch warns of idle SMs (tile_launch.idle_sm_advice); a later shape's first
    call takes the fast path, so the benchmark works the warning out per shape."""
    bench = _bench_gemm()
    m128 = bench.Shape("llm", 128, 4096, 4096, f16)
    big, small = bench.Config((128, 128)), bench.Config((64, 64), max_m=bench.SMALL_M)
    assert "32 tile blocks on 132 SMs" in bench.launch_advice(m128, big, 132)[0]
    assert bench.launch_advice(m128, small, 132) == []
    assert bench.launch_advice(bench.Shape("square", 4096, 4096, 4096, f16),
                               bench.Config((128, 128), schedule="persistent"), 132) == []
    row = {"warnings": bench.launch_advice(m128, bench.Config((256, 128)), 132)}
    assert bench.flagged(row)
    # stream-K: its own advice where it splits all 32 tiles, none where it splits a tail after
    # whole waves (4096^3 with 128 x 128 tiles on 20 SMs: 51 waves, then 4 tiles)
    split = bench.Config((128, 128), schedule="stream-K")
    assert "each of the 32 tiles into pieces" in bench.launch_advice(m128, split, 132)[0]
    assert bench.launch_advice(bench.Shape("square", 4096, 4096, 4096, f16), split, 20) == []


def test_each_config_compiles_the_forms_its_launches_take():
    """``Config.forms`` follows the runtime's rules (runtime/partition.py) on 132 SMs."""
    from fearless.ir import types as T
    bench = _bench_gemm()
    one, pers, sk = (bench.Config((128, 128), schedule=s) for s in ("", "persistent",
                                                                     "stream-K"))
    assert one.forms(4096, 4096, 132) == [None]
    assert pers.forms(4096, 4096, 132) == [T.Persistent()]
    assert pers.forms(128, 4096, 132) == [T.Persistent(single=True)]
    whole, pieces, fixup = (T.Persistent(stream_k=True, phase=p) for p in (1, 2, 3))
    # 1024 tiles: 7 waves, then 100 (over a quarter of 132): run whole
    assert sk.forms(4096, 4096, 132) == [whole]
    # 32 tiles: split; 128 x 14336 with 128 x 256 tiles, 56: too many, one block each
    assert sk.forms(128, 4096, 132) == [pieces, fixup]
    assert bench.Config((128, 256), schedule="stream-K").forms(128, 14336, 132) == [
        T.Persistent(stream_k=True, single=True, phase=1)]
    # 16384^2 in 128 x 128 tiles: 124 waves, then 16 left: whole waves, pieces, fixup
    assert sk.forms(16384, 16384, 132) == [whole, pieces, fixup]


def test_stream_k_is_weighed_against_one_tile_per_block_where_it_splits_the_tail():
    bench = _bench_gemm()

    def rows(configs):
        return [{"config": c, "who": "fearless", "ms": ms, "tflops": 1.0, "pct_cublas": 100 / ms}
                for c, ms in configs] + [{"config": "cuBLAS", "who": "peer", "ms": 1.0,
                                          "tflops": 1.0}]
    times = [("128x128", 2.3), ("128x128 stream-K", 1.9), ("128x256", 4.4),
             ("128x256 stream-K", 4.6)]
    shape = bench.Shape("llm", 128, 4096, 4096, f16)
    split = bench.split_tails(shape, 132)
    assert split == {"128x128 stream-K": "128x128", "128x256 stream-K": "128x256"}
    m128 = bench.shape_summary(shape, rows(times), split)
    assert m128["stream_k"] == {"128x128 stream-K": 2.3 / 1.9, "128x256 stream-K": 4.4 / 4.6}
    # 4096^2: the tail is run whole, so stream-K is not held to it
    square = bench.Shape("square", 4096, 4096, 4096, f16)
    assert bench.split_tails(square, 132) == {}
    assert bench.shape_summary(square, rows(times), {})["stream_k"] == {}
    lines = "\n".join(bench.target_lines(bench.summary([m128])))
    assert "stream-K where it splits the tail: 0.96-1.21x" in lines and "MISSED" in lines
    assert "128x256 stream-K 0.96x" in lines
