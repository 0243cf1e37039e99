"""Issue 13's targets over ``bench_gemm.py``'s rows: per shape the best fearless config and
each config's share of it, then per dtype the verdicts (the square geomean and minimum, the LLM
rows, decode against copy bandwidth, configs under 70% of the best without a warning, stream-K
against one tile per block where it splits the tail, and issue 15's tuner within 1%)."""
from __future__ import annotations

import math

from fearless.errors import OccupancyWarning, PerformanceWarning
from fearless.nn.linear import DECODE_MAX_T

TARGETS = {"square_geomean": 0.98, "square_min": 0.95, "llm_min": 0.95, "copy": 0.85,
           "of_best": 0.70}
DECODE = "nn.linear"   # the config name of fearless.nn.linear (its default plan: split-K, decode)
TUNED = "ft.autotune"   # the config name of the autotuned row (issue 15's target: within 1%)


def flagged(row: dict) -> bool:
    """Whether the row's compile or launch raised a PerformanceWarning (it says why it is
    slow)."""
    return any(w.startswith((PerformanceWarning.__name__ + ":", OccupancyWarning.__name__ + ":"))
               for w in row.get("warnings", ()))


def shape_summary(shape, rows: list[dict], split: dict) -> dict:
    """Best fearless config (fastest correct row) and each fearless row's % of it; ``weak``:
    the configs offered for the ``Shape`` below 70% of the best without a compile warning;
    ``stream_k``: for each stream-K config in ``split`` (its name: the name of the same tile one
    per block; those whose last wave it splits), its speed-up over that tile one per block."""
    cublas = next((r for r in rows if r["config"] == "cuBLAS"), None)
    good = [r for r in rows if r["who"] == "fearless" and r.get("ok", True)]
    best = min(good, key=lambda r: r["ms"], default=None)
    s = {"shape": shape.label, "kind": shape.kind, "dtype": shape.dtype.name, "m": shape.m,
         "n": shape.n, "k": shape.k, "best": best and best["config"],
         "cublas_tflops": cublas and cublas["tflops"],
         "peers": {r["config"]: r.get("pct_cublas") for r in rows if r["who"] == "peer"
                   and r["config"] != "cuBLAS" and r.get("ok", True)}, "weak": []}
    if best is None:
        return s
    s.update(tflops=best["tflops"], pct_cublas=best.get("pct_cublas"),
             pct_copy=best.get("pct_copy"), configs={})
    for r in rows:
        if r["who"] == "fearless":
            r["pct_best"] = 100 * best["ms"] / r["ms"]
            s["configs"][r["config"]] = r["pct_best"]
            # for a decode shape fearless offers nn.linear's GEMV; the GEMM tiles (128 rows
            # for 1 or 16) are timed for scale only
            offered = not shape.decode or r["config"] == DECODE
            if offered and r["pct_best"] < 100 * TARGETS["of_best"] and not flagged(r):
                s["weak"].append(r["config"])
    timed = {r["config"]: r["ms"] for r in good}
    s["stream_k"] = {sk: timed[one] / timed[sk] for sk, one in split.items()
                     if sk in timed and one in timed}
    return s


def summary(shapes: list[dict]) -> dict:
    """The issue's targets per dtype, over the shapes run."""
    out: dict = {}
    for dt in ("f16", "bf16"):
        mine = [s for s in shapes if s["dtype"] == dt and s.get("pct_cublas") is not None]
        square = [s for s in mine if s["kind"] == "square" and s["m"] >= 2048]
        llm = [s for s in mine if s["kind"] == "llm" and s["m"] >= 128]
        decode = [s for s in shapes if s["dtype"] == dt and s["kind"] == "llm"
                  and s["m"] <= DECODE_MAX_T]
        d: dict = {}
        if square:
            ratios = [s["pct_cublas"] / 100 for s in square]
            d["square_geomean_pct"] = 100 * math.exp(sum(map(math.log, ratios)) / len(ratios))
            d["square_min_pct"] = 100 * min(ratios)
        if llm:
            d["llm_min_pct"] = min(s["pct_cublas"] for s in llm)
            d["llm_below"] = [s["shape"] for s in llm
                              if s["pct_cublas"] < 100 * TARGETS["llm_min"]]
        if decode:
            d["copy_min_pct"] = min((s.get("pct_copy") or 0.0) for s in decode)
            d["copy_below"] = [s["shape"] for s in decode
                               if (s.get("pct_copy") or 0.0) < 100 * TARGETS["copy"]]
        d["weak_configs"] = [f"{s['shape']}: {c}" for s in shapes if s["dtype"] == dt
                             for c in s["weak"]]
        d["stream_k"] = [(s["shape"], c, x) for s in mine for c, x in s.get("stream_k", {}).items()]
        tuned = [s for s in mine if TUNED in s.get("configs", {})]
        if tuned:   # issue 15: the tuned GEMM within 1% of the best hand-picked config
            d["tuned_min_pct"] = min(s["configs"][TUNED] for s in tuned)
        if any(s["dtype"] == dt for s in shapes):
            out[dt] = d
    return out


def target_lines(summ: dict) -> list[str]:
    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"
    lines = ["\ntargets (issue 13):"]
    for dt, d in summ.items():
        if "square_geomean_pct" in d:
            ok = d["square_geomean_pct"] >= 100 * TARGETS["square_geomean"] and \
                d["square_min_pct"] >= 100 * TARGETS["square_min"]
            lines.append(f"  {dt} square 2048+: geomean {d['square_geomean_pct']:.1f}% of "
                         f"cuBLAS (>= 98), min {d['square_min_pct']:.1f}% (>= 95): {verdict(ok)}")
        if "llm_min_pct" in d:
            lines.append(f"  {dt} LLM M >= 128: min {d['llm_min_pct']:.1f}% of cuBLAS (>= 95 "
                         f"each): {verdict(not d['llm_below'])}"
                         + "".join(f"\n      below: {s}" for s in d["llm_below"]))
        if "copy_min_pct" in d:
            lines.append(f"  {dt} LLM M <= 16: min {d['copy_min_pct']:.1f}% of copy bandwidth "
                         f"(>= 85 each): {verdict(not d['copy_below'])}"
                         + "".join(f"\n      below: {s}" for s in d["copy_below"]))
        if d.get("stream_k"):
            slow = [f"{shape}: {c} {x:.2f}x" for shape, c, x in d["stream_k"] if x <= 1.0]
            ups = [x for *_, x in d["stream_k"]]
            lines.append(f"  {dt} stream-K where it splits the tail: {min(ups):.2f}-"
                         f"{max(ups):.2f}x one tile per block (> 1 each): {verdict(not slow)}"
                         + "".join(f"\n      below: {w}" for w in slow))
        if "tuned_min_pct" in d:
            lines.append(f"  {dt} ft.autotune: at worst {d['tuned_min_pct']:.1f}% of the best "
                         f"config (issue 15: >= 99): {verdict(d['tuned_min_pct'] >= 99)}")
        lines.append(f"  {dt} every config >= 70% of its shape's best or warned (compile, launch): "
                     f"{verdict(not d['weak_configs'])}"
                     + "".join(f"\n      {w}" for w in d["weak_configs"]))
    return lines
