"""``fearless demo``: run every example on the GPU when usable, else on the CPU backend.

Each example checks itself against NumPy; the demo prints the backend it used and a table of
first-call time (includes compiling), steady time per launch, effective bandwidth and the worst
error as a fraction of its allowed bound. Exit status 1 when any example failed.
"""
from __future__ import annotations

import importlib
import traceback


def run(png: str) -> int:
    import fearless as fl
    from fearless.examples import NAMES
    from fearless.runtime.device import cuda_probe

    backend = fl.current_backend()
    ok, detail = cuda_probe()
    if backend == "cuda":
        print(f"fearless demo on the GPU: {detail}")
    else:
        why = "FEARLESS_BACKEND/set_backend chose it" if ok else detail
        print(f"fearless demo on the CPU backend ({why})")
    from pathlib import Path
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    print(f"{'example':<16} {'size':<24} {'first ms':>9} {'steady ms':>10} {'GB/s':>8} "
          f"{'err/bound':>9}  result")
    failures = 0
    for name in NAMES:
        module = importlib.import_module(f"fearless.examples.{name}")
        try:
            r = module.run(png) if name == "image_filter" else module.run()
        except Exception as exc:  # report every example, then fail at the end
            failures += 1
            print(f"{name:<16} FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc()
            continue
        print(f"{r.name:<16} {r.size:<24} {r.first_ms:9.2f} {r.steady_ms:10.3f} {r.gbps:8.1f} "
              f"{r.error_ratio:9.3f}  ok vs NumPy" + "".join(f"; {n}" for n in r.notes))
    return 1 if failures else 0
