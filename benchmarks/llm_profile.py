"""bench_llm's ``profile`` part: device time per kernel of the captured decode step.

After a ``generate`` (which compiles, captures the decode step and leaves it captured), the
step's graph is replayed ``STEPS`` more times under ``torch.profiler`` (CUPTI); kernel time is
summed by kernel name and divided by the steps, beside the wall clock of a step. Only decode
steps are counted (no prefill kernel). With programmatic dependent launch (PDL, fearless's
default) a kernel starts before the one it waits for ends, and CUPTI counts the wait in its
time: run with ``FEARLESS_PDL=0`` (the kernels compile without it) for per-kernel times; the
part says so when PDL is on. The profiler lengthens the gaps between kernels.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict

import fearless as fl

STEPS = 64     # replays profiled (the cache has room: generate's context rounds up to 256)
SHOWN = 12     # kernels listed per batch


def decode_profile(rep, name, model, torch, rng, batches, context, new) -> None:
    from torch.profiler import ProfilerActivity, profile
    if os.environ.get("FEARLESS_PDL", "1") != "0":
        rep.log("profile: PDL is on, so each kernel's time includes its wait for the one "
                "before; FEARLESS_PDL=0 gives per-kernel times")
    for b in batches:
        prompt = rng.integers(0, model.config.vocab_size, (b, context))
        model.generate(prompt, new + 1)
        # generate leaves its decoder's step captured until the next call: replay that
        (dec,) = model._decoders.values()
        if dec.graph is None:
            rep.log(f"profile: batch {b}: the decode step was not captured; skipped")
            continue
        fl.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(STEPS):
                dec.graph.replay()
            fl.synchronize()
            wall = (time.perf_counter() - start) / STEPS
        per = defaultdict(lambda: [0, 0.0])     # kernel -> [launches, us]
        for e in prof.events():
            if e.device_type.name == "CUDA" and e.device_time_total > 0 and \
                    not e.name.startswith(("Memcpy", "Memset")):
                per[e.name[:48]][0] += 1
                per[e.name[:48]][1] += e.device_time_total
        total = sum(us for _, us in per.values()) / STEPS
        launches = sum(n for n, _ in per.values()) / STEPS
        rep.row(name, f"decode step b{b}: kernel time / wall", total, "us",
                f"{wall * 1e6:.0f} us wall under the profiler, {launches:.0f} launches")
        for kernel, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:SHOWN]:
            rep.row(name, f"  b{b} {kernel}", us / STEPS, "us/step",
                    f"{n / STEPS:.1f} per step, {us / n:.2f} us each")
    model.free_caches()
